"""Allocation -> one node per pod, and the backend with its attributes."""

from __future__ import annotations

import pytest

from fluence import resources
from fluence.cluster_graph import ClusterGraph
from fluence.group_jobspec import device_jobspec
from fluence.placement import PlacementError, assign, attributes_of, backends_of, slots_per_node
from tests.unit.fluence.test_pods import make_node


def test_per_node_totals_split_into_whole_slots_in_node_order() -> None:
    by_node = {"n2": {"core": 3000, "memory": 300}, "n1": {"core": 1000, "memory": 100}}
    nodes = slots_per_node(by_node, (("core", 1000), ("memory", 100)), 4)
    assert nodes == ["n2", "n2", "n2", "n1"]
    assert assign(["default/p3", "default/p1", "default/p2", "default/p0"], nodes) == {
        "default/p0": "n2",
        "default/p1": "n2",
        "default/p2": "n2",
        "default/p3": "n1",
    }


def test_totals_that_are_not_whole_slots_are_a_fault() -> None:
    with pytest.raises(PlacementError, match="whole number"):
        slots_per_node({"n1": {"core": 1500, "memory": 100}}, (("core", 1000), ("memory", 100)), 1)
    with pytest.raises(PlacementError, match="2 were asked"):
        slots_per_node({"n1": {"core": 1000}}, (("core", 1000),), 2)


def test_device_match_names_the_backend_and_its_attributes() -> None:
    g = ClusterGraph(resources.load("examples/resources.yaml"), [make_node("n1")])
    alloc = g.allocate(
        device_jobspec("qpu", 1, "default/s", ["fluxion.flux-framework.org/vendor=ibm"]), 1
    )
    [be] = backends_of(alloc)
    assert be.name in ("ibm_fez", "ibm_marrakesh")
    assert be.path == f"/cluster/{be.name}"
    assert be.attributes == {
        "backend": be.name,
        "qrmi_type": "qiskit-runtime-service",
        "vendor": "ibm",
    }
    [other] = backends_of(g.allocate(device_jobspec("qpu", 1, "default/t"), 2))
    assert {be.name, other.name} == {"ibm_fez", "ibm_marrakesh"}
    assert g.allocate(device_jobspec("qpu", 1, "default/u"), 3).status == "busy"
    assert (
        g.allocate(
            device_jobspec("qpu", 1, "default/v", ["fluxion.flux-framework.org/vendor=aws"]), 4
        ).status
        == "unsatisfiable"
    )


def test_a_match_of_two_backends_names_both_in_order() -> None:
    g = ClusterGraph(resources.load("examples/resources.yaml"), [make_node("n0")])
    both = backends_of(g.allocate(device_jobspec("qpu", 2, "default/s"), 1))
    assert sorted(b.name for b in both) == ["ibm_fez", "ibm_marrakesh"]
    assert [b.path for b in both] == [f"/cluster/{b.name}" for b in both]


def test_attribute_properties_parse_and_others_are_ignored() -> None:
    props = {"virtual=true": "", "class=qpu": "", "fluxion.flux-framework.org/region=us-east-1": ""}
    assert attributes_of(props) == {"region": "us-east-1"}
