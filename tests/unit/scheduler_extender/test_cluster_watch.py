"""Startup rebuild and live following: watch events into the graph and ledger, config reloads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import decode_pod
from fluence.reflectors import ADDED, DELETED, MODIFIED, Handler
from fluence.scheduling.holdings import COMMITTED, FOREIGN
from fluence.scheduling.record import AllocationRecord, encode_record, process_seal
from scheduler_extender.cluster_watch import ClusterWatch, ConfigReloader
from tests.unit.fluence.test_pods import make_node, make_pod


class FakeReflector:
    def __init__(self, items: list[Any]) -> None:
        self._items = items
        self.handlers: list[Handler] = []

    def add_handler(self, fn: Handler) -> None:
        self.handlers.append(fn)

    def items(self) -> list[Any]:
        return list(self._items)

    def emit(self, kind: str, obj: Any) -> None:
        for h in self.handlers:
            h(kind, obj)


class FakeCache:
    def __init__(self, nodes: list[Any], pods: list[Any]) -> None:
        self.nodes = FakeReflector(nodes)
        self.pods = FakeReflector(pods)


def _bound_with_record(name: str, node: str, cpu_m: int) -> Any:
    rec = encode_record(
        AllocationRecord(group=f"default/{name}", node=node, amounts={"core": cpu_m}, jobid=41)
    )
    seal = process_seal().sign(f"default/{name}", f"uid-default-{name}", rec)
    doc = make_pod(
        name,
        cpu=f"{cpu_m}m",
        node=node,
        phase="Running",
        raw=True,
        annotations={names.ANNOTATION_ALLOCATION: rec, names.ANNOTATION_ALLOCATION_SEAL: seal},
    )
    return decode_pod(json.dumps(doc))


def test_startup_replays_bound_pods_before_ready_and_then_follows_events() -> None:
    ours = _bound_with_record("ours", "a", 1500)
    foreign = make_pod("sys", cpu="500m", node="a", scheduler="default-scheduler", phase="Running")
    cache = FakeCache([make_node("a", cpu="4")], [ours, foreign, make_pod("pending")])
    graph = ClusterGraph(resources.parse(""))
    ledger = Ledger(graph)
    rt = ClusterWatch(cache, graph, ledger)  # type: ignore[arg-type]
    cache.nodes.emit(ADDED, make_node("early"))  # before the rebuild: ignored, the list has it
    assert not rt.ready.is_set()
    rt.rebuild()
    assert rt.ready.is_set()
    assert graph.node_usage()["a"]["core"]["allocated"] == 2000
    assert {k: h.state for k, h in ledger.holdings().items()} == {
        "default/ours": COMMITTED,
        "default/sys": FOREIGN,
    }
    cache.nodes.emit(ADDED, make_node("b", cpu="2"))
    assert "b" in graph.node_names()
    cache.pods.emit(MODIFIED, make_pod("late", cpu="1", node="b", phase="Running", scheduler="x"))
    assert graph.node_usage()["b"]["core"]["allocated"] == 1000
    cache.pods.emit(DELETED, ours)
    assert graph.node_usage()["a"]["core"]["allocated"] == 500
    cache.nodes.emit(MODIFIED, make_node("a", cpu="2"))
    assert graph.node_usage()["a"]["core"] == {"capacity": 2000, "allocated": 500, "free": 1500}
    cache.nodes.emit(DELETED, make_node("b"))
    assert "b" not in graph.node_names()


def test_resources_config_change_is_picked_up_without_restart(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    path.write_text("resources: []\n")
    graph = ClusterGraph(resources.load(path), [make_node("a")])
    watcher = ConfigReloader(str(path), graph, Ledger(graph))
    assert graph.backends() == {} and not watcher.check()
    path.write_text(Path("examples/resources.yaml").read_text())
    os.utime(path, ns=(1, 2))
    assert watcher.check()
    assert sorted(b.name for b in graph.backends().values()) == ["ibm_fez", "ibm_marrakesh"]
    path.write_text("resources: [{name: x}]\n")
    os.utime(path, ns=(3, 4))
    assert not watcher.check()
    assert len(graph.backends()) == 2


def test_a_config_that_does_not_fit_the_cluster_is_refused_whole(tmp_path: Path) -> None:
    """A resource named like a node used to crash the reload half-way; now nothing changes."""
    path = tmp_path / "resources.yaml"
    path.write_text("resources: []\n")
    graph = ClusterGraph(resources.load(path), [make_node("a"), make_node("ibm_fez")])
    reloader = ConfigReloader(str(path), graph, Ledger(graph))
    path.write_text(Path("examples/resources.yaml").read_text())
    os.utime(path, ns=(5, 6))
    assert not reloader.check()
    assert graph.backends() == {} and sorted(graph.node_names()) == ["a", "ibm_fez"]
    assert graph.node_usage()["ibm_fez"]["core"]["free"] == 4000
