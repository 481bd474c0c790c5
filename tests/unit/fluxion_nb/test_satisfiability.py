"""Satisfiability asks whether a request could fit on the graph with nothing held.

It must not depend on current holds (even ones that run to the end of the
graph, as a duration-0 job does), and a duration of 0 (the rest of the
graph's horizon) is a valid request for every operation. Jobspecs the
traverser can never match are refused as input errors.
"""

from __future__ import annotations

from typing import Any

import pytest

from fluxion_nb import Graph, InputError, MatchOp
from fluxion_nb.examples import pooled_cluster, slot_jobspec

OPS: tuple[MatchOp, ...] = (
    "allocate",
    "allocate_with_satisfiability",
    "allocate_orelse_reserve",
    "satisfiability",
    "without_allocating",
)


def _two_slots() -> dict[str, Any]:
    def slot(label: str, cpu: int) -> dict[str, Any]:
        return {
            "type": "slot",
            "count": 1,
            "label": label,
            "with": [{"type": "core", "count": cpu}, {"type": "memory", "count": 1}],
        }

    return {
        "version": 1,
        "resources": [slot("a", 1000), slot("b", 500)],
        "tasks": [
            {"command": ["app"], "slot": "a", "count": {"per_slot": 1}},
            {"command": ["app"], "slot": "b", "count": {"per_slot": 1}},
        ],
        "attributes": {"system": {"duration": 3600}},
    }


def _node_slot(duration: int, properties: list[str]) -> dict[str, Any]:
    return {
        "version": 1,
        "resources": [
            {"type": "slot", "count": 1, "label": "s", "with": [{"type": "node", "count": 1}]}
        ],
        "tasks": [{"command": ["app"], "slot": "s", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": duration, "constraints": {"properties": properties}}},
    }


@pytest.mark.parametrize("partial_pools", [False, {"core", "memory"}])
@pytest.mark.parametrize("op", OPS)
def test_sibling_slots_are_an_input_error_not_busy(partial_pools: Any, op: MatchOp) -> None:
    g = Graph(pooled_cluster(nodes=2, cpus_milli=4000), partial_pools=partial_pools)
    with pytest.raises(InputError, match=r"2 sibling slots \('a', 'b'\)"):
        g.match(_two_slots(), op)
    # Refused up front: the graph is untouched.
    assert g.match(slot_jobspec(1, 1000, 1)).status == "allocated"


@pytest.mark.parametrize("duration", [0, 3600])
def test_constrained_request_is_satisfiable_and_allocates(duration: int) -> None:
    g = Graph(pooled_cluster(nodes=2))
    for n in ("worker0", "worker1"):
        g.set_property(f"/cluster/{n}", "virtual=false")
    js = _node_slot(duration, ["virtual=false"])
    assert g.match(js, "satisfiability").status == "satisfiable"
    assert g.match(js, "allocate_with_satisfiability").status == "allocated"
    assert g.match(js, "allocate").status == "allocated"
    assert g.match(js, "allocate_with_satisfiability").status == "busy"
    assert g.match(js, "satisfiability").status == "satisfiable"
    unmet = _node_slot(duration, ["gpu"])
    assert g.match(unmet, "allocate_with_satisfiability").status == "unsatisfiable"
    assert g.match(unmet, "satisfiability").status == "unsatisfiable"


def test_constrained_request_is_reserved_after_a_finite_hold() -> None:
    g = Graph(pooled_cluster(nodes=2))
    g.set_property("/cluster/worker0", "virtual=false")
    js = _node_slot(3600, ["virtual=false"])
    assert g.match(js, "allocate_orelse_reserve").status == "allocated"
    again = g.match(js, "allocate_orelse_reserve")
    assert (again.status, again.at) == ("reserved", 3600)


def test_duration_zero_on_a_full_pool_is_busy_not_an_error() -> None:
    g = Graph(pooled_cluster(nodes=1, cpus_milli=1000), partial_pools={"core", "memory"})
    assert g.match(slot_jobspec(1, 1000, 1, duration=0)).status == "allocated"
    js = slot_jobspec(1, 1000, 1, duration=0)
    assert g.match(js, "allocate_with_satisfiability").status == "busy"
    assert g.match(js, "satisfiability").status == "satisfiable"
    assert g.match(js, "allocate_orelse_reserve").status == "busy"
    too_big = slot_jobspec(1, 1001, 1, duration=0)
    assert g.match(too_big, "allocate_with_satisfiability").status == "unsatisfiable"
    assert not g.satisfiable(too_big)


def test_satisfiability_ignores_current_holds() -> None:
    g = Graph(pooled_cluster(nodes=1, cpus_milli=1000), partial_pools={"core", "memory"})
    hold = g.match(slot_jobspec(1, 1000, 1, duration=0))
    assert hold.status == "allocated"
    short = slot_jobspec(1, 1000, 1, duration=1)
    assert g.match(short, "satisfiability").status == "satisfiable"
    assert g.satisfiable(short)
    assert g.match(short, "allocate_with_satisfiability").status == "busy"
    assert g.match(short, "allocate_orelse_reserve").status == "busy"
    # The checks changed nothing: with the hold gone the request fits.
    g.cancel(hold.jobid)
    assert g.match(short).status == "allocated"
