"""A group's request: the nodes it is kept off, named either way, and kept off for good or
only for now."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fluence import resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import pod_requests, split_requests
from fluence.scheduling.request import NAMED_INSTEAD, Exclusions, GroupRequest
from tests.unit.fluence.scheduling.test_topology import RACK, racks
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")
NODES = [f"n{i:03d}" for i in range(NAMED_INSTEAD * 2)]


def request(exclude: Collection[str], nodes: list[str] = NODES) -> GroupRequest:
    pod = make_pod("p", cpu="1")
    split = {pod.key: split_requests(pod_requests(pod))}
    return GroupRequest("default/p", (pod,), split, {"core"}, exclude, node_names=lambda: nodes)


def hostlists(spec: dict[str, Any]) -> list[Any]:
    return spec["attributes"]["system"]["constraints"]["and"][1:]


def test_most_nodes_kept_off_are_named_by_the_nodes_left() -> None:
    """A jobspec names the few nodes left rather than thousands kept off; with none left it
    admits none; with few kept off it names those."""
    (spec,) = request(NODES[2:]).specs(0).jobspecs()
    assert hostlists(spec) == [{"hostlist": NODES[:2]}]
    (spec,) = request(NODES).specs(0).jobspecs()
    assert hostlists(spec) == [{"hostlist": NODES[:1]}, {"not": [{"hostlist": NODES[:1]}]}]
    few = NODES[:NAMED_INSTEAD]
    (spec,) = request(few).specs(0).jobspecs()
    assert hostlists(spec) == [{"not": [{"hostlist": few}]}]


def test_requests_sharing_the_nodes_kept_off_see_the_nodes_as_they_are_now() -> None:
    """Groups of a round share one set of nodes kept off, and the nodes left are worked out
    once for them; a node added since is among the nodes left for the next."""
    kept_off = frozenset(NODES[2:])
    (spec,) = request(kept_off).specs(0).jobspecs()
    (again,) = request(kept_off).specs(0).jobspecs()
    assert hostlists(spec) == hostlists(again) == [{"hostlist": NODES[:2]}]
    grown = [*NODES, "n999"]
    (spec,) = request(kept_off, grown).specs(0).jobspecs()
    assert hostlists(spec) == [{"hostlist": [*NODES[:2], "n999"]}]


def test_the_match_keeps_to_the_nodes_left_either_way() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node(n, cpu="4") for n in NODES])
    ledger = Ledger(graph)
    res = ledger.place("default/a", [make_pod("a", cpu="1")], NODES[:-1])
    assert res.status == "allocated" and res.holdings["default/a"].node == NODES[-1]
    res = ledger.place("default/b", [make_pod("b", cpu="1")], NODES)
    assert res.status == "unsatisfiable", res.message


def test_a_group_kept_off_every_node_only_for_now_does_not_fit_now() -> None:
    """Kept off every node, a group that its own node rules leave room for is told it does
    not fit now and keeps its place in the queue; one too big for the cluster can never
    fit; so with a rack to keep to."""
    graph = ClusterGraph(EXAMPLES, racks(2, 2))
    every = graph.node_names()
    ledger = Ledger(graph)
    pods = [make_pod(f"g{i}", cpu="1", group="g") for i in range(2)]
    res = ledger.place("default/g", pods, every, settled=Exclusions())
    assert res.status == "busy" and "does not fit now" in res.message, res.message
    assert "1st of 1 waiting groups, not reserved" in res.message, res.message
    res = ledger.place("default/r", pods, every, topology=RACK, settled=Exclusions())
    assert res.status == "busy", res.message
    huge = [make_pod("h", cpu="64")]
    res = ledger.place("default/h", huge, every, settled=Exclusions())
    assert res.status == "unsatisfiable" and "can never fit" in res.message
    res = ledger.place("default/g", pods, every)  # nothing said to be for now: never
    assert res.status == "unsatisfiable", res.message


def test_a_composite_kept_off_every_node_only_for_now_does_not_fit_now() -> None:
    """A composite whose parts each need a rack of their own waits in its place when only
    nodes kept off for now stand in its way; a part no rack can hold can never fit."""
    graph = ClusterGraph(EXAMPLES, racks(2, 2))
    every = graph.node_names()
    ledger = Ledger(graph)
    a = [make_pod(f"a{i}", cpu="1", group="a") for i in range(2)]
    b = [make_pod(f"b{i}", cpu="1", group="b") for i in range(2)]
    parts = [(RACK, [p.key for p in a]), (RACK, [p.key for p in b])]
    res = ledger.place("default/composite:c", a + b, every, parts=parts, settled=Exclusions())
    assert res.status == "busy" and "does not fit now" in res.message, res.message
    assert "1st of 1 waiting groups, not reserved" in res.message, res.message
    res = ledger.place("default/composite:c", a + b, every, parts=parts)
    assert res.status == "unsatisfiable", res.message  # nothing said to be for now: never
    huge = [make_pod(f"h{i}", cpu="4", group="h") for i in range(3)]  # more than a rack
    res = ledger.place(
        "default/composite:h",
        huge,
        every,
        parts=[(RACK, [p.key for p in huge])],
        settled=Exclusions(),
    )
    assert res.status == "unsatisfiable" and "can never fit" in res.message, res.message
    res = ledger.place("default/composite:c", a + b, parts=parts)  # nothing kept off: placed
    assert res.status == "allocated", res.message
    rack_of = {k: h.node[:2] for k, h in res.holdings.items()}
    assert len({rack_of[p.key] for p in a}) == len({rack_of[p.key] for p in b}) == 1
