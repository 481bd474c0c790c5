"""Gang-timeout counts and back-offs, and how a new leader takes them over."""

from __future__ import annotations

import json

import pytest

from scheduler_extender.gang_timeouts import FORGET_AFTER, KEPT, GangTimeouts


def timeouts(mono: list[float], wall: list[float]) -> GangTimeouts:
    return GangTimeouts(10, 600, clock=lambda: mono[0], wall=lambda: wall[0])


def test_each_timeout_doubles_the_back_off_up_to_the_limit() -> None:
    t = timeouts([100.0], [5000.0])
    waits = [t.bump("ns/g").until - 100 for _ in range(8)]
    assert waits == [10, 20, 40, 80, 160, 320, 600, 600]
    assert t.get("ns/g").count == 8 and t.get("ns/other").count == 0


def test_a_successor_with_another_clock_keeps_counts_and_what_is_left_of_the_back_off() -> None:
    old = timeouts([100.0], [5000.0])
    old.bump("ns/g")
    old.bump("ns/g")  # 2 timeouts, back-off 20 s: until Unix 5020
    text = old.encode()
    # Another process, 5 s later, whose monotonic clock started elsewhere.
    new = timeouts([9.0], [5005.0])
    new.load(text)
    got = new.get("ns/g")
    assert got.count == 2 and got.until == pytest.approx(9.0 + 15)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        json.dumps({"ns/g": [True, 1.0]}),
        json.dumps({"ns/g": [0, 1.0]}),
        json.dumps({"ns/g": [-3, 1.0]}),
        json.dumps({"ns/g": ["2", 1.0]}),
        json.dumps({"ns/g": [2, "soon"]}),
        json.dumps({"ns/g": [2]}),
    ],
)
def test_what_cannot_be_read_is_left_out(text: str) -> None:
    t = timeouts([0.0], [0.0])
    t.load(text)
    assert t.get("ns/g").count == 0
    assert json.loads(t.encode()) == {}


def test_a_load_never_lowers_a_count_this_leader_has() -> None:
    t = timeouts([0.0], [0.0])
    t.bump("ns/g")
    t.bump("ns/g")
    t.load(json.dumps({"ns/g": [1, 0.0], "ns/h": [3, 0.0]}))
    assert (t.get("ns/g").count, t.get("ns/h").count) == (2, 3)


def test_at_most_kept_groups_are_remembered_the_oldest_dropped_first() -> None:
    t = timeouts([0.0], [0.0])
    for i in range(KEPT + 5):
        t.bump(f"ns/g{i}")
    t.bump("ns/g3")  # a new timeout makes it the newest
    kept = json.loads(t.encode())
    assert len(kept) == KEPT
    assert "ns/g0" not in kept and "ns/g5" not in kept and "ns/g3" in kept and "ns/g6" in kept


def test_groups_with_no_pods_are_forgotten_long_after_their_back_off() -> None:
    mono = [0.0]
    t = timeouts(mono, [0.0])
    t.bump("ns/gone")
    t.bump("ns/still")
    mono[0] = 10 + FORGET_AFTER + 1
    t.forget_quiet(["ns/still"])
    assert t.get("ns/gone").count == 0 and t.get("ns/still").count == 1
