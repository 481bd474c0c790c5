"""Imports run one way: binaries -> fluence -> fluxion_nb; nothing shipped uses testbed or tests."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("fluxion_nb", "fluence", "scheduler_extender", "webhook", "deviceplugin")
FORBIDDEN = {
    "fluxion_nb": {"fluence", "scheduler_extender", "webhook", "deviceplugin", "testbed", "tests"},
    "fluence": {"scheduler_extender", "webhook", "deviceplugin", "testbed", "tests"},
    "scheduler_extender": {"webhook", "deviceplugin", "testbed", "tests"},
    "webhook": {"scheduler_extender", "deviceplugin", "testbed", "tests"},
    "deviceplugin": {"scheduler_extender", "webhook", "testbed", "tests"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", SHIPPED)
def test_shipped_packages_import_only_downwards(package: str) -> None:
    wrong = {
        str(p.relative_to(ROOT)): sorted(imported_packages(p) & FORBIDDEN[package])
        for p in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_the_wheel_lists_exactly_the_shipped_packages() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["scikit-build"]["wheel"]["packages"] == list(SHIPPED)


PLUMBING = {
    "kubernetes",
    "httpx",
    "starlette",
    "fluence.reflectors",
    "fluence.kube_client",
    "fluence.serving",
    "fluence.config_watch",
}
"""What talks to the cluster or serves requests: the scheduling core decides without it."""


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_scheduling_core_uses_no_kubernetes_plumbing() -> None:
    core = sorted((ROOT / "fluence" / "scheduling").glob("*.py")) + [
        ROOT / "fluence" / "ledger.py",
        ROOT / "fluence" / "cluster_graph.py",
        ROOT / "fluence" / "graph_layout.py",
    ]
    wrong = {
        str(p.relative_to(ROOT)): sorted(
            m for m in imported_modules(p) if any(m == x or m.startswith(x + ".") for x in PLUMBING)
        )
        for p in core
    }
    assert {k: v for k, v in wrong.items() if v} == {}
