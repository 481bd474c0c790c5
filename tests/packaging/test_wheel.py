"""The wheel as a user installs it: a fresh virtualenv, no extras, no repository beside it.

Every console script answers ``--help`` with its usage, and every module of
every shipped package imports, so a runtime import that is only a dev
dependency (or a file produced only in a checkout) fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])
PACKAGES = PYPROJECT["tool"]["scikit-build"]["wheel"]["packages"]

IMPORT_ALL = """
import importlib, pkgutil, sys
names = []
for top in sys.argv[1:]:
    package = importlib.import_module(top)
    names.append(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        importlib.import_module(info.name)
        names.append(info.name)
print(len(names))
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build reuses build/<wheel tag>, so only changed sources compile.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        cwd=ROOT,
    )
    (found,) = out.glob("fluence-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the wheel and its declared runtime dependencies only."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    yield env_dir


def run_outside_repo(command: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run with neither the repository nor the dev venv on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = str(Path(command[0]).parent) + os.pathsep + "/usr/bin:/bin"
    return subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)


def test_wheel_ships_the_product_packages_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/", 1)[0] for n in z.namelist() if "/" in n}
        files = set(z.namelist())
    assert {p for p in tops if not p.endswith(".dist-info")} == set(PACKAGES)
    assert "fluxion_nb/_core.pyi" in files, "the generated stubs ship with the extension"
    assert not any(n.startswith(("testbed/", "tests/", "bench/")) for n in files)


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_script_prints_usage(installed: Path, script: str, tmp_path: Path) -> None:
    r = run_outside_repo([str(installed / "bin" / script), "--help"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:"), r.stdout[:300]
    assert "Traceback" not in r.stderr


def test_every_shipped_module_imports(installed: Path, tmp_path: Path) -> None:
    r = run_outside_repo([str(installed / "bin" / "python"), "-c", IMPORT_ALL, *PACKAGES], tmp_path)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) > 50
