"""Requests the graph does not hold, summed per node as kube-scheduler's NodeResourcesFit."""

from __future__ import annotations

from decimal import Decimal

from fluence.node_requests import RequestedByNode, most, share
from tests.unit.fluence.test_pods import make_node

NODES = {
    n: make_node(n, extra={"example.com/dongle": str(d), "ephemeral-storage": "10Gi"})
    for n, d in (("n0", 2), ("n1", 2), ("n2", 0))
}
ONE = {"example.com/dongle": Decimal(1)}
GI = Decimal(1 << 30)


def test_placed_pods_leave_less_room() -> None:
    placed = RequestedByNode()
    placed.add("n0", ONE)
    placed.add("n0", {"ephemeral-storage": 6 * GI})
    assert placed.refusing(ONE, NODES) == set()
    assert placed.refusing({"example.com/dongle": Decimal(2)}, NODES) == {"n0"}
    assert placed.refusing({"ephemeral-storage": 5 * GI}, NODES) == {"n0"}
    assert placed.capacity(ONE, NODES) == {"n0": 1, "n1": 2, "n2": 0}
    assert placed.capacity({"ephemeral-storage": 4 * GI}, NODES) == {"n0": 1, "n1": 2, "n2": 2}


def test_members_that_would_not_fit_beside_each_other() -> None:
    placed = RequestedByNode()
    placed.add("n0", ONE)
    matched = [("a", "n0", ONE), ("b", "n0", ONE), ("c", "n1", ONE), ("d", "n1", ONE)]
    assert placed.overflow(matched, NODES) == {"b": "n0"}


def test_scarce_room_is_shared_out_among_members_in_turn() -> None:
    keys = ["a", "b", "c", "d", "e"]
    off = share({"n0": 1, "n1": 2, "n2": 2, "big": 9, "none": 0}, keys)
    allowed = {k: {"n0", "n1", "n2", "big", "none"} - off[k] for k in keys}
    # Every member keeps the node with room for all; "none" takes nobody.
    assert all("big" in nodes and "none" not in nodes for nodes in allowed.values())
    for n, room in (("n0", 1), ("n1", 2), ("n2", 2)):
        assert sum(n in nodes for nodes in allowed.values()) == room
    # Without the big node, each member is left exactly one of the scarce places.
    off = share({"n0": 1, "n1": 2, "n2": 2}, keys)
    assert sorted(len({"n0", "n1", "n2"} - off[k]) for k in keys) == [1, 1, 1, 1, 1]


def test_members_are_served_alike_at_the_most_any_asks() -> None:
    assert most([ONE, {"example.com/dongle": Decimal(3), "x": Decimal(1)}]) == {
        "example.com/dongle": Decimal(3),
        "x": Decimal(1),
    }
