"""Cache key and build-once behaviour of testbed.binaries (with a fake `go`)."""

from __future__ import annotations

import io
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from testbed import binaries
from testbed.binaries import BinariesError

FAKE_GO = """#!/bin/sh
# Stands in for `go build ... -o DIR/ targets...`: records the call, writes the outputs.
echo "$@" >> "{calls}"
sleep {delay}
if [ -n "{fail}" ]; then echo "fake go: build failed" >&2; exit 2; fi
out=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out="$arg"; fi
  prev="$arg"
done
for name in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet \\
    kube-proxy kwok; do
  printf '#!/bin/sh\\n' > "$out/$name"; chmod +x "$out/$name"
done
"""


def make_module(root: Path, version: str = "v1.36.3") -> Path:
    module = root / "k8s-bins"
    (module / "etcd").mkdir(parents=True)
    (module / "go.mod").write_text(
        f"module example.com/bins\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/kubernetes {version}\n)\n"
    )
    (module / "go.sum").write_text("k8s.io/kubernetes v1.36.3 h1:abc=\n")
    (module / "tools.go").write_text("package tools\n")
    (module / "etcd" / "main.go").write_text("package main\n")
    return module


def install_fake_go(bin_dir: Path, calls: Path, *, fail: bool = False, delay: float = 0.0) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    go = bin_dir / "go"
    go.write_text(FAKE_GO.format(calls=calls, fail="yes" if fail else "", delay=delay))
    go.chmod(go.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A module dir, a cache root and a fake `go` first on PATH; returns (module, calls)."""
    module = make_module(tmp_path)
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    calls = tmp_path / "go-calls.txt"
    install_fake_go(tmp_path / "fakebin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
    return module, calls


def test_version_comes_from_the_real_go_mod() -> None:
    assert binaries.kubernetes_version() == "v1.37.2"


def test_version_parsed_from_require_block(tmp_path: Path) -> None:
    assert binaries.kubernetes_version(make_module(tmp_path, "v1.35.7")) == "v1.35.7"


def test_go_mod_without_kubernetes_is_a_clear_error(tmp_path: Path) -> None:
    module = make_module(tmp_path)
    (module / "go.mod").write_text("module x\n")
    with pytest.raises(BinariesError, match="does not require k8s.io/kubernetes"):
        binaries.kubernetes_version(module)


def test_cache_key_is_stable_for_unchanged_inputs(tmp_path: Path) -> None:
    module = make_module(tmp_path)
    assert binaries.cache_key(module) == binaries.cache_key(module)


@pytest.mark.parametrize("changed", ["go.mod", "go.sum", "tools.go", "etcd/main.go"])
def test_cache_key_changes_with_each_input(tmp_path: Path, changed: str) -> None:
    module = make_module(tmp_path)
    before = binaries.cache_key(module)
    path = module / changed
    path.write_text(path.read_text() + "// edited\n")
    assert binaries.cache_key(module) != before


def test_cache_key_changes_when_a_built_package_gains_a_file(tmp_path: Path) -> None:
    module = make_module(tmp_path)
    before = binaries.cache_key(module)
    (module / "etcd" / "extra.go").write_text("package main\n")
    assert binaries.cache_key(module) != before


def test_cache_key_ignores_other_programs_in_the_module(tmp_path: Path) -> None:
    module = make_module(tmp_path)
    before = binaries.cache_key(module)
    (module / "otherprog").mkdir()
    (module / "otherprog" / "main.go").write_text("package main\n")
    assert binaries.cache_key(module) == before


def test_cache_dir_is_keyed_by_version_under_the_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "c"))
    assert binaries.cache_dir(make_module(tmp_path)) == tmp_path / "c" / "k8s-v1.36.3"


def test_ldflags_stamp_version_major_minor() -> None:
    flags = binaries.ldflags("v1.36.3")
    assert "version.gitVersion=v1.36.3" in flags
    assert "version.gitMajor=1" in flags
    assert "version.gitMinor=36" in flags


def test_build_command_is_trimmed_static_build_of_every_target(tmp_path: Path) -> None:
    cmd = binaries.build_command("v1.36.3", tmp_path)
    assert cmd[:3] == ["go", "build", "-trimpath"]
    assert cmd[-len(binaries.BUILD_TARGETS) :] == list(binaries.BUILD_TARGETS)
    assert cmd[cmd.index("-o") + 1] == f"{tmp_path}/"


def test_builds_once_then_reuses_the_cache(env: tuple[Path, Path]) -> None:
    module, calls = env
    log = io.StringIO()
    first = binaries.ensure_binaries(module, log=log)
    assert first.kube_apiserver.is_file() and os.access(first.etcd, os.X_OK)
    assert "built in" in log.getvalue()
    second = binaries.ensure_binaries(module, log=io.StringIO())
    assert second == first
    assert len(calls.read_text().splitlines()) == 1


def test_an_input_change_rebuilds(env: tuple[Path, Path]) -> None:
    module, calls = env
    binaries.ensure_binaries(module, log=io.StringIO())
    (module / "go.sum").write_text("changed\n")
    assert binaries.cached_binaries(module) is None
    rebuilt = binaries.ensure_binaries(module, log=io.StringIO())
    assert (rebuilt.kube_scheduler.parent / binaries.KEY_FILE).read_text().strip() == (
        binaries.cache_key(module)
    )
    assert len(calls.read_text().splitlines()) == 2


def test_failed_build_leaves_no_cache(
    env: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, calls = env
    install_fake_go(tmp_path / "fakebin", calls, fail=True)
    with pytest.raises(BinariesError, match="exit code 2"):
        binaries.ensure_binaries(module, log=io.StringIO())
    version_dir = binaries.cache_dir(module)
    assert not (version_dir / "bin").exists()
    assert [p.name for p in version_dir.iterdir() if p.name.startswith("bin")] == []


def test_concurrent_callers_build_once(env: tuple[Path, Path], tmp_path: Path) -> None:
    module, calls = env
    install_fake_go(tmp_path / "fakebin", calls, delay=0.5)
    results: list[binaries.Binaries] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            results.append(binaries.ensure_binaries(module, log=io.StringIO()))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 3 and len(set(results)) == 1
    assert len(calls.read_text().splitlines()) == 1


def test_missing_go_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_module(tmp_path)
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("go") is None
    with pytest.raises(BinariesError, match="`go` toolchain is not on PATH"):
        binaries.ensure_binaries(module, log=io.StringIO())


def test_an_earlier_release_takes_its_components_from_its_own_module(
    env: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, calls = env
    module = make_module(tmp_path / "main", "v1.37.2")
    compat = tmp_path / "compat"
    compat.mkdir()
    (compat / "go.mod").write_text("module x\n\nrequire k8s.io/kubernetes v1.36.3\n")
    (compat / "go.sum").write_text("\n")
    monkeypatch.setattr(binaries, "MODULE_DIR", module)
    monkeypatch.setattr(binaries, "COMPAT_MODULE_DIRS", {"1.36": compat})
    got = binaries.ensure_release("1.36", log=io.StringIO())
    assert got.kube_apiserver.parent.parent.name == "k8s-v1.36.3-components"
    assert got.etcd.parent.parent.name == "k8s-v1.37.2"
    assert binaries.targets_of(compat) == binaries.COMPONENT_TARGETS
    builds = calls.read_text().splitlines()
    assert len(builds) == 2 and builds[1].endswith(" ".join(binaries.COMPONENT_TARGETS))
    assert binaries.ensure_release(None, log=io.StringIO()).etcd == got.etcd
    with pytest.raises(binaries.BinariesError, match="not supported"):
        binaries.ensure_release("1.20", log=io.StringIO())
