"""How long a group is expected to run: what the planner needs to reserve behind it.

A pod's estimate is, first that applies: its ``activeDeadlineSeconds`` (the
kubelet ends the pod then, so it is an upper bound nobody can talk past), the
``fluence.flux-framework.org/runtime`` annotation, the configured default. A
group runs as long as its longest member. An estimate is for planning only: a
pod that outlives it keeps its capacity (the graph holds it on), and the
reservations behind it move later.

Only an enforced runtime lets a group start in front of another group's
reservation (backfill): an annotation is the tenant's word, and a tenant who
wrote "1m" on an hour's work would otherwise jump the queue and delay the
groups that waited. A Job's deadline reaches its pods through the webhook.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable

from fluence import names
from fluence.pods import Pod

MAX_RUNTIME = 10 * 365 * 24 * 3600
"""Longest estimate accepted (ten years); longer ones are cut to it."""

_RUNTIME = re.compile(r"([0-9]{1,9})(s|m|h|d)?")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_runtime(text: str) -> int | None:
    """``"90"``, ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` -> seconds; None when not that form."""
    m = _RUNTIME.fullmatch(text.strip())
    if not m:
        return None
    seconds = int(m.group(1)) * _UNIT[m.group(2) or ""]
    return min(seconds, MAX_RUNTIME) if seconds > 0 else None


def pod_runtime(pod: Pod, default: int) -> int:
    """Seconds ``pod`` is expected to run (0: unknown, until it ends)."""
    deadline = pod.spec.active_deadline_seconds
    if deadline is not None and deadline > 0:
        return min(deadline, MAX_RUNTIME)
    text = pod.metadata.annotations.get(names.ANNOTATION_RUNTIME)
    if text:
        parsed = parse_runtime(text)
        if parsed is not None:
            return parsed
    return max(default, 0)


def group_runtime(pods: Iterable[Pod], default: int) -> int:
    """The longest member's estimate; unknown (0) when any member's is."""
    longest = 0
    for p in pods:
        r = pod_runtime(p, default)
        if r == 0:
            return 0
        longest = max(longest, r)
    return longest


def time_left(pod: Pod, runtime: int, now: float) -> int:
    """Seconds of ``runtime`` a pod has still to run at Unix time ``now`` (0: unknown).

    Counted from the pod's start, so a restarted scheduler plans a running pod's end
    where the one before it did, not a whole runtime from the restart; a pod past its
    estimate is given a second (the graph holds it on while it runs).
    """
    if runtime <= 0 or not pod.status.start_time:
        return runtime
    try:
        started = datetime.datetime.fromisoformat(pod.status.start_time).timestamp()
    except ValueError:
        return runtime
    return max(runtime - max(int(now - started), 0), 1)


def group_enforced(pods: Iterable[Pod]) -> bool:
    """Whether every member's runtime is its ``activeDeadlineSeconds`` (the kubelet's limit)."""
    return all(
        p.spec.active_deadline_seconds is not None and p.spec.active_deadline_seconds > 0
        for p in pods
    )
