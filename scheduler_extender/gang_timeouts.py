"""How many times each released group missed the gang timeout, and when it may go again.

The queue evicts a group whose members were not all bound in time and places its
new pods only after a back-off (doubling with each timeout, up to a limit); after
``retry_limit`` timeouts it stops placing them. Those counts outlive the leader:
the queue carries them on its own Lease (an annotation only the leader writes, so
no tenant can reset or raise them), and a new leader starts from what the last one
wrote. At most :data:`KEPT` groups are kept, the longest-quiet dropped first.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

KEPT = 1000
"""Groups remembered at most (each about 80 bytes of the Lease's annotations)."""
FORGET_AFTER = 3600.0
"""Seconds after its back-off ended that a group with no pods left is forgotten."""


@dataclass(frozen=True)
class Timeouts:
    count: int
    until: float
    """Monotonic time before which the group is not placed again."""


class GangTimeouts:
    def __init__(
        self,
        backoff: float,
        max_backoff: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.clock = clock
        self.wall = wall
        self._by_group: dict[str, Timeouts] = {}

    def get(self, group: str) -> Timeouts:
        return self._by_group.get(group, Timeouts(0, 0.0))

    def bump(self, group: str) -> Timeouts:
        """One more timeout for ``group``: its count and the end of its back-off."""
        count = self.get(group).count + 1
        wait = min(self.backoff * 2 ** (count - 1), self.max_backoff)
        self._by_group.pop(group, None)  # newest last, so the oldest go first
        self._by_group[group] = t = Timeouts(count, self.clock() + wait)
        while len(self._by_group) > KEPT:
            del self._by_group[next(iter(self._by_group))]
        return t

    def forget_quiet(self, alive: Iterable[str]) -> None:
        """Drop groups with no pods in the queue whose back-off ended long ago."""
        keep = set(alive)
        now = self.clock()
        for group in [
            g for g, t in self._by_group.items() if g not in keep and now - t.until > FORGET_AFTER
        ]:
            del self._by_group[group]

    def encode(self) -> str:
        """The annotation value: group -> [count, back-off end as Unix time]."""
        offset = self.wall() - self.clock()
        return json.dumps(
            {g: [t.count, round(t.until + offset, 3)] for g, t in self._by_group.items()},
            separators=(",", ":"),
        )

    def load(self, text: str | None) -> None:
        """Start from what a previous leader wrote; anything malformed is left out."""
        if not text:
            return
        try:
            doc = json.loads(text)
        except ValueError:
            log.warning("gang timeouts on the queue Lease are not JSON; starting from none")
            return
        if not isinstance(doc, dict):
            return
        offset = self.clock() - self.wall()
        for group, value in list(doc.items())[-KEPT:]:
            if not (
                isinstance(group, str)
                and isinstance(value, list)
                and len(value) == 2
                and type(value[0]) is int
                and value[0] > 0
                and isinstance(value[1], int | float)
            ):
                continue
            mine = self._by_group.get(group)
            if mine is None or mine.count < value[0]:
                self._by_group[group] = Timeouts(value[0], float(value[1]) + offset)
