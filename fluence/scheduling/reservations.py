"""Reservations: the waiting groups in order, and the capacity held for the first of them.

The first ``depth`` waiting groups (the :mod:`~fluence.scheduling.backfill`
policy's) hold reservations: matcher jobs at the earliest time their capacity
frees, made with Fluxion's ``allocate_orelse_reserve`` from each holding's
expected end. Every match made now must leave those spans free, so a later
group is placed now only where it delays no group ahead of it.
Reservations are made again, in order, whenever capacity frees or the order
changes, so they move earlier when pods end early. This unit owns the queue, the
depth and when to make reservations again; it never places or holds a pod. Callers
hold the ledger's and the graph's locks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fluence.cluster_graph import ClusterGraph
from fluence.group_jobspec import GroupSpecs
from fluence.scheduling.backfill import Backfill
from fluence.scheduling.queue import GroupQueue, Reservation, Waiting
from fluence.scheduling.request import PlaceResult
from fluxion_nb.errors import InputError, StateError

log = logging.getLogger(__name__)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class Reservations:
    """The queue of waiting groups and the reservations of its first ``depth``."""

    def __init__(self, graph: ClusterGraph, new_id: Callable[[], int], backfill: Backfill) -> None:
        self.graph = graph
        self.queue = GroupQueue()
        self.backfill = backfill
        self.depth = backfill.depth
        """Waiting groups that hold a reservation (1: EASY backfill)."""
        self._new_id = new_id
        self._reserved: list[str] = []
        """Groups holding reservations, in queue order: always a prefix of the queue."""
        self._replan = False
        """Capacity freed or the order changed: reservations may move, make them again."""
        self._drops_seen = graph.reservations_dropped

    def moved(self) -> None:
        """Capacity freed or plans changed: the reservations are made again at the next look."""
        self._replan = True

    def ahead(self, waiting: Waiting | None) -> None:
        """Make sure the groups ahead of ``waiting`` hold their reservations, in order.

        Reservations of ``waiting`` itself and of the groups behind it are dropped:
        its match now may take what they reserved, never what the groups ahead did.
        ``None``: the whole queue, up to the depth.
        """
        self.graph.hold_on()
        if waiting is None:
            ahead = self.queue.ordered()[: self.depth]
        else:
            ahead = self.queue.ahead_of(waiting.group, self.depth)
        if self._replan or self.graph.reservations_dropped != self._drops_seen:
            self._drop(0)
            self._replan = False
            self._drops_seen = self.graph.reservations_dropped
        keep = 0
        now = self.graph.now()
        while (
            keep < len(self._reserved)
            and keep < len(ahead)
            and self._reserved[keep] == ahead[keep].group
            and not self._lapsing(ahead[keep], now)
        ):
            keep += 1
        self._drop(keep)
        for w in ahead[keep:]:
            self._reserve(w)

    def cancel(self, w: Waiting) -> None:
        """Cancel ``w``'s reservation, if it holds one."""
        if w.reservation is not None:
            self.graph.cancel_reservations(w.reservation.jobs)
            w.reservation = None

    @staticmethod
    def _lapsing(w: Waiting, now: int) -> bool:
        """``w``'s reservation is half over and the group has not started.

        A reservation covers the group's runtime from its start; while any of it is
        left, nothing placed now can overlap it. When the group's pods are slow to
        ask again, it is made again from now (with those behind it) before it ends:
        at half its span, so at most twice per runtime, not on every call.
        """
        r = w.reservation
        return r is not None and w.runtime > 0 and now - r.start >= max(w.runtime // 2, 1)

    def _drop(self, keep: int) -> None:
        """Cancel the reservations of all but the first ``keep`` reserved groups."""
        for group in self._reserved[keep:]:
            w = self.queue.get(group)
            if w is not None:
                self.cancel(w)
        del self._reserved[keep:]

    def _reserve(self, w: Waiting) -> None:
        """Reserve ``w``'s capacity at the earliest time it frees (now, when it fits now).

        A group with several ways to be placed (one per rack it may use) takes the
        one that starts first.
        """
        self._reserved.append(w.group)
        w.reservation, w.note = None, "not reserved: it fits none of the nodes open to it now"
        now = self.graph.now()
        for specs in w.options:
            got = self._reserve_one(specs, w)
            if got is None:
                continue
            if w.reservation is None or got.start < w.reservation.start:
                self.cancel(w)
                w.reservation, w.note = got, ""
            else:
                self.graph.cancel_reservations(got.jobs)
            if w.reservation.start <= now:
                break

    def _reserve_one(self, specs: GroupSpecs, w: Waiting) -> Reservation | None:
        now = self.graph.now()
        jobs: list[int] = []
        start = now
        for js in specs.jobspecs():
            jid = self._new_id()
            try:
                if w.enforced:
                    alloc = self.graph.reserve(js, jid)
                else:
                    alloc = self.graph.reserve_open_ended(js, jid)
            except (InputError, StateError) as exc:
                self.graph.cancel_reservations(jobs)
                w.note = f"cannot be reserved: {exc}"
                return None
            if not alloc.ok:
                self.graph.cancel_reservations(jobs)
                if alloc.status != "unsatisfiable":
                    w.note = (
                        "no start time can be planned: what it needs is held with no expected end"
                    )
                return None
            jobs.append(jid)
            start = max(start, alloc.at)
        return Reservation(tuple(jobs), start, now)

    def outcome(self, waiting: Waiting, result: PlaceResult) -> PlaceResult:
        """Leave the queue when placed or never placeable; else reserve and say when it starts."""
        if result.status != "busy":
            self.left(self.queue.leave(waiting.group), "")
            return result
        position = self.queue.position(waiting.group)
        if position <= self.depth:
            self._reserve(waiting)
        r = waiting.reservation
        starts_in = max(r.start - self.graph.now(), 0) if r is not None else None
        return PlaceResult(
            result.status, f"{result.message}; {self.when(waiting)}", starts_in=starts_in
        )

    def when(self, w: Waiting) -> str:
        """When ``w`` is expected to start, in words for its pods' events."""
        position, waiting = self.queue.position(w.group), len(self.queue)
        where = f"{ordinal(position)} of {waiting} waiting groups"
        r = w.reservation
        if r is None:
            return f"{where}, {w.note or 'not reserved yet (behind the reserved groups)'}"
        if r.start <= r.made:
            return f"{where}; capacity is held for it now"
        at = self.graph.wall_time(r.start)
        clock = time.strftime("%H:%M:%S", time.gmtime(at))
        return f"{where}; reserved from {clock} UTC (in {r.start - self.graph.now()}s)"

    def left(self, w: Waiting | None, why: str) -> None:
        """``w`` left the queue: its reservation goes, and those behind may move earlier."""
        if w is None:
            return
        self.cancel(w)
        if w.group in self._reserved:
            self._replan = True
        if why:
            log.info("group left the queue", extra={"group": w.group, "reason": why})

    def forget_pod(self, pod: str, why: str = "its pods are gone") -> None:
        """A pod is gone (or no longer waits): its group leaves the queue when it was its last."""
        self.left(self.queue.forget_pod(pod), why)

    def drop_silent(self, now: float, silent: float) -> None:
        """Groups none of whose pods asked for ``silent`` seconds leave the queue."""
        for w in self.queue.stale(now, silent):
            self.left(w, f"none of its pods asked to be placed for {silent:.0f}s")

    def fitting_unasked(
        self, quiet: float, repeat: float, clock: float
    ) -> list[tuple[str, list[str]]]:
        """Reserved groups that fit now but none of whose pods asked for ``quiet`` seconds.

        Their pods are likely parked in kube-scheduler's unschedulable queue, which
        an event about the room that came free would have emptied; but kube-scheduler
        may see such an event (a deletion) before this ledger does, ask, be refused
        and then wait minutes. Reservations are made again first, so a group that
        fits now holds one that starts now. A group is returned once after each
        ask, and again every ``repeat`` seconds while it still waits. Returns
        (group, its pods).
        """
        self.ahead(None)
        now = self.graph.now()
        due = []
        for w in self.queue.ordered()[: self.depth]:
            r = w.reservation
            if r is None or r.start > now or clock - w.seen < quiet:
                continue
            if w.requeued > w.seen and clock - w.requeued < repeat:
                continue
            w.requeued = clock
            due.append((w.group, sorted(w.pods)))
        return due

    def listing(self, clock: float) -> list[dict[str, Any]]:
        """The queue in order, for ``/state`` and ``kubectl fluence queue``."""
        out = []
        now = self.graph.now()
        for i, w in enumerate(self.queue.ordered(), 1):
            r = w.reservation
            out.append(
                {
                    "group": w.group,
                    "position": i,
                    "priority": w.priority,
                    "pods": len(w.pods),
                    "runtime": w.runtime,
                    "waiting_seconds": round(clock - w.since, 3),
                    "reserved": r is not None,
                    "start": (
                        time.strftime(
                            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.graph.wall_time(r.start))
                        )
                        if r is not None
                        else None
                    ),
                    "starts_in": max(r.start - now, 0) if r is not None else None,
                    "note": w.note,
                }
            )
        return out
