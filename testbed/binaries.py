"""Build and cache etcd and the Kubernetes binaries from the pinned Go module.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, the
kubelet and kube-proxy: the real components a user's cluster has, at the release the project
targets; and KWOK, which plays the kubelet of many simulated nodes.

The binaries come from ``hack/k8s-bins`` (a Go module that pins Kubernetes and
its staging modules), so tests run the exact release the project targets
without containers or downloads of prebuilt archives. A build takes minutes on
a fresh machine, so the result is cached per Kubernetes version, and keyed by a
hash of the module's inputs so that editing go.mod or a Go source rebuilds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from testbed.processes import wait_reporting

REPO_ROOT = Path(__file__).resolve().parents[1]
MODULE_DIR = REPO_ROOT / "hack" / "k8s-bins"
COMPAT_MODULE_DIRS = {"1.36": REPO_ROOT / "hack" / "k8s-bins-1.36"}
"""Earlier Kubernetes releases still supported: only their control-plane components are
built from these modules; etcd, kubectl, the kubelet and KWOK come from MODULE_DIR."""
CACHE_ENV = "FLUENCE_K8S_CACHE"
"""Directory that replaces ``~/.cache/fluence`` as the root of the binary cache."""

# Import paths built by `go build`, relative to MODULE_DIR; output file names follow
# the last path element.
BUILD_TARGETS = (
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    "k8s.io/kubernetes/cmd/kubectl",
    "k8s.io/kubernetes/cmd/kubelet",
    "k8s.io/kubernetes/cmd/kube-proxy",
    "sigs.k8s.io/kwok/cmd/kwok",
    "./etcd",
)
COMPONENT_TARGETS = BUILD_TARGETS[:3]
"""What a compatibility module builds: kube-apiserver, kube-controller-manager, kube-scheduler."""
# Packages of MODULE_DIR that the build compiles; other Go programs placed in the
# module are not part of the key, so adding one does not invalidate the cache.
KEYED_PACKAGE_DIRS = (".", "etcd")
KEY_FILE = "BUILD-KEY"
PROGRESS_INTERVAL_S = 15.0

_KUBERNETES_REQUIRE = re.compile(
    r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\d+\.\d+\.\d+\S*)", re.M
)


class BinariesError(RuntimeError):
    """The control-plane binaries could not be located or built."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the built executables."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kubelet: Path
    kube_proxy: Path
    kwok: Path

    def all(self) -> tuple[Path, ...]:
        return (
            self.etcd,
            self.kube_apiserver,
            self.kube_controller_manager,
            self.kube_scheduler,
            self.kubectl,
            self.kubelet,
            self.kube_proxy,
            self.kwok,
        )


def kubernetes_version(module_dir: Path = MODULE_DIR) -> str:
    """The Kubernetes release pinned by the module's go.mod, e.g. ``v1.36.3``."""
    go_mod = module_dir / "go.mod"
    try:
        text = go_mod.read_text()
    except OSError as exc:
        raise BinariesError(
            f"cannot read {go_mod}: {exc}; run from a fluence checkout that has hack/k8s-bins"
        ) from exc
    match = _KUBERNETES_REQUIRE.search(text)
    if match is None:
        raise BinariesError(
            f"{go_mod} does not require k8s.io/kubernetes; add `require k8s.io/kubernetes vX.Y.Z`"
        )
    return match.group(1)


def cache_key(module_dir: Path = MODULE_DIR) -> str:
    """Hash of go.mod, go.sum and the Go sources of the built packages.

    Any change to these inputs can change the binaries, so it must rebuild them.
    """
    digest = hashlib.sha256()
    files = [module_dir / "go.mod", module_dir / "go.sum"]
    for package in KEYED_PACKAGE_DIRS:
        files.extend(sorted((module_dir / package).glob("*.go")))
    for path in files:
        if not path.is_file():
            continue
        digest.update(path.relative_to(module_dir).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    """Root of fluence's caches: ``$FLUENCE_K8S_CACHE`` or ``~/.cache/fluence``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fluence"


def cache_dir(module_dir: Path = MODULE_DIR) -> Path:
    """Directory holding ``bin/`` for the pinned version, e.g. ``~/.cache/fluence/k8s-v1.36.3``."""
    suffix = "-components" if targets_of(module_dir) == COMPONENT_TARGETS else ""
    return cache_root() / f"k8s-{kubernetes_version(module_dir)}{suffix}"


def _binaries_in(bin_dir: Path) -> Binaries:
    return Binaries(
        etcd=bin_dir / "etcd",
        kube_apiserver=bin_dir / "kube-apiserver",
        kube_controller_manager=bin_dir / "kube-controller-manager",
        kube_scheduler=bin_dir / "kube-scheduler",
        kubectl=bin_dir / "kubectl",
        kubelet=bin_dir / "kubelet",
        kube_proxy=bin_dir / "kube-proxy",
        kwok=bin_dir / "kwok",
    )


def cached_binaries(module_dir: Path = MODULE_DIR) -> Binaries | None:
    """The cached binaries if they exist and were built from the current inputs."""
    bin_dir = cache_dir(module_dir) / "bin"
    try:
        recorded = (bin_dir / KEY_FILE).read_text().strip()
    except OSError:
        return None
    if recorded != cache_key(module_dir):
        return None
    binaries = _binaries_in(bin_dir)
    for target in targets_of(module_dir):
        if not os.access(bin_dir / target.rsplit("/", 1)[-1], os.X_OK):
            return None
    return binaries


def targets_of(module_dir: Path) -> tuple[str, ...]:
    """Everything from the main module (it has etcd/), the components from a compatibility one."""
    return BUILD_TARGETS if (module_dir / "etcd").is_dir() else COMPONENT_TARGETS


def ensure_release(minor: str | None = None, *, log: TextIO | None = None) -> Binaries:
    """The binaries for Kubernetes ``minor`` ("1.36"; None: the pinned default release)."""
    base = ensure_binaries(MODULE_DIR, log=log)
    if minor is None or kubernetes_version(MODULE_DIR).startswith(f"v{minor}."):
        return base
    module = COMPAT_MODULE_DIRS.get(minor)
    if module is None:
        known = sorted({kubernetes_version(MODULE_DIR)[1:].rsplit(".", 1)[0], *COMPAT_MODULE_DIRS})
        raise BinariesError(f"Kubernetes {minor} is not supported here; choose one of {known}")
    components = ensure_binaries(module, log=log)
    return Binaries(
        etcd=base.etcd,
        kube_apiserver=components.kube_apiserver,
        kube_controller_manager=components.kube_controller_manager,
        kube_scheduler=components.kube_scheduler,
        kubectl=base.kubectl,
        kubelet=base.kubelet,
        kube_proxy=base.kube_proxy,
        kwok=base.kwok,
    )


def ldflags(version: str) -> str:
    """Linker flags that stamp the Kubernetes version into the binaries (as `make` would)."""
    match = re.match(r"v(\d+)\.(\d+)", version)
    if match is None:
        raise BinariesError(
            f"unexpected Kubernetes version {version!r}; expected vMAJOR.MINOR.PATCH"
        )
    major, minor = match.groups()
    pkg = "k8s.io/component-base/version"
    return f"-X {pkg}.gitVersion={version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"


def build_command(
    version: str, out_dir: Path, targets: tuple[str, ...] = BUILD_TARGETS
) -> list[str]:
    """The `go build` invocation, run from the module directory."""
    return [
        "go",
        "build",
        "-trimpath",
        "-ldflags",
        ldflags(version),
        "-o",
        f"{out_dir}{os.sep}",
        *targets,
    ]


@contextlib.contextmanager
def _file_lock(path: Path, log: TextIO) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[k8s-bins] waiting for another build to finish ({path})", file=log, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _forward(proc: subprocess.Popen[str], log: TextIO) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        log.flush()


def _run_build(cmd: list[str], module_dir: Path, log: TextIO) -> None:
    env = dict(os.environ, CGO_ENABLED="0")
    proc = subprocess.Popen(
        cmd, cwd=module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # go's own messages (downloads, compile errors) are forwarded line by line.
    forwarder = threading.Thread(target=_forward, args=(proc, log), daemon=True)
    forwarder.start()
    code = wait_reporting(proc, "[k8s-bins] go build", log, PROGRESS_INTERVAL_S)
    forwarder.join(5.0)
    if code != 0:
        raise BinariesError(
            f"`{' '.join(cmd)}` failed with exit code {code} in {module_dir}; "
            "see the go output above (a network error means the Go module proxy was unreachable)"
        )


def ensure_binaries(module_dir: Path = MODULE_DIR, *, log: TextIO | None = None) -> Binaries:
    """Return the cached binaries, building them first if missing or stale.

    The build goes into a temporary directory next to the cache and is renamed
    into place, so an interrupted build never leaves a partial cache. A file lock
    makes concurrent callers wait for one build instead of running two.
    """
    out = log if log is not None else sys.stderr
    found = cached_binaries(module_dir)
    if found is not None:
        return found
    if shutil.which("go") is None:
        raise BinariesError(
            "the `go` toolchain is not on PATH; install Go (the version in "
            f"{module_dir / 'go.mod'}) to build etcd, kube-apiserver and kube-scheduler"
        )
    version = kubernetes_version(module_dir)
    target = cache_dir(module_dir)
    targets = targets_of(module_dir)
    with _file_lock(target / ".build.lock", out):
        found = cached_binaries(module_dir)
        if found is not None:
            return found
        key = cache_key(module_dir)
        staging = Path(tempfile.mkdtemp(prefix="bin.building-", dir=target))
        staging.chmod(0o755)
        try:
            print(
                f"[k8s-bins] building {', '.join(t.rsplit('/', 1)[-1] for t in targets)} "
                f"(Kubernetes {version}) "
                f"into {target / 'bin'}; a first build takes several minutes",
                file=out,
                flush=True,
            )
            started = time.monotonic()
            _run_build(build_command(version, staging, targets), module_dir, out)
            (staging / KEY_FILE).write_text(key + "\n")
            _swap_into_place(staging, target / "bin")
            print(f"[k8s-bins] built in {time.monotonic() - started:.1f}s", file=out, flush=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    found = cached_binaries(module_dir)
    if found is None:
        raise BinariesError(
            f"the build finished but {target / 'bin'} is incomplete; remove it and retry"
        )
    return found


def _swap_into_place(new: Path, final: Path) -> None:
    """Replace ``final`` by ``new`` with renames only (callers hold the build lock)."""
    if final.exists():
        old = final.with_name(f"bin.old-{os.getpid()}")
        final.rename(old)
        new.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        new.rename(final)
