"""Preemption: which lower-priority units make room for a waiting group, and who is going.

A unit is a whole group, or one pod of a group whose PodGroup lets its pods be
disrupted one at a time (:attr:`Holding.unit`). Victims are chosen with a
what-if match (the graph without them), the fewest and lowest first; while they
go, the room they free is kept for the group they go for. This unit owns that
choice and the record of who is being evicted for whom; it never evicts a pod
(``scheduler_extender.eviction`` does) nor releases a holding (the ledger does,
when the pod is gone). Callers hold the ledger's and the graph's locks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fluence.cluster_graph import ClusterGraph
from fluence.group_jobspec import with_duration
from fluence.scheduling.holdings import FOREIGN, Holding
from fluence.scheduling.queue import Waiting

FORGET_AFTER = 4096
"""Groups whose "no victims" answer is remembered; past that, all are forgotten."""


class Preemption:
    """Units being evicted -> the group they make room for; the choice of the next ones."""

    def __init__(self, graph: ClusterGraph) -> None:
        self.graph = graph
        self.evicting: dict[str, str] = {}
        """Units being evicted (whole groups, or pods of singly groups) -> whom they make
        room for."""
        self._no_victims: dict[str, int] = {}
        """Waiting group -> the version of the holdings at which no set of victims would
        have let it fit: asked again by each member's filter, the answer stands until
        something is placed or released."""

    def candidates(self, w: Waiting, holdings: Iterable[Holding]) -> dict[str, list[Holding]]:
        """Units that may make room for ``w``, with their holdings.

        Units fluence placed whose priority is lower than ``w``'s and that are not
        being preempted already.
        """
        members: dict[str, list[Holding]] = {}
        for h in holdings:
            if (
                h.state != FOREIGN
                and h.group
                and h.group != w.group
                and h.priority < w.priority
                and h.unit not in self.evicting
            ):
                members.setdefault(h.unit, []).append(h)
        return members

    def choose(
        self,
        w: Waiting,
        members: dict[str, list[Holding]],
        holdings: Iterable[Holding],
        version: int,
    ) -> list[str]:
        """The fewest, lowest-priority of ``members`` whose going lets waiting ``w`` fit now.

        The lowest priority, then the most recently placed, then the smallest, are
        taken first until a what-if match says the group fits, then any taken one
        that is not needed is put back. Empty when no such set exists, or when the
        group fits without one (capacity came free since its match failed). The
        caller has dropped ``w``'s own reservation, which would stand in its way.
        """
        self.graph.hold_on()
        order = sorted(
            members,
            key=lambda u: (
                max(h.priority for h in members[u]),
                -max(h.placed for h in members[u]),
                len(members[u]),
                u,
            ),
        )
        # Units of each group that may lose pods singly: its shared devices go only
        # with its last one.
        group_units: dict[str, set[str]] = {}
        for h in holdings:
            if h.singly:
                group_units.setdefault(h.group, set()).add(h.unit)

        def jobs_of(units: Iterable[str]) -> set[int]:
            out: set[int] = set()
            taken = set(units)
            for u in taken:
                for h in members[u]:
                    if h.jobid:
                        out.add(h.jobid)
                    if not h.singly or group_units[h.group] <= taken:
                        out.update(d.jobid for d in h.devices if d.jobid)
            return out

        # As its placement will ask: for as long as nothing ends it, unless enforced.
        window = w.runtime if w.enforced else 0
        now_options = [
            [with_duration(js, window) for js in specs.jobspecs()] for specs in w.options
        ]

        def fits(units: list[str]) -> bool:
            with self.graph.without(jobs_of(units)):
                return any(self.graph.fits_now(jobspecs) for jobspecs in now_options)

        if fits([]):
            # Room came free since its match failed (a victim ended): nothing to take.
            return []
        chosen: list[str] = []
        for u in order:
            chosen.append(u)
            if fits(chosen):
                break
        else:
            self._no_victims[w.group] = version
            if len(self._no_victims) > FORGET_AFTER:
                self._no_victims.clear()
            return []
        for u in list(reversed(chosen[:-1])):
            rest = [c for c in chosen if c != u]
            if fits(rest):
                chosen = rest
        return chosen

    def worth_asking(self, w: Waiting | None, version: int) -> bool:
        """Could victims let ``w`` fit: it waits, can be matched, and nothing said no since?"""
        return w is not None and bool(w.options) and self._no_victims.get(w.group) != version

    def mark(self, unit: str, by: str) -> None:
        self.evicting[unit] = by

    def unmark(self, unit: str) -> str | None:
        """``unit`` is gone (or had nothing bound to evict); whom it made room for."""
        return self.evicting.pop(unit, None)

    def for_group(self, group: str) -> list[str]:
        """The units being evicted to make room for ``group``, sorted."""
        return sorted(u for u, by in self.evicting.items() if by == group)

    def kept_room(
        self, group: str, priority: int, waiting: Callable[[str], Waiting | None]
    ) -> frozenset[str]:
        """Nodes reserved for higher-priority groups whose preempted pods are still going.

        Their reservations start when those pods are planned to be gone, which is a
        guess renewed second by second (:meth:`ClusterGraph.end_soon`); a short job
        placed in front of one on those nodes, ending "just before", would delay the
        preemptor and be preempted in turn. ``group`` is matched off them meanwhile;
        other nodes stay open to it. ``waiting``: a waiting group by name.
        """
        nodes: set[str] = set()
        for by in set(self.evicting.values()):
            w = waiting(by)
            if by == group or w is None or w.priority <= priority or w.reservation is None:
                continue
            nodes |= self.graph.reserved_nodes(w.reservation.jobs)
        return frozenset(nodes)
