"""Host ports as kube-scheduler's NodePorts filter counts them."""

from __future__ import annotations

import json

from fluence.host_ports import PortsByNode, clash
from fluence.pods import decode_pod
from tests.unit.fluence.test_pods import make_pod


def with_ports(name: str, *ports: dict[str, object]) -> object:
    doc = make_pod(name, raw=True)
    doc["spec"]["containers"][0]["ports"] = list(ports)
    return decode_pod(json.dumps(doc))


def test_a_pods_host_ports_default_to_tcp_on_every_address() -> None:
    pod = with_ports(
        "p",
        {"containerPort": 80, "hostPort": 8080},
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
        {"containerPort": 9000},  # no host port: takes nothing on the node
    )
    assert pod.host_ports == {("TCP", "0.0.0.0", 8080), ("UDP", "10.0.0.1", 53)}  # type: ignore[attr-defined]


def test_ports_clash_on_protocol_number_and_overlapping_address() -> None:
    assert clash(("TCP", "0.0.0.0", 80), ("TCP", "10.0.0.1", 80))
    assert clash(("TCP", "10.0.0.1", 80), ("TCP", "10.0.0.1", 80))
    assert not clash(("TCP", "10.0.0.1", 80), ("TCP", "10.0.0.2", 80))
    assert not clash(("TCP", "0.0.0.0", 80), ("UDP", "0.0.0.0", 80))
    assert not clash(("TCP", "0.0.0.0", 80), ("TCP", "0.0.0.0", 81))


def test_nodes_refusing_ports_are_those_where_one_is_taken() -> None:
    taken = PortsByNode()
    taken.add("n0", {("TCP", "0.0.0.0", 80)})
    taken.add("n1", {("TCP", "10.0.0.1", 80)})
    taken.add("", {("TCP", "0.0.0.0", 80)})  # no node: takes nothing
    assert taken.refusing({("TCP", "10.0.0.2", 80)}) == {"n0"}
    assert taken.refusing({("TCP", "0.0.0.0", 80)}) == {"n0", "n1"}
    assert taken.refusing(set()) == set()
