"""Node rules fluence checks before pinning a pod: a node they rule out would refuse it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from fluence import resources
from fluence.cluster_graph import ClusterGraph
from fluence.node_rules import short_of, unmodelled_requests, unselected
from fluence.pods import Node, Pod
from tests.unit.fluence.test_pods import make_node, make_pod


def node(name: str, **labels: str) -> Node:
    raw = make_node(name, raw=True)
    raw["metadata"]["labels"].update(labels)
    return msgspec.convert(raw, Node)


def pod_with(*terms: dict[str, Any], selector: dict[str, str] | None = None) -> Pod:
    raw = make_pod("p", raw=True)
    if terms:
        raw["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    if selector:
        raw["spec"]["nodeSelector"] = selector
    return msgspec.convert(raw, Pod)


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


def fields(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchFields": [{"key": key, "operator": op, "values": list(values)}]}


@pytest.mark.parametrize(
    ("term", "admitted"),
    [
        (expr("zone", "In", "a", "b"), {"n-a", "n-b"}),
        (expr("zone", "NotIn", "a"), {"n-b", "bare"}),
        (expr("zone", "Exists"), {"n-a", "n-b"}),
        (expr("zone", "DoesNotExist"), {"bare"}),
        (expr("gen", "Gt", "3"), {"n-b"}),
        (expr("gen", "Lt", "4"), {"n-a"}),
        (expr("gen", "Gt", "x"), set()),
        (expr("zone", "Sideways", "a"), set()),
        (
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["bare"]}]},
            {"bare"},
        ),
        ({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}, set()),
        ({}, set()),
    ],
)
def test_each_operator_as_kube_scheduler_reads_it(term: dict[str, Any], admitted: set[str]) -> None:
    nodes = [node("n-a", zone="a", gen="3"), node("n-b", zone="b", gen="5"), node("bare")]
    p = pod_with(term)
    assert {n.name for n in nodes if not unselected(n, p)} == admitted


def test_terms_are_alternatives_and_requirements_within_one_all_hold() -> None:
    both = {"matchExpressions": [*expr("zone", "In", "a")["matchExpressions"]]}
    both["matchFields"] = [{"key": "metadata.name", "operator": "NotIn", "values": ["n-a"]}]
    p = pod_with(both, expr("zone", "In", "b"))
    assert [unselected(n, p) for n in (node("n-a", zone="a"), node("n-b", zone="b"))] == [
        True,
        False,
    ]


def test_a_node_selector_and_affinity_must_both_hold() -> None:
    p = pod_with(expr("zone", "In", "a"), selector={"disk": "ssd"})
    assert unselected(node("n", zone="a"), p)
    assert not unselected(node("n", zone="a", disk="ssd"), p)


def test_the_graph_leaves_out_nodes_the_affinity_rules_out() -> None:
    graph = ClusterGraph(
        resources.load("examples/resources.yaml"),
        [node("n-a", zone="a"), node("n-b", zone="b")],
    )
    assert graph.excluded_for(pod_with(expr("zone", "In", "b"))) == ["n-a"]
    assert graph.excluded_for(pod_with()) == []


def test_nodes_short_of_an_extended_resource_are_left_out() -> None:
    """The device plugin advertises ``fluxion.flux-framework.org/qpu`` where it runs; a node
    without it would refuse a pod that asks for it, whatever the graph says."""
    qpu = "fluxion.flux-framework.org/qpu"
    with_qpu = msgspec.convert(make_node("real", extra={qpu: "8"}, raw=True), Node)
    graph = ClusterGraph(resources.load("examples/resources.yaml"), [with_qpu, node("kwok")])
    raw = make_pod("q", raw=True, extra={qpu: "1"})
    raw["spec"]["initContainers"] = [
        {"name": "i", "resources": {"limits": {"example.com/fpga": "2"}}}
    ]
    asking = msgspec.convert(raw, Pod)
    assert unmodelled_requests(asking) == {qpu: 1, "example.com/fpga": 2}
    assert graph.excluded_for(asking) == ["kwok", "real"]  # no node has the fpga
    raw["spec"]["initContainers"] = []
    assert graph.excluded_for(msgspec.convert(raw, Pod)) == ["kwok"]
    assert not short_of(with_qpu, {})
