"""What the pods on a node ask of it beyond the graph's resources, summed as kube-scheduler's
NodeResourcesFit sums it.

The graph holds cpu, memory and GPUs per node; other requests (ephemeral storage, huge
pages, extended resources such as the device plugin's) are checked per pod against the
node's allocatable by :mod:`fluence.node_rules`. kube-scheduler refuses a pod on a node
where what the pods already there ask plus its own exceeds that allocatable, so the queue
counts those sums too: :class:`RequestedByNode` says which nodes the pods placed leave
too little on, how many more of a group's members each node can take (:func:`share`
then keeps the members off nodes so that none gets more than that), and which members
of a match would not fit beside each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from fluence.node_rules import allocatable
from fluence.pods import Node

Asks = Mapping[str, Decimal]
"""Resource name -> amount (:func:`fluence.node_rules.unmodelled_requests`)."""


class RequestedByNode:
    """Per node, the sum of what its placed pods ask beyond the graph's resources."""

    def __init__(self) -> None:
        self.on: dict[str, dict[str, Decimal]] = {}

    def add(self, node: str, asks: Asks) -> None:
        used = self.on.setdefault(node, {})
        for name, q in asks.items():
            used[name] = used.get(name, Decimal(0)) + q

    def _fits(self, used: Mapping[str, Decimal], asks: Asks, node: Node) -> bool:
        return all(used.get(n, Decimal(0)) + q <= allocatable(node, n) for n, q in asks.items())

    def refusing(self, asks: Asks, nodes: Mapping[str, Node]) -> set[str]:
        """The nodes where what is placed leaves less than ``asks``."""
        if not asks:
            return set()
        return {
            n
            for n, used in self.on.items()
            if n in nodes and any(k in used for k in asks) and not self._fits(used, asks, nodes[n])
        }

    def capacity(self, asks: Asks, nodes: Mapping[str, Node]) -> dict[str, int]:
        """How many more pods asking ``asks`` each node can take."""
        out = {}
        for n, node in nodes.items():
            used = self.on.get(n, {})
            left = [
                int((allocatable(node, r) - used.get(r, Decimal(0))) // q)
                for r, q in asks.items()
                if q > 0
            ]
            out[n] = max(0, min(left)) if left else 0
        return out

    def overflow(
        self, matched: Iterable[tuple[str, str, Asks]], nodes: Mapping[str, Node]
    ) -> dict[str, str]:
        """Of the members a match put on nodes (key, node, asks), in the order given, those
        that would not fit beside the ones before them and what is placed: key -> node."""
        extra: dict[str, dict[str, Decimal]] = {}
        out: dict[str, str] = {}
        for key, n, asks in matched:
            node = nodes.get(n)
            if not asks or node is None:
                continue
            used = dict(self.on.get(n, {}))
            for name, q in extra.get(n, {}).items():
                used[name] = used.get(name, Decimal(0)) + q
            if not self._fits(used, asks, node):
                out[key] = n
                continue
            mine = extra.setdefault(n, {})
            for name, q in asks.items():
                mine[name] = mine.get(name, Decimal(0)) + q
        return out


def most(asks: Iterable[Asks]) -> dict[str, Decimal]:
    """Per resource, the most any of ``asks`` asks (a group's members, served alike)."""
    out: dict[str, Decimal] = {}
    for a in asks:
        for name, q in a.items():
            out[name] = max(out.get(name, Decimal(0)), q)
    return out


def share(capacity: Mapping[str, int], keys: list[str]) -> dict[str, set[str]]:
    """Nodes to keep each of ``keys`` off so that no node gets more of them than its
    ``capacity``: a node with room for all stays open to all; one with room for fewer is
    left to that many members, taken in turn so the room is shared out evenly."""
    out: dict[str, set[str]] = {k: set() for k in keys}
    turn = 0
    for n in sorted(capacity):
        room = capacity[n]
        if room >= len(keys):
            continue
        chosen = {keys[(turn + i) % len(keys)] for i in range(room)}
        turn = (turn + room) % len(keys)
        for k in keys:
            if k not in chosen:
                out[k].add(n)
    return out
