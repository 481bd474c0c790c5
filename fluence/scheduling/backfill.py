"""Backfill policies: how many waiting groups a later group may not delay.

As in flux-sched's queue manager, a policy is the reservation depth it keeps:
conservative protects every waiting group up to a depth, EASY only the head,
and ``NONE`` nobody (a group fits now or waits; the baseline benchmarks use).
:mod:`fluence.scheduling.reservations` applies the depth; this unit only names
the choices and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DEPTH = 32


@dataclass(frozen=True)
class Backfill:
    name: str
    depth: int
    """Waiting groups, from the head, that hold a reservation."""

    def __post_init__(self) -> None:
        if self.depth < 0:
            raise ValueError(f"a reservation depth cannot be negative ({self.depth})")


def conservative(depth: int = DEFAULT_DEPTH) -> Backfill:
    """The first ``depth`` waiting groups hold reservations nothing placed later may delay."""
    if depth < 1:
        raise ValueError(f"conservative backfill protects at least one group, not {depth}")
    return Backfill("conservative", depth)


EASY = Backfill("easy", 1)
"""Only the head of the queue holds a reservation."""
NONE = Backfill("none", 0)
"""No reservations: a group is placed when it fits now, whoever waits longer."""
POLICIES = ("conservative", "easy")
"""The policies an operator chooses from."""


def named(name: str, depth: int = DEFAULT_DEPTH) -> Backfill:
    """The policy called ``name``; ``depth`` is conservative's. ValueError for others."""
    if name == "conservative":
        return conservative(depth)
    if name == "easy":
        return EASY
    raise ValueError(f"backfill must be one of {', '.join(POLICIES)}, not {name!r}")
