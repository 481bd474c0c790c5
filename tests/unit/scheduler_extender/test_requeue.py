"""Pods of a waiting group that fits now are marked so kube-scheduler tries them again.

The ledger runs on a fake clock (one-core nodes, one core per pod, as in the
reservation tests); the condition writer is a recorder.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fluence import names
from fluence.scheduling.backfill import EASY, Backfill, conservative
from scheduler_extender.requeue import Requeuer
from tests.unit.fluence.scheduling.test_reservations import cluster, gang, place, pod, release_group


class Writes:
    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail or {}

    def __call__(self, pod: str, condition: dict[str, Any]) -> None:
        self.calls.append((pod, condition))
        if pod in self.fail:
            raise self.fail[pod]

    def pods(self) -> list[str]:
        return [p for p, _ in self.calls]


def requeuer(ledger: Any, writes: Writes) -> Requeuer:
    return Requeuer(
        ledger,
        writes,
        quiet=1.0,
        repeat=30.0,
        clock=lambda: dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    )


def test_a_gang_that_fits_once_room_frees_is_marked_once_per_ask() -> None:
    ledger, clock = cluster(2)
    running = gang("running", 2, 100)
    assert place(ledger, "running", running).status == "allocated"
    waiting = gang("waiting", 2, 50)
    assert place(ledger, "waiting", waiting).status == "busy"
    writes = Writes()
    r = requeuer(ledger, writes)

    clock.t += 5
    assert r.check() == 0, "nothing fits while the running gang holds both cores"
    release_group(ledger, running)
    assert r.check() == 2
    assert writes.pods() == ["default/waiting-0", "default/waiting-1"]
    condition = writes.calls[0][1]
    assert condition["type"] == names.CONDITION_ROOM_FREE
    assert condition["status"] == "True"
    assert "default/waiting" in condition["message"]
    assert condition["lastProbeTime"] == "2026-01-02T03:04:05Z"

    clock.t += 10
    assert r.check() == 0, "marked already and no pod asked since"
    clock.t += 25
    assert r.check() == 2, "still waiting after the repeat interval: marked again"
    # Its pods ask: the group is placed and leaves the queue; nothing more to mark.
    assert place(ledger, "waiting", waiting).status == "allocated"
    clock.t += 60
    assert r.check() == 0
    assert len(writes.calls) == 4


def test_a_group_that_asked_within_the_quiet_time_is_not_marked() -> None:
    ledger, clock = cluster(2)
    blockers = [pod("b0", 100), pod("b1", 100)]
    for p in blockers:
        place(ledger, p.metadata.name, [p])
    waiting = gang("waiting", 2, 10)
    assert place(ledger, "waiting", waiting).status == "busy"
    writes = Writes()
    r = requeuer(ledger, writes)
    release_group(ledger, blockers[:1])
    clock.t += 5
    assert r.check() == 0, "one core free: the gang still does not fit"
    release_group(ledger, blockers[1:])
    # As if kube-scheduler had retried it half a second ago (refused: the ledger had not
    # yet seen the second release).
    ledger.queue.get("default/waiting").seen = clock.t - 0.5  # type: ignore[union-attr]
    assert r.check() == 0, "it asked just now: kube-scheduler is retrying it anyway"
    clock.t += 0.5
    assert r.check() == 2
    # A higher-priority gang takes the room first; the gang asks again and waits. When
    # room frees once more it is marked after the quiet time, not the repeat interval.
    urgent = gang("urgent", 2, 10, priority=10)
    assert place(ledger, "urgent", urgent, priority=10).status == "allocated"
    assert place(ledger, "waiting", waiting).status == "busy"
    release_group(ledger, urgent)
    clock.t += 1
    assert r.check() == 2
    assert writes.pods() == ["default/waiting-0", "default/waiting-1"] * 2


def test_only_groups_that_fit_now_are_marked_in_queue_order() -> None:
    ledger, clock = cluster(3)
    running = [pod("a", 100), pod("b", 100), pod("c", 100)]
    for p in running:
        place(ledger, p.metadata.name, [p])
    assert place(ledger, "first", gang("first", 2, 50)).status == "busy"
    assert place(ledger, "second", gang("second", 2, 50)).status == "busy"
    clock.t += 5
    release_group(ledger, running[:2])  # two cores free: room for the head only
    writes = Writes()
    assert requeuer(ledger, writes).check() == 2
    assert writes.pods() == ["default/first-0", "default/first-1"]
    starts = {w["group"]: w["starts_in"] for w in ledger.waiting()}
    assert starts == {"default/first": 0, "default/second": 50}  # when the head ends


def test_a_pod_that_cannot_be_marked_does_not_stop_the_others() -> None:
    ledger, clock = cluster(3)
    running = gang("running", 3, 100)
    place(ledger, "running", running)
    assert place(ledger, "waiting", gang("waiting", 3, 50)).status == "busy"
    release_group(ledger, running)
    clock.t += 2
    writes = Writes(
        {
            "default/waiting-0": ApiException(status=404),
            "default/waiting-1": ConnectionError("reset"),
        }
    )
    assert requeuer(ledger, writes).check() == 1
    assert writes.pods() == ["default/waiting-0", "default/waiting-1", "default/waiting-2"]


@pytest.mark.parametrize("backfill", [EASY, conservative(4)], ids=["easy", "conservative-4"])
def test_groups_beyond_the_reserved_depth_are_left_to_kube_scheduler(backfill: Backfill) -> None:
    """Only a reserved group is known to fit now; the others are matched when they ask."""
    ledger, clock = cluster(4, backfill=backfill)
    blocker = gang("blocker", 4, 100)
    place(ledger, "blocker", blocker)
    for name in ("x", "y"):
        assert place(ledger, name, [pod(name, 10)]).status == "busy"
    release_group(ledger, blocker)
    clock.t += 2
    writes = Writes()
    requeuer(ledger, writes).check()
    assert writes.pods() == ["default/x", "default/y"][: backfill.depth]
