"""The flexible traverser: xor_slot alternatives (one used, tried in jobspec order) and or-slots.

The simple traverser keeps refusing both forms as input errors.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from fluxion_nb import Graph, InputError, cli
from fluxion_nb.examples import pooled_cluster


def _alternatives(*shapes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "resources": [
            {"type": "xor_slot", "count": 1, "label": f"alt{i}", "with": shape}
            for i, shape in enumerate(shapes)
        ],
        "tasks": [{"command": ["app"], "slot": "alt0", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 3600}},
    }


GPU_OR_CPU = _alternatives(
    [{"type": "core", "count": 1000}, {"type": "gpu", "count": 1}],
    [{"type": "core", "count": 1000}],
)


def test_graph_reports_its_traverser() -> None:
    assert Graph(pooled_cluster()).traverser == "simple"
    assert Graph(pooled_cluster(), traverser="flexible").traverser == "flexible"


def test_first_alternative_that_fits_is_used() -> None:
    g = Graph(pooled_cluster(nodes=1, gpus=1), traverser="flexible")
    with_gpu = g.match(GPU_OR_CPU)
    assert with_gpu.status == "allocated"
    assert set(with_gpu.by_node()["worker0"]) == {"core", "gpu"}
    assert g.match(GPU_OR_CPU).status == "busy"


def test_later_alternative_is_used_when_the_first_cannot_fit() -> None:
    g = Graph(pooled_cluster(nodes=1, gpus=0), traverser="flexible")
    cpu_only = g.match(GPU_OR_CPU)
    assert cpu_only.status == "allocated"
    assert set(cpu_only.by_node()["worker0"]) == {"core"}


def test_simple_traverser_refuses_alternatives() -> None:
    with pytest.raises(InputError, match="needs the flexible traverser"):
        Graph(pooled_cluster()).match(GPU_OR_CPU)


def test_flexible_traverser_refuses_slots_beside_resources() -> None:
    js = _alternatives([{"type": "core", "count": 1}])
    js["resources"].append({"type": "node", "count": 1})
    with pytest.raises(InputError, match="'node' beside slots"):
        Graph(pooled_cluster(), traverser="flexible").match(js)


def test_flexible_traverser_does_not_take_partial_pools() -> None:
    with pytest.raises(InputError, match="partial pools"):
        Graph(pooled_cluster(), traverser="flexible", partial_pools=True)


def test_cli_takes_the_traverser_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(pooled_cluster(nodes=1)))
    spec = tmp_path / "js.json"
    spec.write_text(json.dumps(GPU_OR_CPU))
    out = tmp_path / "out"
    monkeypatch.setattr("sys.stdin", io.StringIO(f"match allocate {spec}\nquit\n"))
    assert cli.main(["-L", str(graph), "-d", "-T", "flexible", "-t", str(out)]) == 0
    assert "RESOURCES=ALLOCATED" in out.read_text()
    with pytest.raises(SystemExit):
        cli.main(["-L", str(graph), "-T", "sideways"])
    capsys.readouterr()
