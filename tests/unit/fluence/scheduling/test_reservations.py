"""The queue with reservations: a waiting group keeps the capacity it will start on.

A fake clock drives the graph and the ledger, so every start time is exact.
Nodes have one core each; every pod asks for one core.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from fluence import names, resources
from fluence.cluster_graph import EXTENSION, ClusterGraph
from fluence.ledger import PARKED_SECONDS, Ledger
from fluence.pods import Pod, decode_pod
from fluence.scheduling.backfill import EASY, Backfill, conservative
from tests.unit.fluence.test_pods import make_node, make_pod


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def cluster(
    nodes: int, *, backfill: Backfill | None = None, default_runtime: int = 3600
) -> tuple[Ledger, Clock]:
    clock = Clock()
    graph = ClusterGraph(
        resources.parse("resources: []"),
        [make_node(f"n{i}", cpu="1") for i in range(nodes)],
        clock=clock,
    )
    ledger = Ledger(graph, clock=clock, backfill=backfill, default_runtime=default_runtime)
    return ledger, clock


def pod(name: str, runtime: int | None = None, *, priority: int = 0, deadline: int = 0) -> Pod:
    doc = make_pod(
        name,
        annotations={names.ANNOTATION_RUNTIME: str(runtime)} if runtime is not None else {},
        raw=True,
    )
    if priority:
        doc["spec"]["priority"] = priority
    if deadline:
        doc["spec"]["activeDeadlineSeconds"] = deadline
    return decode_pod(json.dumps(doc))


def gang(
    name: str, size: int, runtime: int, *, priority: int = 0, enforced: bool = False
) -> list[Pod]:
    """``enforced``: the runtime is each pod's activeDeadlineSeconds, else an annotation."""
    if enforced:
        return [pod(f"{name}-{i}", priority=priority, deadline=runtime) for i in range(size)]
    return [pod(f"{name}-{i}", runtime, priority=priority) for i in range(size)]


def place(ledger: Ledger, group: str, pods: list[Pod], *, priority: int = 0) -> Any:
    return ledger.place(f"default/{group}", pods, priority=priority)


def start_of(ledger: Ledger, group: str) -> int | None:
    w = ledger.queue.get(f"default/{group}")
    assert w is not None, f"{group} is not waiting"
    return None if w.reservation is None else w.reservation.start - ledger.graph.now()


def release_group(ledger: Ledger, pods: list[Pod]) -> None:
    for p in pods:
        ledger.release(p.key, "pod Succeeded")


def test_a_busy_gang_is_reserved_where_running_pods_end() -> None:
    ledger, clock = cluster(4)
    running = [pod("long", 100), pod("short", 40)]
    for p in running:
        assert place(ledger, p.metadata.name, [p]).status == "allocated"
    big = gang("big", 4, 50)
    res = place(ledger, "big", big)
    assert res.status == "busy"
    assert start_of(ledger, "big") == 100  # the last core it needs frees at 100
    assert "reserved from" in res.message and "1st of 1 waiting" in res.message
    assert ledger.waiting()[0]["starts_in"] == 100


def test_a_short_job_backfills_and_a_long_one_waits_behind_the_reservation() -> None:
    ledger, clock = cluster(4)
    first = [pod("a", 100), pod("b", 100)]
    for p in first:
        place(ledger, p.metadata.name, [p])
    big = gang("big", 4, 50)
    assert place(ledger, "big", big).status == "busy"
    assert start_of(ledger, "big") == 100
    # Ends before the reservation starts (the kubelet ends it by then): placed now.
    assert place(ledger, "quick", [pod("quick", deadline=90)]).status == "allocated"
    # Would still run at 100, on a core the big gang needs: it waits, behind the gang.
    late = place(ledger, "slow", [pod("slow", 200)])
    assert late.status == "busy"
    assert start_of(ledger, "big") == 100
    assert start_of(ledger, "slow") == 150
    assert [w["group"] for w in ledger.waiting()] == ["default/big", "default/slow"]


def test_a_runtime_only_annotated_never_starts_in_front_of_a_reservation() -> None:
    """A tenant's word plans its own start; only an enforced deadline backfills."""
    ledger, clock = cluster(4)
    for p in (pod("a", 100), pod("b", 100)):
        place(ledger, p.metadata.name, [p])
    big = gang("big", 4, 50)
    assert place(ledger, "big", big).status == "busy"
    claims = place(ledger, "claims", [pod("claims", 10)])  # says 10 s; nothing stops it
    assert claims.status == "busy"
    # It starts where nothing reserved lies ahead of it for good: after the gang.
    assert start_of(ledger, "claims") == 150
    assert start_of(ledger, "big") == 100
    # The same 10 s as activeDeadlineSeconds fits before the gang's reservation.
    assert place(ledger, "bounded", [pod("bounded", deadline=10)]).status == "allocated"
    # Behind the gang's reservation the estimate is what the queue plans with.
    assert place(ledger, "after", gang("after", 4, 20)).status == "busy"
    assert start_of(ledger, "after") == 160


def test_the_head_gang_is_placed_when_its_reservation_comes_not_starved_by_a_stream() -> None:
    ledger, clock = cluster(4)
    running = [pod(f"r{i}", 10 * (i + 1)) for i in range(4)]  # end at 10, 20, 30, 40
    for p in running:
        place(ledger, p.metadata.name, [p])
    big = gang("big", 4, 30)
    assert place(ledger, "big", big).status == "busy"
    assert start_of(ledger, "big") == 40
    for small, (t, done) in enumerate(((10, running[0]), (20, running[1]), (30, running[2]))):
        clock.t += 10
        ledger.release(done.key, "pod Succeeded")
        # A stream of one-pod jobs, each longer than the time left to the reservation.
        res = place(ledger, f"s{small}", [pod(f"s{small}", 60)])
        assert res.status == "busy", f"t={t}: a small job took a core the gang reserved"
        assert place(ledger, "big", big).status == "busy"
    clock.t += 10
    ledger.release(running[3].key, "pod Succeeded")
    assert place(ledger, "big", big).status == "allocated"
    assert "default/big" not in ledger.queue


def test_reservations_move_earlier_when_pods_end_early() -> None:
    ledger, clock = cluster(2)
    running = [pod("a", 100), pod("b", 100)]
    for p in running:
        place(ledger, p.metadata.name, [p])
    big = gang("big", 2, 10)
    place(ledger, "big", big)
    assert start_of(ledger, "big") == 100
    clock.t += 5
    ledger.release(running[0].key, "pod Succeeded")
    ledger.reserve()
    assert start_of(ledger, "big") == 95  # still b's planned end
    ledger.release(running[1].key, "pod Succeeded")
    assert ledger.reserve()[0]["starts_in"] == 0


def test_priority_goes_before_arrival() -> None:
    ledger, clock = cluster(2)
    for p in (pod("a", 100), pod("b", 100)):
        place(ledger, p.metadata.name, [p])
    place(ledger, "low", gang("low", 2, 10))
    place(ledger, "high", gang("high", 2, 10, priority=1000), priority=1000)
    order = [w["group"] for w in ledger.reserve()]
    assert order == ["default/high", "default/low"]
    assert start_of(ledger, "high") == 100
    assert start_of(ledger, "low") == 110


def test_easy_backfill_reserves_only_the_head() -> None:
    ledger, clock = cluster(2, backfill=EASY)
    for p in (pod("a", 100), pod("b", 100)):
        place(ledger, p.metadata.name, [p])
    place(ledger, "first", gang("first", 2, 10))
    res = place(ledger, "second", gang("second", 2, 10))
    assert start_of(ledger, "first") == 100
    assert start_of(ledger, "second") is None
    assert "2nd of 2 waiting" in res.message and "not reserved" in res.message


def test_a_pod_that_outlives_its_estimate_keeps_its_core() -> None:
    ledger, clock = cluster(1)
    p = pod("overrun", 10)
    assert place(ledger, "overrun", [p]).status == "allocated"
    clock.t += 15  # past its estimate, still running
    assert place(ledger, "next", [pod("next", 10)]).status == "busy"
    # Planned to free a little later, again and again while it runs: 1 s first (most
    # overruns are a kubelet's moment), twice as long each next time, up to EXTENSION.
    starts = []
    for _ in range(7):
        starts.append(start_of(ledger, "next"))
        clock.t += starts[-1] or 0
        assert place(ledger, "next", [pod("next", 10)]).status == "busy"
    assert starts == [1, 2, 4, 8, EXTENSION, EXTENSION, EXTENSION]
    ledger.release(p.key, "pod Succeeded")
    assert place(ledger, "next", [pod("next", 10)]).status == "allocated"


def test_estimates_come_from_the_deadline_then_the_annotation_then_the_default() -> None:
    ledger, clock = cluster(3, default_runtime=500)
    place(ledger, "d", [pod("d", 900, deadline=20)])  # the kubelet ends it at 20
    place(ledger, "a", [pod("a", 30)])
    place(ledger, "x", [pod("x")])
    place(ledger, "w", gang("w", 3, 1))
    assert start_of(ledger, "w") == 500
    w = ledger.queue.get("default/w")
    assert w is not None and w.runtime == 1


def test_a_group_whose_pods_are_gone_leaves_the_queue_and_frees_its_reservation() -> None:
    ledger, clock = cluster(2)
    for p in (pod("a", 100), pod("b", 100)):
        place(ledger, p.metadata.name, [p])
    first = gang("first", 2, 10)
    place(ledger, "first", first)
    place(ledger, "second", gang("second", 2, 10))
    assert start_of(ledger, "second") == 110
    for p in first:
        ledger.forget(p.key)
    assert "default/first" not in ledger.queue
    ledger.reserve()
    assert start_of(ledger, "second") == 100


def test_groups_nobody_asks_for_leave_the_queue_after_the_gang_timeout() -> None:
    ledger, clock = cluster(1)
    place(ledger, "a", [pod("a", 100)])
    place(ledger, "waits", [pod("waits", 10)])
    assert "default/waits" in ledger.queue
    clock.t += ledger.gang_timeout
    ledger.expire()
    assert "default/waits" not in ledger.queue


def test_a_group_parked_by_kube_scheduler_keeps_its_place_under_a_short_gang_timeout() -> None:
    """kube-scheduler may keep a pod it could not place for five minutes without asking:
    a short gang timeout does not make its group leave the queue sooner than that."""
    ledger, clock = cluster(1)
    ledger.gang_timeout = 10
    place(ledger, "a", [pod("a", 1000)])
    place(ledger, "waits", [pod("waits", 10)])
    clock.t += 60
    ledger.expire()
    assert "default/waits" in ledger.queue
    clock.t += PARKED_SECONDS - 60
    ledger.expire()
    assert "default/waits" not in ledger.queue


# ---- properties ------------------------------------------------------------------------

event = st.one_of(
    st.tuples(
        st.just("arrive"),
        st.integers(1, 4),
        st.integers(1, 60),
        st.sampled_from([0, 0, 100]),
        st.booleans(),
    ),
    st.tuples(st.just("tick"), st.integers(1, 30), st.just(0), st.just(0), st.just(False)),
    st.tuples(st.just("end"), st.integers(0, 50), st.just(0), st.just(0), st.just(False)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, min_size=1, max_size=40))
def test_no_backfilled_group_ever_delays_a_reservation_and_nothing_is_overcommitted(
    events: list[tuple[str, int, int, int, bool]],
) -> None:
    """Checked against the test's own model, not the ledger's accounting: which pods run
    where (each one-cpu pod on a one-cpu node: at most one per node), and the queue order
    (priority, then first ask)."""
    ledger, clock = cluster(4, backfill=conservative(8))
    running: list[list[Pod]] = []
    where: dict[str, str] = {}
    """Pod key -> the node the model has it running on."""
    waiting: dict[str, tuple[list[Pod], int]] = {}
    first_ask: dict[str, int] = {}
    """Group -> when it first asked: its place among equals in the model's queue."""
    n = 0
    for kind, a, b, prio, enforced in events:
        if kind == "tick":
            clock.t += a
        elif kind == "end" and running:
            ended = running.pop(a % len(running))
            release_group(ledger, ended)
            for p in ended:
                del where[p.key]
        elif kind == "arrive":
            n += 1
            waiting[f"g{n}"] = (gang(f"g{n}", a, b, priority=prio, enforced=enforced), prio)
        # Every waiting group asks once per step, in arrival order (as retries come).
        for name, (pods, prio) in list(waiting.items()):
            before = {w["group"]: w["starts_in"] for w in ledger.reserve() if w["reserved"]}
            first_ask.setdefault(name, len(first_ask))
            ahead = {
                f"default/{other}"
                for other, (_, other_prio) in waiting.items()
                if other != name
                and other in first_ask
                and (other_prio, -first_ask[other]) > (prio, -first_ask[name])
            }
            res = place(ledger, name, pods, priority=prio)
            if res.status == "allocated":
                del waiting[name]
                running.append(pods)
                where.update({k: h.node for k, h in res.holdings.items()})
                after = {w["group"]: w["starts_in"] for w in ledger.reserve() if w["reserved"]}
                for g in ahead & before.keys():
                    assert after[g] <= before[g], f"{name} delayed {g}: {before[g]} -> {after[g]}"
            else:
                assert res.status == "busy"
        per_node = Counter(where.values())
        assert all(count <= 1 for count in per_node.values()), per_node
        assert set(per_node) <= {f"n{i}" for i in range(4)}


def test_a_node_with_reservations_on_it_can_be_removed_and_the_queue_plans_again() -> None:
    ledger, clock = cluster(2)
    for p in (pod("a", 100), pod("b", 100)):
        place(ledger, p.metadata.name, [p])
    place(ledger, "pair", gang("pair", 2, 10))
    assert start_of(ledger, "pair") == 100
    freed = ledger.release("default/b", "pod Succeeded")
    assert freed is not None
    ledger.graph.delete_node(freed.node)  # the pair's reservation sits on it
    place(ledger, "single", [pod("single", 10)])
    # The pair can never fit one node now; the single waits for a's core.
    assert start_of(ledger, "single") == 100


def test_a_stream_faster_than_the_cluster_all_completes_with_no_partial_holds() -> None:
    from bench.pressure import CPU, simulate, workload

    stream = workload(25, 4 * CPU, seed=11)
    fluence = simulate("fluence", 4, stream, limit=20_000)
    assert fluence["completed"] == 25 and fluence["partial_core_seconds"] == 0
    # Placed one pod at a time, the same stream leaves pods holding cores for groups
    # that cannot start yet.
    assert simulate("per-pod", 4, stream, limit=20_000)["partial_core_seconds"] > 0


def test_capacity_kept_for_the_head_shows_as_reserved_not_allocated() -> None:
    ledger, clock = cluster(1)
    x = pod("x", 10)
    place(ledger, "x", [x])
    assert place(ledger, "head", [pod("head", 10)]).status == "busy"
    clock.t += 10
    ledger.release(x.key, "pod Succeeded")
    # The next group to ask finds the core kept for the head, which has not asked again yet.
    res = place(ledger, "next", [pod("next", 5)])
    assert res.status == "busy" and "2nd of 2" in res.message
    assert ledger.graph.node_usage()["n0"]["core"] == {
        "capacity": 1000,
        "allocated": 0,
        "free": 0,
        "reserved": 1000,
    }
    assert ledger.waiting()[0]["starts_in"] == 0
    assert place(ledger, "head", [pod("head", 10)]).status == "allocated"
    assert ledger.graph.node_usage()["n0"]["core"] == {
        "capacity": 1000,
        "allocated": 1000,
        "free": 0,
    }


def test_capacity_held_now_for_a_gang_whose_pods_are_slow_to_ask_does_not_lapse() -> None:
    ledger, clock = cluster(2)
    running = [pod("a", 100), pod("b", 100)]
    for p in running:
        place(ledger, p.metadata.name, [p])
    big = gang("big", 2, 10)
    assert place(ledger, "big", big).status == "busy"
    release_group(ledger, running)
    ledger.reserve()
    assert start_of(ledger, "big") == 0  # held now; its pods have not asked again yet
    # Longer than the gang's own runtime passes before anyone asks the ledger again.
    clock.t += 30
    res = place(ledger, "stream", [pod("stream", 60)])
    assert res.status == "busy", "a later job took capacity held for the waiting gang"
    assert start_of(ledger, "big") == 0
    assert place(ledger, "big", big).status == "allocated"


def test_preemption_is_judged_as_the_preemptor_will_be_placed() -> None:
    """Victims only when the preemptor would start then: an estimate waits for a reservation
    ahead of it wherever it lies later, so evicting for a gap before it would be in vain."""
    ledger, clock = cluster(2)
    assert place(ledger, "low", [pod("low", 100)]).status == "allocated"  # n0, priority 0
    assert place(ledger, "mid", [pod("mid", 50, priority=5000)], priority=5000).status == (
        "allocated"
    )
    # The top group needs both cores: reserved from 100, where both are planned free.
    top = gang("top", 2, 10, priority=9000)
    assert place(ledger, "top", top, priority=9000).status == "busy"
    assert start_of(ledger, "top") == 100
    estimated = [pod("est", 10, priority=1000)]
    assert place(ledger, "est", estimated, priority=1000).status == "busy"
    assert ledger.victims_for("default/est") == []
    bounded = [pod("bounded", priority=1000, deadline=10)]
    assert place(ledger, "bounded", bounded, priority=1000).status == "busy"
    assert ledger.victims_for("default/bounded") == ["default/low"]


def test_a_restarted_ledger_plans_a_running_pods_end_from_its_start() -> None:
    """A pod that has run 60 of its 100 enforced seconds ends in 40 for the ledger that
    placed it and for one rebuilt from the API server: the reservation behind it keeps
    its start across a restart instead of moving a whole runtime later."""
    ledger, clock = cluster(1)
    running = pod("run-0", deadline=100)
    assert place(ledger, "run", [running]).status == "allocated"
    held = ledger.commit(running.key, running.metadata.uid, "n0")
    clock.t += 60
    assert place(ledger, "next", [pod("next-0", deadline=50)]).status == "busy"
    assert start_of(ledger, "next") == 40

    doc = make_pod("run-0", node="n0", phase="Running", raw=True, uid=running.metadata.uid)
    doc["metadata"]["annotations"] = ledger.annotations(held)
    doc["spec"]["activeDeadlineSeconds"] = 100
    started = time.time() - 60
    doc["status"]["startTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    restarted, _ = cluster(1)
    restarted.observe(decode_pod(json.dumps(doc)))
    assert restarted.get(running.key) is not None
    assert place(restarted, "next", [pod("next-0", deadline=50)]).status == "busy"
    start = start_of(restarted, "next")
    assert start is not None and 39 <= start <= 41, start
    # Without a start (not taken on by a kubelet yet) the whole runtime is still ahead.
    del doc["status"]["startTime"]
    fresh, _ = cluster(1)
    fresh.observe(decode_pod(json.dumps(doc)))
    assert place(fresh, "next", [pod("next-0", deadline=50)]).status == "busy"
    assert start_of(fresh, "next") == 100
