"""Container images for the real node, built here from Debian packages and the repository.

No image registry is reachable from the machines this project is tested on, so
every image a pod of the real node runs is built locally with ``buildah`` (a
Debian package), saved as an OCI archive under ``~/.cache/fluence/images`` and
imported into the node's containerd under the name its manifest uses:

- ``busybox:1.36`` and the pod sandbox, from Debian's ``busybox-static``
  (recipes in ``testbed/images/``);
- ``fluence:<version>``, from the repository's own ``Dockerfile``, over two
  Debian bookworm bases made with ``mmdebstrap`` (the Dockerfile takes its
  base images as build arguments);
- ``registry.k8s.io/kube-scheduler:<version>``, holding the pinned kube-scheduler
  binary, so the shipped scheduler Deployment runs unchanged.

An archive is keyed by a hash of what it is built from and rebuilt only when
that changes; builds print progress, since the first takes minutes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from testbed.binaries import cache_root
from testbed.processes import wait_reporting

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = Path(__file__).with_name("images")
BUSYBOX = Path("/bin/busybox")
BUSYBOX_PACKAGE = "busybox-static"
DEBIAN_SUITE = "bookworm"
# Debian packages of the two bases the Dockerfile builds over.
RUNTIME_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BUILD_PACKAGES = (*RUNTIME_PACKAGES, "python3-dev", "g++", "cmake", "ninja-build")
# What the Dockerfile copies: a change to any of it rebuilds the fluence image.
FLUENCE_INPUTS = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "CMakeLists.txt",
    "README.md",
    "fluxion_nb",
    "fluence",
    "scheduler_extender",
    "webhook",
    "deviceplugin",
)
# Host files a build step needs to reach PyPI as the host does (its CA bundle, pip's
# settings); mounted read-only while the recipe runs, never stored in the image.
HOST_PIP_FILES = (Path("/etc/ssl/certs"), Path("/etc/pip.conf"))
PROGRESS_INTERVAL_S = 30.0


class ImageBuildError(RuntimeError):
    """An image could not be built (the message says what to install or what failed)."""


@dataclass(frozen=True)
class Image:
    """One busybox-based image: its recipe and the names containerd knows it by."""

    recipe: str
    """File name in ``testbed/images/``."""
    names: tuple[str, ...]
    """Image references pods (or containerd's sandbox setting) use."""


PAUSE = Image("pause.Containerfile", ("localhost/fluence/pause:1",))
"""Each pod's sandbox: holds the pod's namespaces until the pod ends."""
BUSYBOX_IMAGE = Image("busybox.Containerfile", ("docker.io/library/busybox:1.36",))
"""The image the examples and tests run (``busybox:1.36``)."""
NODE_IMAGES = (PAUSE, BUSYBOX_IMAGE)


def images_dir() -> Path:
    return cache_root() / "images"


def missing_tools() -> str | None:
    """Why images cannot be built here (one line), or None when they can."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (Debian package `buildah`)"
    if not BUSYBOX.is_file():
        return f"{BUSYBOX} is missing (Debian package `{BUSYBOX_PACKAGE}`)"
    return None


# Building ----------------------------------------------------------------------------


def _digest(parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _run(argv: list[str], log: TextIO, what: str) -> None:
    """Run a build command, printing progress while it takes long, and its output on failure."""
    with tempfile.TemporaryFile("w+") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, text=True)
        code = wait_reporting(proc, f"[images] {what}", log, PROGRESS_INTERVAL_S)
        if code != 0:
            output.seek(0)
            text = output.read()
            raise ImageBuildError(
                f"{what}: `{' '.join(argv[:2])} ... {argv[-1]}` failed with exit code {code}:\n"
                f"{text[-4000:]}"
            )


class _Buildah:
    """buildah with its own storage under the image cache (vfs: no overlay mounts needed)."""

    def __init__(self, run_dir: Path) -> None:
        found = shutil.which("buildah")
        if found is None:
            raise ImageBuildError("buildah is not installed; install the Debian package `buildah`")
        self.argv = [
            found,
            f"--root={images_dir() / 'buildah' / 'root'}",
            f"--runroot={run_dir}",
            "--storage-driver=vfs",
        ]

    def has(self, name: str) -> bool:
        done = subprocess.run(
            [*self.argv, "images", "--quiet", name], capture_output=True, text=True, check=False
        )
        return done.returncode == 0 and bool(done.stdout.strip())

    def bud(
        self,
        recipe: Path,
        context: Path,
        tag: str,
        log: TextIO,
        *,
        build_args: Mapping[str, str] | None = None,
        network: bool = False,
    ) -> None:
        argv = [*self.argv, "bud", "--isolation=chroot", "--layers=false", "-f", str(recipe)]
        for key, value in (build_args or {}).items():
            argv.append(f"--build-arg={key}={value}")
        if network:
            argv.append("--network=host")
            argv += [f"--volume={p}:{p}:ro" for p in HOST_PIP_FILES if p.exists()]
        _run([*argv, "-t", tag, str(context)], log, tag)

    def save(self, tag: str, name: str, target: Path, log: TextIO) -> None:
        """Write ``tag`` to ``target`` as an OCI archive whose image is called ``name``."""
        partial = target.with_suffix(f".{os.getpid()}.partial")
        try:
            _run([*self.argv, "push", tag, f"oci-archive:{partial}:{name}"], log, name)
            partial.rename(target)
        finally:
            partial.unlink(missing_ok=True)

    def remove(self, tag: str) -> None:
        subprocess.run([*self.argv, "rmi", "--force", tag], capture_output=True, check=False)


@contextlib.contextmanager
def _buildah() -> Iterator[_Buildah]:
    with tempfile.TemporaryDirectory(prefix="fluence-buildah-") as run_dir:
        yield _Buildah(Path(run_dir))


def _archive(stem: str, key: str) -> Path:
    return images_dir() / f"{stem}-{key}.oci.tar"


def _drop_stale(stem: str, keep: Path) -> None:
    for stale in keep.parent.glob(f"{stem}-*.oci.tar"):
        if stale != keep:
            stale.unlink(missing_ok=True)


def _build_archive(
    stem: str,
    key: str,
    name: str,
    recipe: Path,
    context: Path,
    log: TextIO,
    *,
    build_args: Mapping[str, str] | None = None,
    network: bool = False,
) -> Path:
    target = _archive(stem, key)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"[images] building {name} with buildah", file=log, flush=True)
    started = time.monotonic()
    with _buildah() as buildah:
        tag = f"localhost/fluence-build/{stem}:{key}"
        try:
            buildah.bud(recipe, context, tag, log, build_args=build_args, network=network)
            buildah.save(tag, name, target, log)
        finally:
            buildah.remove(tag)
    _drop_stale(stem, target)
    print(f"[images] {name} built in {time.monotonic() - started:.0f}s", file=log, flush=True)
    return target


# busybox images -----------------------------------------------------------------------


def _busybox() -> Path:
    if not BUSYBOX.is_file():
        raise ImageBuildError(
            f"{BUSYBOX} is missing; install the Debian package `{BUSYBOX_PACKAGE}`"
        )
    return BUSYBOX


def _busybox_context(directory: Path) -> None:
    """``bin/`` with busybox and a link per applet, as its --install would make."""
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    shutil.copy2(_busybox(), bin_dir / "busybox")
    applets = subprocess.run(
        [str(_busybox()), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox" and "/" not in applet:
            (bin_dir / applet).symlink_to("busybox")


def ensure_image(image: Image, *, log: TextIO | None = None) -> Path:
    """The busybox image's OCI archive, built first when its recipe or busybox changed."""
    out = log if log is not None else sys.stderr
    recipe = RECIPES / image.recipe
    key = _digest([recipe.read_bytes(), _busybox().read_bytes(), "\n".join(image.names).encode()])
    stem = image.recipe.removesuffix(".Containerfile")
    if _archive(stem, key).is_file():
        return _archive(stem, key)
    with tempfile.TemporaryDirectory(prefix="fluence-image-") as tmp:
        context = Path(tmp)
        _busybox_context(context)
        return _build_archive(stem, key, image.names[0], recipe, context, out)


# Debian bases and the fluence image ----------------------------------------------------


def _debian_base(kind: str, packages: tuple[str, ...], buildah: _Buildah, log: TextIO) -> str:
    """A Debian base in buildah's storage, made from ``packages``; returns its tag."""
    key = _digest([DEBIAN_SUITE.encode(), *(p.encode() for p in packages)])
    tag = f"localhost/fluence/debian-{kind}:{key}"
    if buildah.has(tag):
        return tag
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise ImageBuildError(
            "mmdebstrap is not installed; install the Debian package `mmdebstrap`"
        )
    print(f"[images] making a Debian {DEBIAN_SUITE} {kind} base ({', '.join(packages)})", file=log)
    with tempfile.TemporaryDirectory(prefix="fluence-base-") as tmp:
        context = Path(tmp)
        # The machine's own apt sources; checks of index dates off, as for its own apt.
        _run(
            [
                mmdebstrap,
                "--variant=apt",
                f"--include={','.join(packages)}",
                '--aptopt=Acquire::Check-Valid-Until "false"',
                '--aptopt=Acquire::Check-Date "false"',
                DEBIAN_SUITE,
                str(context / "rootfs.tar"),
            ],
            log,
            f"debian-{kind}",
        )
        buildah.bud(RECIPES / "debian-base.Containerfile", context, tag, log)
    return tag


def _fluence_files() -> list[Path]:
    """Every file the Dockerfile may copy, as git sees the working tree (untracked ones too)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", *FLUENCE_INPUTS],
        cwd=REPO_ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        raise ImageBuildError(f"git ls-files failed in {REPO_ROOT}: {listed.stderr.decode()}")
    paths = {REPO_ROOT / p.decode() for p in listed.stdout.split(b"\0") if p}
    return sorted(p for p in paths if p.is_file())


def fluence_version() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text(), re.M)
    if match is None:
        raise ImageBuildError("pyproject.toml has no version")
    return match.group(1)


def fluence_image_name() -> str:
    """What the manifests' ``fluence:<version>`` means to containerd."""
    return f"docker.io/library/fluence:{fluence_version()}"


def ensure_fluence_image(*, log: TextIO | None = None) -> Path:
    """The fluence image built from the Dockerfile over Debian bases, as an OCI archive."""
    out = log if log is not None else sys.stderr
    files = _fluence_files()
    key = _digest(
        [
            *(f"{p.relative_to(REPO_ROOT)}".encode() for p in files),
            *(p.read_bytes() for p in files),
            *(p.encode() for p in BUILD_PACKAGES + RUNTIME_PACKAGES),
        ]
    )
    if _archive("fluence", key).is_file():
        return _archive("fluence", key)
    with _buildah() as buildah:
        build_base = _debian_base("build", BUILD_PACKAGES, buildah, out)
        runtime_base = _debian_base("runtime", RUNTIME_PACKAGES, buildah, out)
    return _build_archive(
        "fluence",
        key,
        fluence_image_name(),
        REPO_ROOT / "Dockerfile",
        REPO_ROOT,
        out,
        build_args={"BUILD_BASE": build_base, "RUNTIME_BASE": runtime_base},
        network=True,
    )


def ensure_scheduler_image(binary: Path, version: str, *, log: TextIO | None = None) -> Path:
    """``registry.k8s.io/kube-scheduler:<version>`` holding the pinned kube-scheduler binary."""
    out = log if log is not None else sys.stderr
    recipe = RECIPES / "kube-scheduler.Containerfile"
    key = _digest([recipe.read_bytes(), binary.read_bytes()])
    if _archive("kube-scheduler", key).is_file():
        return _archive("kube-scheduler", key)
    with tempfile.TemporaryDirectory(prefix="fluence-image-") as tmp:
        context = Path(tmp)
        shutil.copy2(binary, context / "kube-scheduler")
        return _build_archive(
            "kube-scheduler",
            key,
            f"registry.k8s.io/kube-scheduler:{version}",
            recipe,
            context,
            out,
        )


# The QRMI example's image ------------------------------------------------------------

QRMI_EXAMPLE_DIR = REPO_ROOT / "examples" / "qrmi"
QRMI_EXAMPLE_IMAGE = "docker.io/library/fluence-qrmi-example:0.1.0"
"""What ``examples/qrmi/job.yaml``'s ``fluence-qrmi-example:0.1.0`` means to containerd."""


def _copied_sources(recipe: Path) -> list[Path]:
    """The context files a recipe's ``COPY`` lines name (each line's sources: all but the
    last word), so a change to any of them, or a new one, rebuilds the image."""
    sources: set[Path] = set()
    for line in recipe.read_text().splitlines():
        words = line.split()
        if words and words[0].upper() == "COPY":
            sources.update(recipe.parent / w for w in words[1:-1] if not w.startswith("--"))
    return sorted(sources)


def ensure_qrmi_example_image(*, log: TextIO | None = None) -> Path:
    """The QRMI example's image, built from ``examples/qrmi/Containerfile`` as shipped over
    the Debian runtime base (python3 and its venv module), ``qrmi`` installed by pip from
    the package index; keyed by the recipe and the files it copies."""
    out = log if log is not None else sys.stderr
    recipe = QRMI_EXAMPLE_DIR / "Containerfile"
    inputs = [recipe, *_copied_sources(recipe)]
    key = _digest(
        [
            *(f"{p.relative_to(REPO_ROOT)}".encode() for p in inputs),
            *(p.read_bytes() for p in inputs),
            *(p.encode() for p in RUNTIME_PACKAGES),
        ]
    )
    if _archive("qrmi-example", key).is_file():
        return _archive("qrmi-example", key)
    with _buildah() as buildah:
        base = _debian_base("runtime", RUNTIME_PACKAGES, buildah, out)
    return _build_archive(
        "qrmi-example",
        key,
        QRMI_EXAMPLE_IMAGE,
        recipe,
        QRMI_EXAMPLE_DIR,
        out,
        build_args={"BASE": base},
        network=True,
    )
