"""The order among groups waiting for capacity: priority first, then arrival.

A group joins when a match finds it busy and leaves once it is placed, when its
pods are gone, or when none of them has asked again for ``timeout`` seconds.
The queue only orders and remembers; :mod:`fluence.scheduling.reservations` makes the
reservations (:class:`Reservation`) in this order, so that a group placed now never takes
capacity from a group ahead of it at the time that group will start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reservation:
    """Matcher jobs that keep a waiting group's capacity free from ``start`` on.

    ``start`` is graph time (:meth:`~fluence.cluster_graph.ClusterGraph.now`):
    equal to the time it was made when the group fits now and only waits for
    its pods to ask again.
    """

    jobs: tuple[int, ...]
    start: int
    made: int


@dataclass
class Waiting:
    """One group in the queue."""

    group: str
    priority: int
    seq: int
    """Arrival order: earlier groups of equal priority go first."""
    since: float
    """When the group first waited (the clock of the queue)."""
    seen: float
    """When one of its pods last asked to be placed."""
    pods: set[str] = field(default_factory=set)
    runtime: int = 0
    enforced: bool = True
    """Its runtime is its pods' activeDeadlineSeconds: it may start in front of a
    reservation that begins after it ends (see :mod:`fluence.runtimes`)."""
    options: tuple[Any, ...] = ()
    """Ways to reserve the group (``GroupSpecs`` each: one per topology domain when it
    requires one), built when it last asked; the earliest start wins."""
    reservation: Reservation | None = None
    note: str = ""
    """Why the group has no reservation, when it has none."""
    requeued: float = 0.0
    """When kube-scheduler was last asked to try its pods again (0: never)."""

    @property
    def key(self) -> tuple[int, int]:
        return (-self.priority, self.seq)


class GroupQueue:
    """Waiting groups by (priority, arrival); not thread-safe (the ledger's lock guards it)."""

    def __init__(self) -> None:
        self._entries: dict[str, Waiting] = {}
        self._group_of: dict[str, str] = {}
        """Pod -> the waiting group it belongs to."""
        self._order: list[Waiting] | None = None
        self._index: dict[str, int] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, group: object) -> bool:
        return group in self._entries

    def get(self, group: str) -> Waiting | None:
        return self._entries.get(group)

    def arrive(
        self,
        group: str,
        priority: int,
        pods: Iterable[str],
        now: float,
        *,
        runtime: int = 0,
        enforced: bool = True,
        options: tuple[Any, ...] = (),
    ) -> Waiting:
        """The group asks to be placed: add it, or refresh it keeping its place.

        A change of priority moves it (a PodGroup whose priority was raised); its
        arrival stays what it was.
        """
        w = self._entries.get(group)
        if w is None:
            self._seq += 1
            w = Waiting(group, priority, self._seq, now, now)
            self._entries[group] = w
            self._order = None
        elif w.priority != priority:
            w.priority = priority
            self._order = None
        w.seen = now
        for p in pods:
            if p not in w.pods:
                w.pods.add(p)
                self._group_of[p] = group
        w.runtime = runtime
        w.enforced = enforced
        w.options = options
        return w

    def leave(self, group: str) -> Waiting | None:
        w = self._entries.pop(group, None)
        if w is not None:
            self._order = None
            for p in w.pods:
                if self._group_of.get(p) == group:
                    del self._group_of[p]
        return w

    def forget_pod(self, pod: str) -> Waiting | None:
        """``pod`` is gone; a group with no pod left leaves (returned)."""
        group = self._group_of.pop(pod, None)
        w = self._entries.get(group) if group is not None else None
        if w is None:
            return None
        w.pods.discard(pod)
        return self.leave(w.group) if not w.pods else None

    def _sorted(self) -> list[Waiting]:
        if self._order is None:
            self._order = sorted(self._entries.values(), key=lambda w: w.key)
            self._index = {w.group: i for i, w in enumerate(self._order)}
        return self._order

    def ordered(self) -> list[Waiting]:
        return list(self._sorted())

    def ahead_of(self, group: str, limit: int | None = None) -> list[Waiting]:
        """The groups that go before ``group`` (all when it is not queued), the first ``limit``."""
        order = self._sorted()
        end = self._index.get(group, len(order))
        return order[: end if limit is None else min(end, limit)]

    def position(self, group: str) -> int:
        """1 for the head; 0 when the group is not queued."""
        self._sorted()
        i = self._index.get(group)
        return 0 if i is None else i + 1

    def stale(self, now: float, timeout: float) -> list[Waiting]:
        """Groups none of whose pods asked within ``timeout``: remove and return them."""
        old = [w for w in self._entries.values() if now - w.seen >= timeout]
        for w in old:
            self.leave(w.group)
        return old
