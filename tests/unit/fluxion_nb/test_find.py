"""resource-query's find: predicates over the graph, through the typed API and the CLI."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from fluxion_nb import Graph, InputError, cli
from fluxion_nb.examples import pooled_cluster, slot_jobspec


def _names(R: str) -> list[str]:
    """Vertex names of a simple-format R, in emission order."""
    return [line.strip().lstrip("-").split("[")[0] for line in R.splitlines()]


def test_nothing_is_allocated_on_a_fresh_graph() -> None:
    g = Graph(pooled_cluster(nodes=2))
    assert g.find("sched-now=allocated") == ""
    assert _names(g.find("status=up", "simple")) == [
        "core0",
        "memory0",
        "worker0",
        "core1",
        "memory1",
        "worker1",
        "cluster",
    ]


def test_allocated_pools_are_reported_with_the_ancestors_leading_to_them() -> None:
    g = Graph(pooled_cluster(nodes=2), policy="low")
    assert g.match(slot_jobspec(1, 1000, 1024)).ok
    out = g.find("sched-now=allocated", "simple")
    assert _names(out) == ["core0", "memory0", "worker0", "cluster"]
    assert all(line.endswith(":x]") for line in out.splitlines())
    free_cores = g.find("sched-now=free and names=core[0-1]", "simple")
    assert _names(free_cores) == ["core1", "worker1", "cluster"]


def test_down_is_inherited_and_or_folds_left_to_right() -> None:
    g = Graph(pooled_cluster(nodes=2))
    g.set_status("/cluster/worker1", False)
    assert _names(g.find("status=down", "simple")) == ["core1", "memory1", "worker1", "cluster"]
    # (up or down) and names=nowhere: left to right, so nothing.
    assert g.find("status=up or status=down names=nowhere", "simple") == ""


def test_agfilter_reports_aggregate_usage_in_jgf() -> None:
    g = Graph(pooled_cluster(nodes=1), prune_filters="ALL:core,ALL:memory", policy="low")
    g.match(slot_jobspec(1, 1000, 1024))
    doc = json.loads(g.find("agfilter=t", "jgf"))
    by_type = {n["metadata"]["type"]: n["metadata"].get("agfilter") for n in doc["graph"]["nodes"]}
    assert by_type == {
        "node": {"core": "used:4000, total:4000", "memory": "used:8192, total:8192"},
        "cluster": {"core": "used:4000, total:4000", "memory": "used:8192, total:8192"},
    }


@pytest.mark.parametrize(
    "bad", ["", "colour=red", "status=sideways", "(status=up", "status=up and"]
)
def test_bad_criteria_is_an_input_error(bad: str) -> None:
    with pytest.raises(InputError):
        Graph(pooled_cluster(nodes=1)).find(bad)


def _run_cli(tmp_path: Path, graph: dict[str, object], cmds: str, *extra: str) -> str:
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(graph))
    out = tmp_path / "out"
    old = sys.stdin
    sys.stdin = io.StringIO(cmds)
    try:
        assert cli.main(["-L", str(gpath), "-d", "-t", str(out), *extra]) == 0
    finally:
        sys.stdin = old
    return out.read_text()


def test_cli_find_prints_r_then_the_expression(tmp_path: Path) -> None:
    spec = tmp_path / "js.json"
    spec.write_text(json.dumps(slot_jobspec(1, 1000, 1024)))
    text = _run_cli(
        tmp_path,
        pooled_cluster(nodes=1),
        f"match allocate {spec}\ncancel 1 stats\nfind sched-now=free\n",
        "-P",
        "low",
    )
    bar = "INFO: =============================\n"
    assert text.endswith(
        f'{bar}INFO: CANCEL PREORDER COUNT="4"\nINFO: CANCEL POSTORDER COUNT="4"\n{bar}'
        "      ---------core0[4000:x]\n"
        "      ---------memory0[8192:x]\n"
        "      ------worker0[1:x]\n"
        "      ---cluster[1:x]\n"
        f'{bar}INFO: EXPRESSION="sched-now=free"\n{bar}'
    )


def test_cli_remove_by_rank_drops_that_node(tmp_path: Path) -> None:
    text = _run_cli(tmp_path, pooled_cluster(nodes=2), "remove [1] false\nfind status=up\n")
    assert "worker0" in text
    assert "worker1" not in text
