"""Order among waiting groups, and how long a group is expected to run."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from fluence import names
from fluence.runtimes import MAX_RUNTIME, group_runtime, parse_runtime, pod_runtime
from fluence.scheduling.queue import GroupQueue
from tests.unit.fluence.test_pods import make_pod


def test_priority_first_then_arrival_and_a_refresh_keeps_the_place() -> None:
    q = GroupQueue()
    q.arrive("a", 0, ["a-0"], 1.0)
    q.arrive("b", 0, ["b-0"], 2.0)
    q.arrive("c", 10, ["c-0"], 3.0)
    assert [w.group for w in q.ordered()] == ["c", "a", "b"]
    q.arrive("a", 0, ["a-1"], 4.0)  # asked again: same place, one more pod known
    assert [w.group for w in q.ordered()] == ["c", "a", "b"]
    assert q.get("a") is not None and q.get("a").pods == {"a-0", "a-1"}  # type: ignore[union-attr]
    assert [w.group for w in q.ahead_of("b")] == ["c", "a"]
    assert q.position("c") == 1 and q.position("b") == 3 and q.position("zz") == 0
    q.arrive("b", 20, [], 5.0)  # its PodGroup's priority was raised
    assert [w.group for w in q.ordered()] == ["b", "c", "a"]


def test_a_group_leaves_when_its_last_pod_is_gone_or_nobody_asks() -> None:
    q = GroupQueue()
    q.arrive("a", 0, ["a-0", "a-1"], 1.0)
    q.arrive("b", 0, ["b-0"], 1.0)
    assert q.forget_pod("a-0") is None and "a" in q
    left = q.forget_pod("a-1")
    assert left is not None and left.group == "a" and "a" not in q
    assert q.forget_pod("nobody") is None
    q.arrive("c", 0, ["c-0"], 50.0)
    assert [w.group for w in q.stale(100.0, 60.0)] == ["b"]
    assert [w.group for w in q.ordered()] == ["c"]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3)), max_size=40))
def test_the_order_is_priority_then_arrival_whatever_comes_and_goes(
    ops: list[tuple[int, int]],
) -> None:
    q = GroupQueue()
    first_seen: dict[str, int] = {}
    prio: dict[str, int] = {}
    for t, (g, p) in enumerate(ops):
        name = f"g{g}"
        if p < 0 and name in q:
            q.leave(name)
            first_seen.pop(name)
            continue
        q.arrive(name, p, [f"{name}-pod"], float(t))
        first_seen.setdefault(name, t)
        prio[name] = p
    got = [w.group for w in q.ordered()]
    assert got == sorted(first_seen, key=lambda n: (-prio[n], first_seen[n]))
    for i, name in enumerate(got):
        assert [w.group for w in q.ahead_of(name)] == got[:i]


def test_runtime_estimates() -> None:
    assert parse_runtime("90") == 90 and parse_runtime("90s") == 90
    assert parse_runtime("15m") == 900 and parse_runtime("2h") == 7200
    assert parse_runtime("1d") == 86400 and parse_runtime("999999999d") == MAX_RUNTIME
    for bad in ("", "0", "-5", "1.5h", "5 minutes", "1e9", "１０"):
        assert parse_runtime(bad) is None, bad
    annotated = make_pod("a", annotations={names.ANNOTATION_RUNTIME: "10m"})
    assert pod_runtime(annotated, 60) == 600
    assert pod_runtime(make_pod("b", annotations={names.ANNOTATION_RUNTIME: "soon"}), 60) == 60
    assert pod_runtime(make_pod("c"), 0) == 0
    assert group_runtime([annotated, make_pod("d")], 60) == 600
    assert group_runtime([annotated, make_pod("d")], 0) == 0  # one member's end is unknown
