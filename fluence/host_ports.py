"""Host ports: a port a pod takes on its node is free for no other pod there.

kube-scheduler's NodePorts filter refuses a node where a pod already running or placed
takes a port another asks for: same protocol and number, and the same host IP or either
one bound to every address (``0.0.0.0``). The queue pins pods to nodes, so it keeps to the
same rule: a node where a member's port is taken is left out of the group's match, and
members that ask for the same port are matched on distinct nodes
(:func:`port_links`).
"""

from __future__ import annotations

from collections.abc import Iterable

from fluence.pods import Pod

HostPort = tuple[str, str, int]
"""(protocol, host IP, port), as :attr:`fluence.pods.Pod.host_ports` gives them."""

ANY_ADDRESS = "0.0.0.0"


def clash(a: HostPort, b: HostPort) -> bool:
    """Can ``a`` and ``b`` not both be taken on one node?"""
    return a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or ANY_ADDRESS in (a[1], b[1]))


def clashes(a: Iterable[HostPort], b: Iterable[HostPort]) -> bool:
    """Does any port of ``a`` clash with any of ``b``?"""
    taken = list(b)
    return any(clash(x, y) for x in a for y in taken)


class PortsByNode:
    """The host ports taken on each node."""

    def __init__(self) -> None:
        self.taken: dict[str, set[HostPort]] = {}

    def add(self, node: str, ports: Iterable[HostPort]) -> None:
        if node:
            self.taken.setdefault(node, set()).update(ports)

    def refusing(self, ports: Iterable[HostPort]) -> set[str]:
        """The nodes where some of ``ports`` is taken."""
        wanted = list(ports)
        if not wanted:
            return set()
        return {n for n, taken in self.taken.items() if clashes(wanted, taken)}


def port_links(pods: Iterable[Pod]) -> list[tuple[str, str]]:
    """Pairs of pods that ask for one host port (protocol and number; the addresses are
    not told apart, which keeps apart a few pods that could have met, never lets two meet
    that cannot): each linked to the first that asks for it."""
    first: dict[str, str] = {}
    links = []
    for p in pods:
        for protocol, _, number in sorted(p.host_ports):
            other = first.setdefault(f"{protocol}/{number}", p.key)
            if other != p.key:
                links.append((other, p.key))
    return links
