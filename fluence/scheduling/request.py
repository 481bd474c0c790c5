"""One group's placement as every step of it sees it, and what came of it.

A request is made once per ``place`` and never changes: the topology choice,
the match and the queue read the same pods, exclusions and times from it
instead of each taking the same seven arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from fluence.group_jobspec import GroupSpecs, Shape, group_jobspecs
from fluence.pods import Pod, Split
from fluence.scheduling.holdings import Holding


class LedgerError(RuntimeError):
    """A ledger operation cannot be done; the message says why."""


NAMED_INSTEAD = 64
"""Nodes kept off past which a jobspec may name the nodes left instead."""


class _LastNamed:
    """The nodes kept off, the graph's nodes and the nodes left, as the last request named
    them: the groups of a queue's round share one set of nodes kept off (those at their
    pod limit), and each would otherwise walk every node for the same answer."""

    entry: tuple[frozenset[str], Sequence[str], tuple[Sequence[str], Sequence[str]]] | None = None


@dataclass(frozen=True)
class Exclusions:
    """Nodes a group's pods may not use: those none of them may, and more by pod key."""

    common: Sequence[str] = ()
    per_pod: Mapping[str, Collection[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupRequest:
    """A group to place: its pods, the nodes it may not use, and how long it holds them."""

    group: str
    pods: Sequence[Pod]
    split: Mapping[str, Split]
    """Each pod's (node resources, device resources), by pod key."""
    known_types: Collection[str]
    """The graph's resource types: a jobspec names only these."""
    exclude: Collection[str] = ()
    runtime: int = 0
    """Seconds each pod is expected to hold what it gets (0: until released)."""
    window: int = 0
    """Seconds a match now must leave reservations free for (0: for good)."""
    beside_preemptor: bool = False
    """Kept off the room held for a higher-priority group whose victims are going: a
    failed match then says "not now", never "never"."""
    exclude_for: Mapping[str, Collection[str]] = field(default_factory=dict)
    """Nodes some members may not use beyond ``exclude``, by pod key (their own node
    rules, volumes or pod affinity): only those members are kept off them."""
    node_names: Callable[[], Sequence[str]] = tuple
    """The graph's nodes, read only when members spread per node must be matched in
    rounds (more of them than nodes), or when most nodes are kept off."""
    settled: Exclusions | None = None
    """``exclude`` and ``exclude_for`` as the pods' own node rules alone make them, when
    the rest are nodes kept off only for now (at their pod limit, their ports or devices
    taken, pods placed there): the group can never fit only if it cannot on these."""

    def specs(self, duration: int, within: Sequence[str] = ()) -> GroupSpecs:
        """The group's jobspecs of ``duration`` seconds, ``within`` some nodes when given."""
        exclude = self.exclude
        if not within and len(exclude) >= NAMED_INSTEAD:
            within, exclude = self._named_instead
        return group_jobspecs(
            self.group,
            self.pods,
            self.known_types,
            exclude,
            split=self.split,
            within=within,
            duration=duration,
            exclude_for=self.exclude_for,
            spread_over=lambda: self.usable_nodes(within),
        )

    @cached_property
    def _named_instead(self) -> tuple[Sequence[str], Sequence[str]]:
        """(within, exclude) for the same nodes: when most nodes are kept off, the few
        left are named instead (the matcher reads a jobspec's host list whole, and a
        queue on a nearly full cluster would send it thousands of names a group); when
        none is left, one node both named and kept off admits none."""
        nodes = self.node_names()
        kept_off = self._kept_off
        if len(kept_off) * 2 <= len(nodes):
            return (), tuple(self.exclude)
        last = _LastNamed.entry
        if last is not None and last[0] is kept_off and last[1] is nodes:
            return last[2]
        left = [n for n in nodes if n not in kept_off]
        named = (left, ()) if left else (nodes[:1], nodes[:1])
        _LastNamed.entry = (kept_off, nodes, named)
        return named

    @cached_property
    def _kept_off(self) -> frozenset[str]:
        return frozenset(self.exclude)

    def settled_only(self) -> GroupRequest | None:
        """The same request kept off only the nodes its pods' own rules rule out (None
        when no node is kept off only for now)."""
        if self.settled is None:
            return None
        lasting = self.settled
        return replace(
            self, exclude=tuple(lasting.common), exclude_for=lasting.per_pod, settled=None
        )

    def usable_nodes(self, within: Sequence[str] = ()) -> int:
        """How many nodes the group may use (``within`` some, when given)."""
        excluded = set(self.exclude)
        return sum(1 for n in (within or self.node_names()) if n not in excluded)

    def narrowed(self, pods: Sequence[Pod]) -> GroupRequest:
        """The same request for some of its pods (one domain's share, a composite's part)."""
        return replace(self, pods=pods)

    def beside_preemptors(self, nodes: Sequence[str]) -> GroupRequest:
        """The same request kept off ``nodes``, held for preempting groups."""
        return replace(self, exclude=sorted(set(self.exclude) | set(nodes)), beside_preemptor=True)


def pods_by_shape(pods: Iterable[Pod], split: Mapping[str, Split]) -> dict[Shape, list[str]]:
    """Pod keys by the node resources they ask for, in ``pods``' order (none: left out)."""
    out: dict[Shape, list[str]] = {}
    for p in pods:
        compute = split[p.key][0]
        if compute:
            out.setdefault(tuple(sorted(compute.items())), []).append(p.key)
    return out


@dataclass(frozen=True)
class PlaceResult:
    """Outcome of placing a group: ``allocated`` (holdings made), ``busy`` or ``unsatisfiable``."""

    status: str
    message: str = ""
    holdings: Mapping[str, Holding] = field(default_factory=dict)
    match_seconds: float = 0.0
    starts_in: int | None = None
    """Seconds until a waiting group's reservation starts (0: now); None when it has none."""
