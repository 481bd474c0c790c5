"""The cluster graph: JGF conventions of the Go fluence, sharing nodes, and live updates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluence import resources
from fluence.cluster_graph import ClusterGraph, GraphUpdateError
from fluence.group_jobspec import compute_jobspec
from fluence.pods import decode_pod
from fluxion_nb.errors import InputError, StateError
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")


def _by_name(g: ClusterGraph) -> dict[str, dict[str, Any]]:
    return {v["metadata"]["name"]: v["metadata"] for v in g.jgf["graph"]["nodes"]}


def test_two_nodes_and_the_example_backends_follow_the_go_conventions() -> None:
    g = ClusterGraph(
        EXAMPLES, [make_node("kind-worker", cpu="4", memory="7900Mi"), make_node("kind-worker2")]
    )
    v = _by_name(g)
    assert v["cluster"] | {} == v["cluster"]
    assert (v["cluster"]["type"], v["cluster"]["rank"], v["cluster"]["paths"]["containment"]) == (
        "cluster",
        -1,
        "/cluster",
    )
    w = v["kind-worker"]
    assert (w["type"], w["basename"], w["rank"], w["hostname"]) == (
        "node",
        "node",
        0,
        "kind-worker",
    )
    assert w["properties"] == {"virtual=false": ""}
    assert (v["core0"]["size"], v["core0"]["paths"]["containment"]) == (
        4000,
        "/cluster/kind-worker/core0",
    )
    assert v["memory0"]["size"] == 7900
    assert v["core1"]["paths"]["containment"] == "/cluster/kind-worker2/core1"
    fez = v["ibm_fez"]
    assert (fez["type"], fez["basename"], fez["rank"], fez["size"]) == ("node", "qdevice", 2, 1)
    assert fez["properties"] == {
        "class=qdevice": "",
        "class=qpu": "",
        "class=qubit": "",
        "fluxion.flux-framework.org/backend=ibm_fez": "",
        "fluxion.flux-framework.org/qrmi_type=qiskit-runtime-service": "",
        "fluxion.flux-framework.org/vendor=ibm": "",
        "virtual=true": "",
    }
    assert (v["qpu0"]["type"], v["qpu0"]["rank"], v["qpu0"]["paths"]["containment"]) == (
        "node",
        3,
        "/cluster/ibm_fez/qpu0",
    )
    assert "class=qdevice" not in v["qpu0"]["properties"]
    assert (v["qubit0"]["size"], v["qubit0"]["rank"]) == (156, 4)
    assert v["ibm_marrakesh"]["rank"] == 5
    ids = [int(n["id"]) for n in g.jgf["graph"]["nodes"]]
    assert ids == list(range(len(ids)))
    assert all(n["metadata"]["uniq_id"] == int(n["id"]) for n in g.jgf["graph"]["nodes"])
    assert all(e["metadata"] == {"subsystem": "containment"} for e in g.jgf["graph"]["edges"])
    assert sorted(b.name for b in g.backends().values()) == ["ibm_fez", "ibm_marrakesh"]


def test_many_pods_share_a_node_through_partial_pools() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1", cpu="4", memory="8Gi")])
    for i in range(4):
        g.hold_compute(i + 1, "n1", {"core": 1000, "memory": 1024})
    with pytest.raises(StateError):
        g.hold_compute(9, "n1", {"core": 1000})
    assert g.node_usage()["n1"]["core"] == {"capacity": 4000, "allocated": 4000, "free": 0}
    g.release(2)
    assert g.node_usage()["n1"]["core"]["free"] == 1000


def test_added_node_is_attached_and_takes_work() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1", cpu="1")])
    g.hold_compute(1, "n1", {"core": 1000})
    js = compute_jobspec((("core", 1000),), 1, "default/p")
    assert g.allocate(js, 50).status == "busy"
    g.upsert_node(make_node("n2", cpu="2"))
    a = g.allocate(js, 51)
    assert a.status == "allocated" and a.nodes == ["n2"]
    assert g.holds(1)


def test_busy_is_told_apart_from_never_fits_while_jobs_are_held() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1", cpu="2")])
    g.hold_compute(1, "n1", {"core": 2000})
    assert g.allocate(compute_jobspec((("core", 1000),), 1, "default/a"), 2).status == "busy"
    assert (
        g.allocate(compute_jobspec((("core", 3000),), 1, "default/b"), 3).status == "unsatisfiable"
    )
    assert (
        g.allocate(compute_jobspec((("core", 1000),), 3, "default/c"), 4).status == "unsatisfiable"
    )


def test_what_can_never_fit_is_asked_again_once_nodes_change() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1", cpu="2")])
    wide = compute_jobspec((("core", 2000),), 2, "default/w")
    assert [g.allocate(wide, j).status for j in (2, 3)] == ["unsatisfiable"] * 2
    g.upsert_node(make_node("n2", cpu="2"))
    assert g.allocate(wide, 4).status == "allocated"
    g.release(4)
    g.hold_compute(5, "n2", {"core": 1000})
    assert g.allocate(wide, 6).status == "busy"
    g.release(5)
    g.delete_node("n2")
    assert g.allocate(wide, 7).status == "unsatisfiable"
    g.reset_nodes([make_node("n1", cpu="2"), make_node("n3", cpu="2")])
    assert g.allocate(wide, 8).status == "allocated"


def test_removed_node_with_pods_is_dropped_once_they_end() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1"), make_node("n2")])
    g.hold_compute(1, "n1", {"core": 500})
    g.delete_node("n1")
    assert g.node_names() == ["n2"]
    js = compute_jobspec((("core", 4000),), 2, "default/p")
    assert g.allocate(js, 60).status == "busy"
    g.release(1)
    assert "n1" not in g.node_usage()
    g.delete_node("n2")
    assert g.node_names() == []


def test_cordoned_node_is_down_and_uncordoned_comes_back() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1")])
    js = compute_jobspec((("core", 1000),), 1, "default/p")
    g.upsert_node(make_node("n1", unschedulable=True))
    assert g.allocate(js, 70).status == "busy"
    g.upsert_node(make_node("n1"))
    assert g.allocate(js, 71).status == "allocated"


def test_allocatable_change_rebuilds_and_keeps_jobs_that_still_fit() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1", cpu="4")])
    g.hold_compute(1, "n1", {"core": 2000})
    g.hold_compute(2, "n1", {"core": 2000})
    lost = g.upsert_node(make_node("n1", cpu="3"))
    assert lost == [2]
    assert g.node_usage()["n1"]["core"] == {"capacity": 3000, "allocated": 2000, "free": 1000}


def test_resources_config_change_grows_and_shrinks_backends() -> None:
    g = ClusterGraph(resources.parse(""), [make_node("n1")])
    assert g.backends() == {}
    g.set_config(EXAMPLES)
    assert sorted(b.name for b in g.backends().values()) == ["ibm_fez", "ibm_marrakesh"]
    g.hold_backend(5, "/cluster/ibm_fez")
    lost = g.set_config(resources.parse(""))
    assert lost == [5] and g.backends() == {}


def test_untolerated_taints_exclude_a_node_for_that_pod_only() -> None:
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    g = ClusterGraph(
        EXAMPLES,
        [
            make_node("n1", taints=[taint]),
            make_node("n2", taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
        ],
    )
    assert g.excluded_for(make_pod("p")) == ["n1"]
    tolerant = make_pod(
        "q", tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert g.excluded_for(tolerant) == []


def test_node_selector_excludes_nodes_without_the_labels() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("n1"), make_node("n2")])
    doc = make_pod("p", raw=True)
    doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n2"}
    assert g.excluded_for(decode_pod(json.dumps(doc))) == ["n1"]


def test_a_config_that_clashes_with_a_node_changes_nothing() -> None:
    graph = ClusterGraph(resources.parse(""), [make_node("a"), make_node("ibm_fez")])
    jgf_before = graph.jgf
    usage_before = graph.node_usage()
    with pytest.raises(GraphUpdateError, match="ibm_fez"):
        graph.set_config(resources.load("examples/resources.yaml"))
    assert graph.backends() == {} and not graph.known_types()
    assert graph.jgf is jgf_before and graph.node_usage() == usage_before


def test_a_node_named_like_a_resource_is_left_out_and_the_graph_stays_whole() -> None:
    graph = ClusterGraph(resources.load("examples/resources.yaml"), [make_node("a")])
    with pytest.raises(GraphUpdateError, match="ibm_fez"):
        graph.upsert_node(make_node("ibm_fez"))
    assert graph.node_names() == ["a"] and len(graph.backends()) == 2
    # A rebuild (as at startup) leaves the clashing node out instead of failing.
    graph.reset_nodes([make_node("a"), make_node("ibm_fez"), make_node("b")])
    assert sorted(graph.node_names()) == ["a", "b"] and len(graph.backends()) == 2


def test_a_failing_rebuild_restores_every_piece_of_state() -> None:
    graph = ClusterGraph(resources.load("examples/resources.yaml"), [make_node("a")])
    before = (graph.jgf, graph.node_usage(), graph.backends(), graph.node_names())

    def broken(*_: object, **__: object) -> None:
        # Half-way through a rebuild, as when the reader rejects the new graph.
        graph._nodes = {}
        graph._backends = {}
        graph.jgf = {}
        raise InputError("simulated reader failure")

    graph._rebuild_unsafe = broken  # type: ignore[method-assign]
    with pytest.raises(GraphUpdateError, match="simulated"):
        graph.reset_nodes([make_node("a", cpu="2")])
    assert (graph.jgf, graph.node_usage(), graph.backends(), graph.node_names()) == before
