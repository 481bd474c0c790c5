"""Whole-gang preemption: the fewest lower-priority groups go, whole, and only if it helps."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import decode_pod
from fluence.scheduling.holdings import Holding
from scheduler_extender.scheduling import Scheduler
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import EXAMPLES, FakeBinder, FakeCluster


class RecordingEvictor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, list[str]]]] = []

    def evict(self, victims: Mapping[str, Sequence[Holding]], by: str) -> None:
        self.calls.append((by, {g: sorted(h.pod for h in hs) for g, hs in victims.items()}))


class World:
    def __init__(self, nodes: int = 4, clock: Callable[[], float] = time.monotonic) -> None:
        self.graph = ClusterGraph(
            EXAMPLES, [make_node(f"n{i}", cpu="4") for i in range(nodes)], clock=clock
        )
        self.ledger = Ledger(self.graph, clock=clock)
        self.cluster = FakeCluster()
        self.evictor = RecordingEvictor()
        self.scheduler = Scheduler(
            self.graph, self.ledger, self.cluster, FakeBinder(), evictor=self.evictor
        )
        self.nodes = [f"n{i}" for i in range(nodes)]

    def gang(
        self,
        name: str,
        size: int,
        cpu: str,
        priority: int = 0,
        podgroup: dict[str, Any] | None = None,
        **kw: Any,
    ) -> list[Any]:
        self.cluster.add_group(name, size, **(podgroup or {}))
        pods = []
        for i in range(size):
            raw = make_pod(f"{name}-{i}", cpu=cpu, group=name, raw=True)
            if priority:
                raw["spec"]["priority"] = priority
            raw["spec"].update(kw)
            self.cluster.add(raw)
            pods.append(decode_pod(json.dumps(raw)))
        return pods

    def place(self, pods: list[Any]) -> Any:
        return self.scheduler.filter(pods[0], self.nodes)

    def run(self, pods: list[Any]) -> None:
        """Place and bind a whole group."""
        assert self.place(pods).nodes, "the group did not fit"
        for p in pods:
            h = self.ledger.get(p.key)
            assert h is not None
            self.ledger.commit(p.key, p.metadata.uid, h.node)


def test_a_high_priority_gang_evicts_exactly_one_whole_lower_priority_gang() -> None:
    w = World()
    low_old = w.gang("low-old", 4, "2", priority=10)
    low_new = w.gang("low-new", 4, "2", priority=10)
    w.run(low_old)
    w.run(low_new)
    high = w.gang("high", 4, "2", priority=1000)
    out = w.place(high)
    assert not out.nodes
    message = next(iter(out.failed.values()))
    assert "preempting lower-priority group(s) default/low-new" in message
    # The newest of the lowest priority goes, whole (its 4 pods on 2 nodes), nothing else.
    assert w.evictor.calls == [
        ("default/high", {"default/low-new": sorted(p.key for p in low_new)})
    ]
    assert w.ledger.preemption.evicting == {"default/low-new": "default/high"}
    # Asking again does not evict more while the victims are ending; they are planned to
    # be gone in a second, so kube-scheduler is told to try again soon.
    again = w.place(high)
    assert not again.nodes and not again.failed
    assert "waiting for preempted group(s) default/low-new" in again.error
    assert again.error.endswith("to be tried again when it starts")
    assert len(w.evictor.calls) == 1
    for p in low_new:
        w.ledger.release(p.key, "pod deleted")
    assert w.ledger.preemption.evicting == {}
    assert w.place(high).nodes


def test_the_lowest_priority_group_is_tried_first_and_put_back_when_not_needed() -> None:
    w = World(2)
    w.run(w.gang("whole", 1, "4", priority=3))  # one node
    w.run(w.gang("tiny", 1, "1", priority=1))  # the other node...
    w.run(w.gang("other", 1, "3", priority=5))  # ...with this one
    w.place(w.gang("high", 1, "4", priority=100))
    # tiny (the lowest) alone frees too little; with whole it fits, and whole alone does.
    ((by, victims),) = w.evictor.calls
    assert by == "default/high" and list(victims) == ["default/whole"]


def test_equal_or_higher_priority_groups_are_never_preempted() -> None:
    w = World(2)
    w.run(w.gang("peer", 1, "4", priority=100))
    w.run(w.gang("boss", 1, "4", priority=500))
    same = w.gang("same", 1, "4", priority=100)
    assert not w.place(same).nodes
    assert w.evictor.calls == []


def test_no_preemption_when_evicting_everything_lower_would_not_be_enough() -> None:
    w = World(2)
    w.run(w.gang("low", 1, "4", priority=1))
    w.run(w.gang("high-running", 1, "4", priority=900))
    wants_both = w.gang("big", 2, "4", priority=500)
    out = w.place(wants_both)
    assert not out.nodes and w.evictor.calls == []
    assert "preempting" not in next(iter(out.failed.values()))


def test_a_pod_that_never_preempts_waits() -> None:
    w = World(1)
    w.run(w.gang("low", 1, "4", priority=1))
    polite = w.gang("polite", 1, "4", priority=100, preemptionPolicy="Never")
    assert not w.place(polite).nodes and w.evictor.calls == []


def test_the_what_if_leaves_the_graph_exactly_as_it_was() -> None:
    w = World()
    w.run(w.gang("a", 4, "3", priority=1))
    w.run(w.gang("b", 4, "1", priority=1))
    before, held = w.graph.node_usage(), w.ledger.holdings()
    big = w.gang("big", 4, "4", priority=100)
    w.scheduler.evictor = None  # ask, but do not act
    assert not w.place(big).nodes
    assert sorted(w.ledger.victims_for("default/big")) == ["default/a", "default/b"]
    assert w.graph.node_usage() == before and w.ledger.holdings() == held


def test_a_full_cluster_preempts_through_the_preempt_verb_and_holds_nothing_it_was_not_given() -> (
    None
):
    w = World(2)
    w.run(w.gang("low", 2, "4", priority=1))
    high = w.gang("high", 1, "4", priority=100)
    # kube-scheduler's own filters rule out every node; it asks /preempt instead of /filter.
    w.scheduler.preempt(high[0])
    assert [by for by, _ in w.evictor.calls] == ["default/high"]
    roomy = World(2)
    solo = roomy.gang("solo", 1, "1", priority=100)
    roomy.scheduler.preempt(solo[0])  # fits in fluence's view: nothing is kept for it
    assert roomy.ledger.holdings() == {} and roomy.evictor.calls == []


SINGLE = {"disruptionMode": {"single": {}}}
ALL = {"disruptionMode": {"all": {}}}


def test_a_podgroup_that_allows_it_loses_one_pod_not_the_whole_gang() -> None:
    w = World(2)
    loose = w.gang("loose", 4, "2", priority=10, podgroup=SINGLE)
    w.run(loose)
    out = w.place(w.gang("high", 1, "2", priority=1000))
    message = next(iter(out.failed.values()))
    ((by, victims),) = w.evictor.calls
    # One pod is enough for a 2-core pod: the newest-placed of the lowest, one of loose's.
    ((unit, pods),) = victims.items()
    assert by == "default/high" and unit.startswith("pod default/loose-") and len(pods) == 1
    assert unit == f"pod {pods[0]}"
    assert f"preempting lower-priority pod(s) {pods[0]}" in message
    assert w.ledger.preemption.evicting == {unit: "default/high"}
    # The other three keep running and stay candidates for someone else; the one goes.
    assert len([k for k in w.ledger.holdings() if k.startswith("default/loose-")]) == 4
    w.ledger.release(pods[0], "pod deleted")
    assert w.ledger.preemption.evicting == {}
    assert w.place(w.gang("high", 1, "2", priority=1000)).nodes


def test_a_podgroup_that_says_all_goes_whole() -> None:
    w = World(2)
    strict = w.gang("strict", 4, "2", priority=10, podgroup=ALL)
    w.run(strict)
    w.place(w.gang("high", 1, "2", priority=1000))
    assert w.evictor.calls == [("default/high", {"default/strict": sorted(p.key for p in strict)})]


def test_a_podgroup_that_never_preempts_waits_whatever_its_pods_say() -> None:
    w = World(1)
    w.run(w.gang("low", 1, "4", priority=1))
    polite = w.gang("polite", 1, "4", priority=100, podgroup={"preemptionPolicy": "Never"})
    out = w.place(polite)
    assert not out.nodes and w.evictor.calls == []
    assert "preempting" not in next(iter(out.failed.values()))


def test_two_asks_for_one_group_at_once_evict_for_one_choice_only() -> None:
    """Its members' filters and kube-scheduler's /preempt may ask together: one choice."""
    w = World(2)
    w.run(w.gang("low-a", 2, "2", priority=10))
    w.run(w.gang("low-b", 2, "2", priority=10))
    high = w.gang("high", 2, "2", priority=1000)
    slow = w.ledger.victims_for

    def victims_for(group: str) -> list[str]:
        time.sleep(0.2)  # widen the window between choosing and marking
        return slow(group)

    w.ledger.victims_for = victims_for  # type: ignore[method-assign]
    asks = [threading.Thread(target=w.place, args=([p],)) for p in high]
    for t in asks:
        t.start()
    for t in asks:
        t.join()
    assert len(w.evictor.calls) == 1
    ((by, victims),) = w.evictor.calls
    assert by == "default/high" and list(victims) == ["default/low-b"]
    assert w.ledger.preemption.evicting == {"default/low-b": "default/high"}


def test_no_victims_when_room_came_free_after_the_match_failed() -> None:
    """A victim that ends between the preemptor's failed match and its choice of victims
    is not replaced by another: the group fits already, and its next try places it."""
    w = World(2)
    w.run(w.gang("low-a", 2, "2", priority=10))
    low_b = w.gang("low-b", 2, "2", priority=10)
    w.run(low_b)
    w.scheduler.evictor = None  # the match fails and waits, nothing is evicted
    high = w.gang("high", 2, "2", priority=1000)
    assert not w.place(high).nodes
    assert w.ledger.victims_for("default/high") == ["default/low-b"]
    for p in low_b:
        w.ledger.release(p.key, "pod deleted")
    assert w.ledger.victims_for("default/high") == []
    assert w.place(high).nodes


def test_room_freed_by_victims_is_kept_for_the_preempting_group() -> None:
    """While a preempted gang's pods go one by one, a lower-priority group that would fit
    in the room they leave is not placed there (it would only be preempted in turn):
    the room is planned to free now and the preemptor's reservation stands on it."""
    w = World(4)
    victim = w.gang("victim", 4, "4", priority=10)
    w.run(victim)
    high = w.gang("high", 4, "4", priority=1000)
    assert not w.place(high).nodes
    assert w.ledger.preemption.evicting == {"default/victim": "default/high"}
    for p in victim[:2]:
        w.ledger.release(p.key, "pod deleted")
    # Short enough to end long before the victims' estimated end (an hour).
    small = w.gang("small", 1, "4", priority=10, activeDeadlineSeconds=60)
    out = w.place(small)
    assert not out.nodes, "a lower-priority group took the room the preemptor waits for"
    assert w.ledger.get(small[0].key) is None
    for p in victim[2:]:
        w.ledger.release(p.key, "pod deleted")
    assert w.ledger.preemption.evicting == {}
    assert w.place(high).nodes
    assert len(w.evictor.calls) == 1


def test_a_victim_slower_to_go_keeps_its_room_for_the_preemptor() -> None:
    """The victims' room is planned to free a second after the eviction; a pod still
    there then is held on as any overrun is, and the preemptor's claim moves with it."""
    now = [0.0]
    w = World(2, clock=lambda: now[0])
    victim = w.gang("victim", 2, "4", priority=10)
    w.run(victim)
    high = w.gang("high", 2, "4", priority=1000)
    assert not w.place(high).nodes
    w.ledger.release(victim[0].key, "pod deleted")
    now[0] = 5.0  # the other victim pod overran its planned end
    small = w.gang("small", 1, "4", priority=10, activeDeadlineSeconds=60)
    assert not w.place(small).nodes
    w.ledger.release(victim[1].key, "pod deleted")
    assert w.place(high).nodes


def test_no_short_job_slips_in_front_of_a_preemptor_while_its_victims_go() -> None:
    """The victims' planned end is a guess renewed second by second while a pod is still
    going, so the preemptor's reservation moves with it; a job short enough to end "just
    before" it is still kept off the nodes reserved for the preemptor."""
    now = [0.0]
    w = World(4, clock=lambda: now[0])
    keeper = w.gang("keeper", 1, "4", priority=2000, activeDeadlineSeconds=100)
    w.run(keeper)
    victim = w.gang("victim", 2, "4", priority=10, activeDeadlineSeconds=100)
    w.run(victim)
    high = w.gang("high", 3, "4", priority=1000, activeDeadlineSeconds=10)
    assert not w.place(high).nodes
    assert w.ledger.preemption.evicting == {"default/victim": "default/high"}
    w.ledger.release(victim[0].key, "pod deleted")
    now[0] = 3.5  # the other victim pod is slow to go: held on from 3 s to 4 s
    quick = w.gang("quick", 1, "4", priority=10, activeDeadlineSeconds=1)
    refused = w.place(quick)
    assert not refused.nodes
    assert "room held for a higher-priority group" in next(iter(refused.failed.values()))
    # A group of higher priority than the preemptor goes first, as it would anyway.
    vip = w.gang("vip", 1, "4", priority=5000, activeDeadlineSeconds=1)
    assert w.place(vip).nodes


def test_a_group_whose_room_frees_in_a_moment_is_told_to_try_again_soon() -> None:
    """A rejection waits for a cluster event and a back-off grown with every refusal; a
    group whose reservation starts within a few seconds gets an error instead, which
    kube-scheduler tries again after a short back-off of its own."""
    now = [0.0]
    w = World(1, clock=lambda: now[0])
    w.run(w.gang("ends-soon", 1, "4", activeDeadlineSeconds=2))
    soon = w.place(w.gang("next", 1, "4", activeDeadlineSeconds=10))
    assert not soon.nodes and not soon.failed
    assert "(in 2s)" in soon.error and soon.error.endswith("to be tried again when it starts")
    later = World(1, clock=lambda: now[0])
    later.run(later.gang("ends-later", 1, "4", activeDeadlineSeconds=60))
    far = later.place(later.gang("next", 1, "4", activeDeadlineSeconds=10))
    assert not far.nodes and not far.error
    assert "(in 60s)" in next(iter(far.failed.values()))
