"""Topology: which domains of the graph's levels (zones, racks) a group is matched in.

One domain when the group requires it; otherwise one rack if any holds it, else the
fewest racks with room (packed as the match fills them, or shared evenly), else one
zone, else anywhere; a composite's parts each in a domain of their own key. Each
choice is tried through the ``attempt`` it is given (the all-or-nothing match), so
this module owns only the choosing: it never holds, releases or queues anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fluence.cluster_graph import ClusterGraph
from fluence.group_jobspec import ComputeSpec, GroupSpecs
from fluence.pods import Pod, Split
from fluence.scheduling.request import GroupRequest, PlaceResult, pods_by_shape

PACK = "pack"
BALANCED = "balanced"
SPREADS = (PACK, BALANCED)
"""How a gang spanning several domains is shared: as the match fills them (``pack``), or
as evenly as their room allows (``balanced``)."""

Attempt = Callable[[GroupRequest, GroupSpecs], PlaceResult]
"""Match ``specs`` for the request now, all or nothing (the ledger's match and split)."""


def largest_shape(pods: Sequence[Pod], split: Mapping[str, Split]) -> dict[str, int]:
    """Per node resource, the most any of ``pods`` asks for."""
    largest: dict[str, int] = {}
    for p in pods:
        for t, n in split[p.key][0].items():
            largest[t] = max(largest.get(t, 0), n)
    return {t: n for t, n in largest.items() if n > 0}


def total_compute(pods: Sequence[Pod], split: Mapping[str, Split]) -> dict[str, int]:
    """The node resources a whole group asks for, summed over its pods."""
    total: dict[str, int] = {}
    for p in pods:
        for t, n in split[p.key][0].items():
            total[t] = total.get(t, 0) + n
    return total


def slots(
    nodes: Sequence[str], need: Mapping[str, int], usage: Mapping[str, Any], column: str
) -> int:
    """How many pods of ``need`` fit on ``nodes`` by their ``column`` (free or capacity)."""
    if not need:
        return 1 << 30
    return sum(
        min(usage[n].get(t, {}).get(column, 0) // amount for t, amount in need.items())
        for n in nodes
    )


def balanced_shares(count: int, room: Sequence[int]) -> list[int] | None:
    """``count`` split over domains of ``room`` as evenly as their room allows (None: no fit).

    Water-filling: every domain takes an equal share, capped by its room; what the
    capped ones cannot take goes to the others, one more each from the first.
    """
    shares = [0] * len(room)
    left = count
    open_ = [i for i, r in enumerate(room) if r > 0]
    while left and open_:
        each = max(1, left // len(open_))
        for i in list(open_):
            take = min(each, room[i] - shares[i], left)
            shares[i] += take
            left -= take
            if shares[i] == room[i]:
                open_.remove(i)
            if not left:
                break
    return None if left else shares


class DomainChoice:
    """Chooses the domains a group is matched in and tries them through ``attempt``.

    Called with the ledger's and the graph's locks held; keeps one piece of state,
    where the last group of each level went (next fit).
    """

    def __init__(self, graph: ClusterGraph, attempt: Attempt, spread: str = PACK) -> None:
        self.graph = graph
        self.spread = spread
        self._attempt = attempt
        self._next_domain: dict[str, str] = {}

    def domain_specs(
        self, req: GroupRequest, level: str, duration: int, start: str = ""
    ) -> Iterator[tuple[str, GroupSpecs]]:
        """(path, jobspecs of ``duration``) for each ``level`` domain that could ever hold it.

        In path order, beginning at the first path not before ``start``.
        """
        domains = self.graph.domains(level)
        need = total_compute(req.pods, req.split)
        paths = sorted(domains)
        first = next((i for i, p in enumerate(paths) if p >= start), 0)
        for path in paths[first:] + paths[:first]:
            members = domains[path]
            capacity = self.graph.capacity_of(members)
            if any(capacity.get(t, 0) < n for t, n in need.items()):
                continue  # this domain can never hold the group
            yield path, req.specs(duration, members)

    def ever_fits(self, req: GroupRequest, level: str) -> bool:
        """Would ``req`` fit the cluster with nothing held and every node up (in one
        ``level`` domain, when given)?"""
        if level:
            ways: Iterable[GroupSpecs] = (s for _, s in self.domain_specs(req, level, req.window))
        else:
            ways = (req.specs(req.window),)
        return any(all(self.graph.satisfiable(js) for js in s.jobspecs()) for s in ways)

    def packed(self, req: GroupRequest, specs: GroupSpecs) -> PlaceResult:
        """A gang without a topology constraint, in as few domains as the levels allow.

        One rack if any rack holds it, else the fewest racks that do, else one zone,
        else anywhere: the preference never makes a gang wait that fits across
        domains. A group of one, or a graph without levels, is matched once, anywhere.
        """
        if len(req.pods) > 1:
            levels = [
                level
                for level in reversed(self.graph.level_types())
                if len(self.graph.domains(level)) >= 2
            ]
            for i, level in enumerate(levels):
                result = self.one_domain(req, level)
                if result.status == "allocated":
                    return result
                if i == 0:
                    spanning = self._fewest_domains(req, level)
                    if spanning is not None:
                        return spanning
        return self._attempt(req, specs)

    def _fewest_domains(self, req: GroupRequest, level: str) -> PlaceResult | None:
        """A gang no one ``level`` domain holds, in the fewest of them that do (None if not).

        Each domain counts how many of the gang's largest pods its free capacity takes;
        the fewest domains with enough, those with the most first, are matched as one
        hostlist, preferring a set inside one parent domain (one zone) when that needs
        no more of them. Up to two more domains are added when the match still finds
        no room (capacity in pieces smaller than a pod's), then the caller goes on.
        """
        largest = largest_shape(req.pods, req.split)
        if not largest:
            return None
        usage = self.graph.node_usage()
        excluded = set(req.exclude)
        room: dict[str, int] = {}
        members: dict[str, list[str]] = {}
        for path, nodes in self.graph.domains(level).items():
            usable = [n for n in nodes if n not in excluded and n in usage]
            members[path] = usable
            room[path] = slots(usable, largest, usage, "free")
        wanted = len(req.pods)

        def fewest(paths: Sequence[str]) -> list[str]:
            chosen: list[str] = []
            held = 0
            for path in sorted(paths, key=lambda p: (-room[p], p)):
                if held >= wanted or not room[path]:
                    break
                chosen.append(path)
                held += room[path]
            return chosen if held >= wanted else []

        by_parent: dict[str, list[str]] = {}
        for path in room:
            by_parent.setdefault(path.rsplit("/", 1)[0], []).append(path)
        candidates = [c for c in (fewest(ps) for ps in by_parent.values()) if c]
        anywhere = fewest(list(room))
        if not anywhere:
            return None
        best = min(candidates, key=len) if candidates else anywhere
        if len(anywhere) < len(best):
            best = anywhere
        ranked = [p for p in sorted(room, key=lambda p: (-room[p], p)) if p not in best]
        for extra in range(3):
            chosen = best + ranked[:extra]
            if extra and len(chosen) == len(best):
                break
            within = [n for path in chosen for n in members[path]]
            specs = req.specs(req.window, within)
            if self.spread == BALANCED:
                specs = self._balanced(req, specs, chosen, members, room)
            result = self._attempt(req, specs)
            if result.status == "allocated":
                return result
        return None

    def _balanced(
        self,
        req: GroupRequest,
        whole: GroupSpecs,
        chosen: Sequence[str],
        members: Mapping[str, Sequence[str]],
        room: Mapping[str, int],
    ) -> GroupSpecs:
        """``whole``'s compute pods shared as evenly as the ``chosen`` domains' room allows.

        12 pods on two racks with room for 10 each: 6 and 6. Each domain's share is
        matched inside it; the devices stay one request for the group.
        """
        placed = [p for p in sorted(req.pods, key=lambda p: p.key) if req.split[p.key][0]]
        shares = balanced_shares(len(placed), [room[path] for path in chosen])
        if shares is None:
            return whole
        compute: list[ComputeSpec] = []
        start = 0
        for path, share in zip(chosen, shares, strict=True):
            part = placed[start : start + share]
            start += share
            if part:
                specs = req.narrowed(part).specs(req.window, members[path])
                compute.extend(specs.compute)
        return GroupSpecs(tuple(compute), whole.devices)

    def one_domain(self, req: GroupRequest, level: str) -> PlaceResult:
        """Place the whole group inside one vertex of type ``level`` (a rack, say).

        Each domain is tried in path order with every node outside it excluded, so the
        matcher's own all-or-nothing match decides; the first domain that holds the
        group wins. Busy when some domain could hold it once capacity frees.
        """
        busy = 0
        domains = self.graph.domains(level)
        # Next fit: start where the last group of this level went, so a stream of gangs
        # does not try every full domain before the one with room.
        start = self._next_domain.get(level, "")
        for path, specs in self.domain_specs(req, level, req.window, start):
            result = self._attempt(req, specs)
            if result.status == "allocated":
                self._next_domain[level] = path
                return result
            busy += result.status == "busy"
        group = req.group
        if busy:
            return PlaceResult(
                "busy",
                f"group {group}: no single {level} has room for all of its pods now "
                f"({busy} of {len(domains)} could hold them once capacity frees)",
            )
        return PlaceResult(
            "unsatisfiable",
            f"group {group} can never fit: no {level} ({len(domains)} in the graph) can hold "
            "all of its pods, and the group requires one",
        )

    def parts(
        self, req: GroupRequest, level: str, parts: Sequence[tuple[str, Sequence[str]]]
    ) -> PlaceResult:
        """A group whose ``parts`` each need one domain of their own key, inside one domain
        of ``level`` (the whole cluster when ""), matched together, all or nothing.

        Per outer domain, each part (largest first) takes the inner domain with the
        fewest free slots that still hold it, its room then counted as used; the
        pods of no part may go anywhere in the outer domain.
        """
        inner, rest = self._inner(req, parts)
        usage = self.graph.node_usage()
        excluded = set(req.exclude)
        devices = req.specs(req.window).devices
        could = False
        for nodes in self._outer(level).values():
            allowed = {n for n in nodes if n not in excluded and n in usage}
            if not self._could_hold(inner, allowed, usage, req):
                continue
            could = True
            chosen: list[tuple[list[str], list[Pod]]] = []
            used: dict[str, int] = {}
            for child_level, members in inner:
                largest = largest_shape(members, req.split)
                best: tuple[int, str, list[str]] | None = None
                for dpath, dnodes in self.graph.domains(child_level).items():
                    mine = [n for n in dnodes if n in allowed]
                    room = slots(mine, largest, usage, "free") - used.get(dpath, 0)
                    if mine and room >= len(members) and (best is None or room < best[0]):
                        best = (room, dpath, mine)
                if best is None:
                    break
                used[best[1]] = used.get(best[1], 0) + len(members)
                chosen.append((best[2], members))
            else:
                compute: list[ComputeSpec] = []
                for within, members in chosen:
                    compute.extend(self._named_specs(req.narrowed(members), within))
                if rest:
                    within = sorted(allowed) if level else []
                    compute.extend(self._named_specs(req.narrowed(rest), within))
                result = self._attempt(req, GroupSpecs(tuple(compute), devices))
                if result.status == "allocated":
                    return result
        what = f"one {level}" if level else "the cluster"
        if could:
            return PlaceResult(
                "busy",
                f"group {req.group}: no room now in {what} for each of its parts in a domain "
                "of its own",
            )
        return PlaceResult(
            "unsatisfiable",
            f"group {req.group} can never fit: {what} has no domains that can hold each of "
            "its parts",
        )

    def parts_ever_fit(
        self, req: GroupRequest, level: str, parts: Sequence[tuple[str, Sequence[str]]]
    ) -> bool:
        """Would each of ``parts`` have a domain of its key to hold it, inside one ``level``
        domain, on the nodes ``req`` may use with nothing held (as :meth:`parts` decides
        that a group can never fit)?"""
        inner, _ = self._inner(req, parts)
        usage = self.graph.node_usage()
        excluded = set(req.exclude)
        return any(
            self._could_hold(
                inner, {n for n in nodes if n not in excluded and n in usage}, usage, req
            )
            for nodes in self._outer(level).values()
        )

    def _outer(self, level: str) -> dict[str, list[str]]:
        return self.graph.domains(level) if level else {"": list(self.graph.node_names())}

    def _inner(
        self, req: GroupRequest, parts: Sequence[tuple[str, Sequence[str]]]
    ) -> tuple[list[tuple[str, list[Pod]]], list[Pod]]:
        """(the level and the pods of each part with pods, largest first; the pods of none)."""
        by_key = {p.key: p for p in req.pods}
        inner = [
            (self.graph.level_of(key), [by_key[k] for k in keys if k in by_key])
            for key, keys in parts
        ]
        inner = [(level, members) for level, members in inner if members]
        inner.sort(key=lambda part: -len(part[1]))
        in_parts = {p.key for _, members in inner for p in members}
        return inner, [p for p in req.pods if p.key not in in_parts]

    def _could_hold(
        self,
        inner: list[tuple[str, list[Pod]]],
        allowed: set[str],
        usage: Mapping[str, Mapping[str, Mapping[str, int]]],
        req: GroupRequest,
    ) -> bool:
        """Has each part a domain of its level whose ``allowed`` nodes hold it, nothing
        held?"""
        for child_level, members in inner:
            largest = largest_shape(members, req.split)
            if not any(
                slots([n for n in dnodes if n in allowed], largest, usage, "capacity")
                >= len(members)
                for dnodes in self.graph.domains(child_level).values()
            ):
                return False
        return True

    @staticmethod
    def _named_specs(req: GroupRequest, within: Sequence[str]) -> list[ComputeSpec]:
        """``req``'s compute jobspecs ``within`` some nodes, each for exactly its pods."""
        specs = req.specs(req.window, within)
        by_shape = pods_by_shape(sorted(req.pods, key=lambda p: p.key), req.split)
        named = {k for cs in specs.compute for k in cs.pods}  # kept apart for host ports
        return [
            cs
            if cs.pods
            else replace(cs, pods=tuple(k for k in by_shape[cs.shape] if k not in named))
            for cs in specs.compute
        ]
