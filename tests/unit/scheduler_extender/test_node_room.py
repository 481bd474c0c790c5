"""A round's view of nodes' pod limits: kept up as the round's matches take places."""

from __future__ import annotations

from collections import Counter

from fluence.scheduling.holdings import TENTATIVE, Holding
from scheduler_extender.node_room import NodeRoom
from tests.unit.fluence.test_pods import make_pod

PODS = [make_pod(f"m{i}", cpu="10m") for i in range(3)]


def held(pod: str, node: str) -> Holding:
    return Holding(pod, "", "g", node, {}, 1, TENTATIVE, 0.0)


def test_places_taken_in_a_round_fill_nodes_and_shrink_their_room() -> None:
    """Nodes that take four pods: n0 runs four, n1 two, n2 one. A gang of three sees n0
    full and n1's two places; once a match puts a pod on n1 and two on n2, the next group
    of the round sees one place left on each; one more on n1 fills it."""
    room = NodeRoom({"n0": 4, "n1": 4, "n2": 4}, Counter({"n0": 4, "n1": 2, "n2": 1}))
    assert room.full() == {"n0"}
    assert room.room_for(PODS) == {"n1": 2}
    taken = {"a0": held("a0", "n1"), "a1": held("a1", "n2"), "a2": held("a2", "n2")}
    room.take(taken, {})
    assert room.full() == {"n0"}
    assert room.full() is room.full()  # one set the round's groups share, not a copy each
    assert room.room_for(PODS) == {"n1": 1, "n2": 1}
    room.take({"b0": held("b0", "n1")}, {})
    assert room.full() == {"n0", "n1"}
    assert room.room_for(PODS) == {"n2": 1}
    assert room.past(Counter({"n2": 1})) == set() and room.past(Counter({"n2": 2})) == {"n2"}


def test_a_node_over_its_limit_counts_as_full() -> None:
    """A node holding more pods than its limit (the limit lowered under running pods) is
    full, not a node with room."""
    room = NodeRoom({"n0": 2}, Counter({"n0": 3}))
    assert room.full() == {"n0"}
    assert room.room_for(PODS) == {}
