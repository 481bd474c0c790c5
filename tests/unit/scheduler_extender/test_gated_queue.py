"""The queue: gated pods form groups, are placed whole in queue order, and released pinned."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.groups import GroupRef, PodsByGroup
from fluence.ledger import Ledger
from fluence.pods import Pod, PodGroup, decode_node, decode_pod
from fluence.reflectors import DELETED, MODIFIED
from fluence.scheduling.holdings import TENTATIVE
from fluence.scheduling.record import RecordSeal
from scheduler_extender import gated_queue
from scheduler_extender.binder import NullBinder
from scheduler_extender.gated_queue import GatedQueue
from scheduler_extender.scheduling import ReleaseRefused, Scheduler
from tests.support.admission import apply_patch
from tests.unit.fluence.test_device_claims import (
    device_class,
    devices,
    gpu,
    resource_claim,
    resource_slice,
)
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.fluence.test_volume_limits import csi_node, csi_storage, csi_volume
from tests.unit.fluence.test_volume_nodes import BOUND, claim, storage, volume

EXAMPLES = resources.load("examples/resources.yaml")
GATE = {"name": names.QUEUE_GATE}
SEAL = RecordSeal(b"k" * 32)
GANG = {names.LABEL_GROUP: "g"}


class Api:
    """Pods as the API server keeps them; release patches apply to them, and every change
    reaches the queue and the view as a watch event would."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.index = PodsByGroup()
        self.queue: GatedQueue | None = None
        self.refuse: set[str] = set()
        self.writes: list[str] = []
        self.lagging: list[str] | None = None
        """When a list: the watch events of releases wait here (:meth:`deliver`)."""

    def put(self, doc: dict[str, Any]) -> Pod:
        key = f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"
        self.docs[key] = doc
        pod = decode_pod(json.dumps(doc))
        self.index.update(pod)
        if self.queue is not None:
            self.queue.on_pod(MODIFIED, pod)
        return pod

    def pod(self, key: str) -> Pod:
        return decode_pod(json.dumps(self.docs[key]))

    def delete(self, key: str) -> None:
        pod = self.pod(key)
        del self.docs[key]
        self.index.remove(pod)
        if self.queue is not None:
            self.queue.on_pod(DELETED, pod)

    # ---- the view the scheduler reads ----
    def pods_in(self, namespace: str) -> Sequence[Pod]:
        return [self.pod(k) for k in self.docs if k.startswith(namespace + "/")]

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
        return None

    def group_pods(self, ref: GroupRef) -> Sequence[Pod]:
        return [self.pod(p.key) for p in self.index.members(ref) if p.key in self.docs]

    # ---- the writer ----
    async def release(self, namespace: str, name: str, ops: Sequence[dict[str, Any]]) -> None:
        key = f"{namespace}/{name}"
        if key in self.refuse:
            raise ReleaseRefused("HTTP 422: the pod changed")
        self.writes.append(key)
        doc = apply_patch(self.docs[key], list(ops))
        if self.lagging is None:
            self.put(doc)
        else:
            self.docs[key] = doc
            self.lagging.append(key)

    def deliver(self) -> None:
        """The watch catches up with the releases written."""
        for key in self.lagging or ():
            self.put(self.docs[key])
        self.lagging = []


def gated(
    name: str,
    *,
    cpu: str = "4",
    created: int = 0,
    priority: int | None = None,
    gates: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    size: int = 0,
) -> dict[str, Any]:
    annotations = {names.ANNOTATION_GROUP_SIZE: str(size)} if size else None
    d: dict[str, Any] = make_pod(name, cpu=cpu, raw=True, labels=labels, annotations=annotations)
    d["metadata"]["creationTimestamp"] = f"2026-11-27T10:00:{created:02d}Z"
    d["spec"]["schedulingGates"] = [GATE] if gates is None else gates
    if priority is not None:
        d["spec"]["priority"] = priority
    return d


class Evictions:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.calls: list[tuple[str, list[str], str]] = []

    def requeue(self, pods: Sequence[tuple[str, str]], group: str, why: str) -> None:
        self.calls.append((group, sorted(k for k, _ in pods), why))
        for key, _ in pods:
            self.api.delete(key)


def cluster(
    nodes: int = 3,
    api: Api | None = None,
    now: list[float] | None = None,
    extra: dict[str, str] | None = None,
    zones: int = 0,
) -> tuple[Api, GatedQueue, Ledger]:
    """``extra``: allocatable each node has beyond cpu, memory and pods; ``zones``: nodes
    labelled with that many zones, in turn (n0 in z0, n1 in z1, ...)."""
    api = api if api is not None else Api()
    docs = [make_node(f"n{i}", cpu="4", extra=extra, raw=True) for i in range(nodes)]
    for i, doc in enumerate(docs):
        if zones:
            doc["metadata"]["labels"]["topology.kubernetes.io/zone"] = f"z{i % zones}"
    graph = ClusterGraph(EXAMPLES, [decode_node(json.dumps(doc)) for doc in docs])
    ledger = Ledger(graph, seal=SEAL, gang_timeout=60)
    clock = now if now is not None else [0.0]
    queue = GatedQueue(
        Scheduler(graph, ledger, api, NullBinder()),
        api,
        evictor=Evictions(api),
        retry_limit=2,
        clock=lambda: clock[0],
    )
    follow(api, queue, ledger)
    return api, queue, ledger


def follow(api: Api, queue: GatedQueue, ledger: Ledger) -> None:
    """A new extender's start: its ledger and queue learn every pod the API server has."""
    api.queue = queue
    for key in api.docs:
        pod = api.pod(key)
        ledger.observe(pod)
        queue.on_pod(MODIFIED, pod)


def round_trip(queue: GatedQueue) -> list[str]:
    releases = queue.plan()
    asyncio.run(queue.write(releases))
    return [r.pod for r in releases]


def bind(api: Api, ledger: Ledger, key: str) -> str:
    """kube-scheduler binds a released pod where its affinity pins it."""
    doc = api.docs[key]
    terms = doc["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    node: str = terms[0]["matchFields"][-1]["values"][0]
    doc["spec"]["nodeName"] = node
    doc["status"]["phase"] = "Running"
    ledger.observe(api.put(doc))
    return node


def finish(api: Api, ledger: Ledger, key: str) -> None:
    doc = api.docs[key]
    doc["status"]["phase"] = "Succeeded"
    ledger.observe(api.put(doc))


def test_a_gang_waits_for_its_quorum_then_is_released_whole_on_distinct_nodes() -> None:
    api, queue, ledger = cluster()
    for i in range(2):
        api.put(gated(f"m{i}", cpu="3", labels=GANG, size=3))
    assert round_trip(queue) == []
    assert [w.reason for w in queue.waiting] == ["waiting for 1 more pod(s) of group default/g"]
    api.put(gated("m2", cpu="3", labels=GANG, size=3))
    assert sorted(round_trip(queue)) == ["default/m0", "default/m1", "default/m2"]
    nodes = set()
    for i in range(3):
        key = f"default/m{i}"
        doc = api.docs[key]
        assert doc["spec"]["schedulingGates"] == []
        held = ledger.get(key)
        assert held is not None and held.state == TENTATIVE
        assert doc["metadata"]["annotations"][names.ANNOTATION_ALLOCATION_SEAL]
        assert bind(api, ledger, key) == held.node
        nodes.add(held.node)
    assert nodes == {"n0", "n1", "n2"} and queue.waiting == []


def test_groups_start_by_priority_then_arrival_as_room_frees() -> None:
    api, queue, ledger = cluster(nodes=1)
    api.put(gated("early", created=1))
    api.put(gated("late", created=3))
    api.put(gated("urgent", created=5, priority=100))
    api.put(gated("middle", created=2))
    started = []
    for _ in range(4):
        (key,) = round_trip(queue)
        started.append(key.split("/")[1])
        assert round_trip(queue) == []  # the one node is taken
        bind(api, ledger, key)
        finish(api, ledger, key)
    assert started == ["urgent", "early", "middle", "late"]


def test_a_restarted_queue_forms_the_same_order_from_the_api_server() -> None:
    api, queue, ledger = cluster(nodes=1)
    for name, created in (("c", 3), ("a", 1), ("b", 2)):
        api.put(gated(name, created=created))
    (first,) = round_trip(queue)
    bind(api, ledger, first)
    # A new extender: its ledger and queue from what the API server shows.
    api2, queue2, ledger2 = cluster(nodes=1, api=api)
    assert round_trip(queue2) == []
    assert [w.group for w in queue2.waiting] == ["default/b", "default/c"]
    finish(api2, ledger2, first)
    assert round_trip(queue2) == ["default/b"]


def test_a_released_pod_not_yet_bound_is_held_again_after_a_restart() -> None:
    api, queue, _ = cluster(nodes=1)
    api.put(gated("first", created=1))
    assert round_trip(queue) == ["default/first"]
    api.put(gated("second", created=2))
    _, queue2, ledger2 = cluster(nodes=1, api=api)
    held = ledger2.get("default/first")
    assert held is not None and held.state == TENTATIVE and held.node == "n0"
    assert round_trip(queue2) == []  # the node is the released pod's


def test_a_gang_whose_leader_died_between_its_release_writes_goes_where_it_was_matched() -> None:
    """The first release of a gang names the others and their nodes, and is written before
    them (the others' records hold their own place alone, so records do not grow with the
    gang's size squared). A leader that wrote only the first leaves its successor holding
    the rest where they were matched; they are released there."""
    api, queue, ledger = cluster(nodes=3)
    for i in range(3):
        api.put(gated(f"m{i}", cpu="3", labels=GANG, size=3))
    releases = queue.plan()
    first, *rest = releases
    assert first.first and not any(r.first for r in rest)
    for r in rest:
        api.refuse.add(r.pod)  # the leader dies before these are written
    asyncio.run(queue.write(releases))
    matched = {r.pod: r.node for r in releases}
    records = [record_of(api, r.pod) for r in releases]
    assert [len(r["pending"]) for r in records if r] == [2]
    api.refuse.clear()
    _, queue2, ledger2 = cluster(nodes=3, api=api)
    for key, node in matched.items():
        held = ledger2.get(key)
        assert held is not None and held.node == node, (key, held)
    assert sorted(round_trip(queue2)) == sorted(r.pod for r in rest)
    assert {k: bind(api, ledger2, k) for k in matched} == matched
    pending = {k: len((record_of(api, k) or {}).get("pending", [])) for k in matched}
    # One record a batch of releases names the others (here two batches: m0, then the rest).
    assert sorted(pending.values()) == [0, 2, 2], pending


def record_of(api: Api, key: str) -> dict[str, Any] | None:
    text = api.docs[key]["metadata"].get("annotations", {}).get(names.ANNOTATION_ALLOCATION)
    return json.loads(text) if text else None


def test_a_released_pod_is_written_once_while_the_watch_lags() -> None:
    api, queue, _ = cluster()
    api.put(gated("solo"))
    api.queue = None  # the watch has not delivered the released pod yet
    assert round_trip(queue) == ["default/solo"]
    assert queue.plan() == []
    queue.on_pod(MODIFIED, api.pod("default/solo"))  # now it has
    assert queue.plan() == [] and api.writes == ["default/solo"]


def test_a_refused_release_is_tried_again_next_round() -> None:
    api, queue, ledger = cluster()
    api.put(gated("solo"))
    api.refuse.add("default/solo")
    assert round_trip(queue) == ["default/solo"]
    assert api.docs["default/solo"]["spec"]["schedulingGates"] == [GATE]
    held = ledger.get("default/solo")
    assert held is not None
    api.refuse.clear()
    assert round_trip(queue) == ["default/solo"]
    assert api.docs["default/solo"]["spec"]["schedulingGates"] == []
    assert ledger.get("default/solo") is held


def test_pods_with_gates_of_others_wait_for_them() -> None:
    api, queue, _ = cluster()
    api.put(gated("quota", gates=[{"name": "example.com/quota"}, GATE]))
    assert round_trip(queue) == []
    doc = api.docs["default/quota"]
    doc["spec"]["schedulingGates"] = [GATE]
    api.put(doc)
    assert round_trip(queue) == ["default/quota"]


def test_a_group_that_cannot_fit_waits_with_the_ledgers_reason() -> None:
    api, queue, _ = cluster(nodes=1)
    api.put(gated("huge", cpu="64"))
    assert round_trip(queue) == []
    (w,) = queue.waiting
    assert w.group == "default/huge" and w.reason


def test_deleted_gated_pods_leave_the_queue() -> None:
    api, queue, _ = cluster(nodes=1)
    api.put(gated("gone"))
    api.delete("default/gone")
    assert queue.plan() == [] and queue.waiting == []


def test_record_of_a_released_pod_names_its_node() -> None:
    api, queue, ledger = cluster()
    api.put(gated("solo"))
    round_trip(queue)
    record = json.loads(
        api.docs["default/solo"]["metadata"]["annotations"][names.ANNOTATION_ALLOCATION]
    )
    held = ledger.get("default/solo")
    assert held is not None and record["node"] == held.node
    assert msgspec.json.decode(json.dumps(record))  # plain JSON


def evictions(queue: GatedQueue) -> list[tuple[str, list[str], str]]:
    assert isinstance(queue.evictor, Evictions)
    return queue.evictor.calls


def test_a_released_gang_not_all_bound_in_time_is_evicted_whole_and_backs_off() -> None:
    now = [0.0]
    api, queue, ledger = cluster(now=now)

    def submit() -> None:
        for i in range(2):
            api.put(gated(f"m{i}", cpu="3", labels=GANG, size=2, created=i))

    submit()
    assert sorted(round_trip(queue)) == ["default/m0", "default/m1"]
    bind(api, ledger, "default/m0")  # m1 is refused by kube-scheduler, say
    assert queue.overdue() == []
    now[0] += 61
    assert queue.overdue() == ["default/g"]
    ((group, pods, why),) = evictions(queue)
    assert group == "default/g" and pods == ["default/m0", "default/m1"]
    assert "gang timeout" in why and "back-off 10s" in why
    assert ledger.get("default/m1") is None  # unbound: let go at once
    assert ledger.get("default/m0") is not None or "default/m0" not in api.docs
    submit()  # the Job controller makes the pods again, gated
    assert round_trip(queue) == []
    assert queue.waiting[0].reason == "gang timeout 1: placed again in 10s"
    now[0] += 10
    assert sorted(round_trip(queue)) == ["default/m0", "default/m1"]
    now[0] += 61
    assert queue.overdue() == ["default/g"]
    submit()
    now[0] += 1000
    assert round_trip(queue) == []
    assert "2 times" in queue.waiting[0].reason


class Carrier:
    """A Lease's leadership as the queue sees it: always leading, carrying one value."""

    leader = True

    def __init__(self, carried: str | None) -> None:
        self.carried = carried
        self.carried_out: list[str] = []

    def carry(self, value: str) -> None:
        self.carried_out.append(value)


def one_round(queue: GatedQueue, leadership: Carrier) -> None:
    """Run the queue's loop until it has carried its state once."""

    async def go() -> None:
        task = asyncio.create_task(queue.run(lambda: True, leadership))
        while not leadership.carried_out:
            queue.poke()
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(go(), 10))


def test_a_new_leader_goes_on_counting_gang_timeouts_where_the_last_one_stopped() -> None:
    now = [0.0]
    api, first, ledger = cluster(now=now)
    gang = [gated(f"m{i}", cpu="3", labels=GANG, size=2, created=i) for i in range(2)]
    for d in gang:
        api.put(d)
    round_trip(first)
    now[0] += 61
    assert first.overdue() == ["default/g"]  # timeout 1 of the limit 2; back-off 10 s
    leading = Carrier(None)
    one_round(first, leading)
    carried = leading.carried_out[-1]
    assert json.loads(carried)["default/g"][0] == 1

    # The leader is gone; its successor starts from the API server and the Lease.
    for d in gang:
        api.put(d)  # made again by their controller
    now[0] += 2
    _, second, _ = cluster(api=api, now=now)
    successor = Carrier(carried)
    one_round(second, successor)
    assert second.waiting[0].reason.startswith("gang timeout 1: placed again in")
    now[0] += 10
    assert sorted(round_trip(second)) == ["default/m0", "default/m1"]
    now[0] += 61
    assert second.overdue() == ["default/g"]
    for d in gang:
        api.put(d)
    now[0] += 1000
    assert round_trip(second) == []
    assert "2 times" in second.waiting[0].reason  # the limit, counted across both leaders


def test_a_released_pod_whose_node_is_gone_is_requeued_at_once() -> None:
    api, queue, ledger = cluster()
    api.put(gated("solo"))
    round_trip(queue)
    held = ledger.get("default/solo")
    assert held is not None
    queue.scheduler.graph.delete_node(held.node)
    assert queue.overdue() == ["default/solo"]
    assert f"its node {held.node} is gone" in evictions(queue)[0][2]


def test_bound_groups_are_never_overdue() -> None:
    now = [0.0]
    api, queue, ledger = cluster(now=now)
    api.put(gated("solo"))
    round_trip(queue)
    bind(api, ledger, "default/solo")
    now[0] += 10_000
    assert queue.overdue() == [] and evictions(queue) == []


def test_waiting_pods_carry_the_reason_until_they_are_released() -> None:
    now = [0.0]
    api, queue, _ = cluster(nodes=1, now=now)
    written: list[tuple[str, str, str]] = []
    queue.conditions = lambda pod, c: written.append((pod, c["status"], c["message"]))
    api.put(gated("m0", labels=GANG, size=3, cpu="1"))
    queue.plan()
    assert queue.tell() == 0  # not told before it has waited a while
    now[0] += queue.tell_after
    queue.plan()
    assert queue.tell() == 1
    assert written[0][:2] == ("default/m0", "True") and "waiting for 2 more pod" in written[0][2]
    queue.plan()
    assert queue.tell() == 0  # the same reason
    api.put(gated("m1", labels=GANG, size=3, cpu="1"))
    queue.plan()
    assert queue.tell() == 1  # a new member is told at once; m0's new reason waits its turn
    assert written[-1][0] == "default/m1" and "1 more" in written[-1][2]
    now[0] += 30
    queue.plan()
    assert queue.tell() == 1 and written[-1][0] == "default/m0"
    api.put(gated("m2", labels=GANG, size=3, cpu="1"))
    written.clear()
    assert len(round_trip(queue)) == 3
    assert sorted((p, status) for p, status, _ in written) == [
        ("default/m0", "False"),
        ("default/m1", "False"),
    ]  # m2 was never told it waits
    now[0] += 100
    assert queue.tell() == 0


def pod_limited(count: int, pods: int, api: Api | None = None) -> tuple[Api, Ledger, GatedQueue]:
    """A queue over ``count`` nodes of 8 cpu that take ``pods`` pods each."""
    api = api if api is not None else Api()
    nodes = []
    for i in range(count):
        raw = make_node(f"n{i}", cpu="8", raw=True)
        raw["status"]["allocatable"]["pods"] = raw["status"]["capacity"]["pods"] = str(pods)
        nodes.append(decode_node(json.dumps(raw)))
    graph = ClusterGraph(EXAMPLES, nodes)
    ledger = Ledger(graph, seal=SEAL)
    queue = GatedQueue(Scheduler(graph, ledger, api, NullBinder()), api)
    api.queue = queue
    return api, ledger, queue


def test_a_node_at_its_pod_limit_is_not_given_more_pods_than_it_takes() -> None:
    """kube-scheduler refuses a pod on a node at its allocatable pod count, which the graph
    does not hold: the queue keeps within it."""
    api, ledger, queue = pod_limited(2, 2)
    ledger.observe(api.put(make_pod("daemon", cpu="1", node="n0", phase="Running", raw=True)))
    for i in range(2):
        api.put(gated(f"m{i}", cpu="1", labels=GANG, size=2))
    assert sorted(round_trip(queue)) == ["default/m0", "default/m1"]
    placed = {ledger.get(f"default/m{i}").node for i in range(2)}  # type: ignore[union-attr]
    assert placed == {"n1"}
    api.put(gated("late", cpu="1", created=5))
    assert round_trip(queue) == ["default/late"]
    assert ledger.get("default/late").node == "n0"  # type: ignore[union-attr]
    api.put(gated("later", cpu="1", created=6))
    assert round_trip(queue) == []  # every node is at its limit


def test_a_group_kept_off_every_node_for_now_waits_in_its_place() -> None:
    """Both nodes are at their pod limit: a pod that fits their cpu waits as one that does
    not fit now (never "can never fit", which takes a group out of the queue), keeps the
    head of the queue, and is placed once a pod ends; a pod too big for any node still
    can never fit."""
    api, ledger, queue = pod_limited(2, 1)
    for i in range(2):
        ledger.observe(api.put(make_pod(f"d{i}", cpu="1", node=f"n{i}", phase="Running", raw=True)))
    api.put(gated("small", cpu="1", created=1))
    api.put(gated("huge", cpu="64", created=2))
    assert round_trip(queue) == []
    reasons = {w.group: w.reason for w in queue.waiting}
    assert "does not fit now" in reasons["default/small"], reasons
    assert "1st of 1 waiting groups" in reasons["default/small"], reasons
    assert "at their pod limit" in reasons["default/small"], reasons
    assert "can never fit" in reasons["default/huge"], reasons
    finish(api, ledger, "default/d1")
    assert round_trip(queue) == ["default/small"]
    assert ledger.get("default/small").node == "n1"  # type: ignore[union-attr]


def run_for(api: Api, ledger: Ledger, queue: GatedQueue, count: int, seconds: int) -> None:
    """``count`` one-cpu pods ``run0``... placed through the queue, bound, running for
    ``seconds``."""
    for i in range(count):
        running = gated(f"run{i}", cpu="1")
        running["spec"]["activeDeadlineSeconds"] = seconds
        api.put(running)
    for key in round_trip(queue):
        bind(api, ledger, key)


def places_scene(behind_runtime: int) -> list[list[str]]:
    """Two nodes that take two pods each run four (100 s each); a gang of two waits for
    places; each step one running pod ends and one more pod (``behind_runtime`` seconds)
    arrives behind the gang. The pods released at each step."""
    api, ledger, queue = pod_limited(2, 2)
    run_for(api, ledger, queue, 4, 100)
    labels = {names.LABEL_GROUP: "g"}
    for m in range(2):
        api.put(gated(f"g-{m}", cpu="1", created=10, labels=labels, size=2))
    assert round_trip(queue) == []
    reason = queue.waiting[0].reason
    assert "places are kept for it, expected free in" in reason, reason
    steps = []
    for step in range(3):
        finish(api, ledger, f"default/run{step}")
        late = gated(f"s{step}", cpu="1", created=20 + step)
        late["spec"]["activeDeadlineSeconds"] = behind_runtime
        api.put(late)
        released = round_trip(queue)
        for key in released:
            bind(api, ledger, key)
        steps.append(released)
    return steps


def test_a_gang_waiting_for_places_under_pod_limits_is_not_overtaken_by_longer_pods() -> None:
    """Places freed one at a time are kept for the gang at the head of the queue from pods
    behind it that would still run when enough free for it (as a reservation keeps cpu):
    the gang starts once two have freed; before, each freed place went to the next pod."""
    steps = places_scene(behind_runtime=1000)
    assert steps[0] == []
    assert steps[1] == ["default/g-0", "default/g-1"]


def test_places_are_kept_on_nodes_not_full_but_short_for_the_gang() -> None:
    """Nodes that take three pods run two each: a gang of three waits with a place on
    each, and a pod behind it that would outlast the running ones does not take one."""
    api, ledger, queue = pod_limited(2, 3)
    run_for(api, ledger, queue, 4, 100)
    assert Counter(h.node for h in ledger.holdings().values()) == {"n0": 2, "n1": 2}
    labels = {names.LABEL_GROUP: "g"}
    for m in range(3):
        api.put(gated(f"g-{m}", cpu="1", created=10, labels=labels, size=3))
    late = gated("late", cpu="1", created=20)
    late["spec"]["activeDeadlineSeconds"] = 1000
    api.put(late)
    assert round_trip(queue) == []
    finish(api, ledger, "default/run0")
    assert round_trip(queue) == ["default/g-0", "default/g-1", "default/g-2"]


def test_pods_that_end_before_the_places_free_still_use_them() -> None:
    """A pod behind the gang expected to end before enough places free for it backfills."""
    steps = places_scene(behind_runtime=30)
    assert steps[0] == ["default/s0"]


def test_a_group_waiting_for_a_pod_affinity_keeps_no_places() -> None:
    """Waiting for something else than places (here the pod its affinity needs, which
    waits behind it), a group keeps nothing: the pod behind starts, and then the group."""
    api, ledger, queue = pod_limited(1, 2)
    run_for(api, ledger, queue, 2, 100)
    needy = gated("needy", cpu="1", created=10)
    needy["spec"]["affinity"] = affinity("podAffinity", app="db")
    api.put(needy)
    db = gated("db", cpu="1", created=20, labels={"app": "db"})
    db["spec"]["activeDeadlineSeconds"] = 1000
    api.put(db)
    assert round_trip(queue) == []
    reasons = {w.group: w.reason for w in queue.waiting}
    assert "kept" not in reasons["default/needy"], reasons
    finish(api, ledger, "default/run0")
    assert round_trip(queue) == ["default/db"]
    bind(api, ledger, "default/db")
    finish(api, ledger, "default/run1")
    assert round_trip(queue) == ["default/needy"]


def test_a_gangs_members_share_out_the_room_left_under_nodes_pod_limits() -> None:
    """Five nodes that take four pods each run three already. A gang of four fits any node
    by cpu, and a match packs it onto one node, where only one more pod fits: each node's
    one place is dealt to a member before the match, so the gang is placed at once, one
    member a node, however many nearly full nodes the match would try first (it gave up
    after three, and the gang waited for ever)."""
    api, ledger, queue = pod_limited(5, 4)
    for i in range(5):
        for j in range(3):
            running = make_pod(f"d{i}-{j}", cpu="10m", node=f"n{i}", phase="Running", raw=True)
            ledger.observe(api.put(running))
    for i in range(4):
        api.put(gated(f"m{i}", cpu="10m", labels=GANG, size=4))
    assert len(round_trip(queue)) == 4, queue.waiting
    on = Counter(ledger.get(f"default/m{i}").node for i in range(4))  # type: ignore[union-attr]
    assert sorted(on.values()) == [1, 1, 1, 1], on


def test_a_pod_limit_the_nodes_cpu_reaches_first_deals_nothing_out(monkeypatch: Any) -> None:
    """Nodes of 8 cpu that take 10 pods: a gang of 16 one-cpu pods is more than a node's
    limit, but its cpu takes 8 of them at most, so the limit cannot bind and no member is
    kept off a node (keeping them off would only narrow the match)."""
    api, ledger, queue = pod_limited(3, 10)
    excluded: list[dict[str, Any]] = []
    place = queue.scheduler.place_group

    def spy(ref: GroupRef, members: Any, to_place: Any, *rest: Any) -> Any:
        excluded.append({k: set(v) for k, v in (rest[1] if len(rest) > 1 else {}).items()})
        return place(ref, members, to_place, *rest)

    monkeypatch.setattr(queue.scheduler, "place_group", spy)
    for i in range(16):
        api.put(gated(f"m{i}", cpu="1", labels=GANG, size=16))
    assert len(round_trip(queue)) == 16
    assert excluded and all(not nodes for nodes in excluded[0].values()), excluded[0]


def test_release_after_end_counts_from_the_end_that_made_room(monkeypatch: Any) -> None:
    """A pod's end that leaves too little room starts nobody; the wait recorded for the
    group released later runs from the end that let it start."""
    recorded: list[float] = []

    class Histogram:
        def record(self, value: float) -> None:
            recorded.append(value)

    monkeypatch.setattr(gated_queue, "_after_end", Histogram())
    now = [0.0]
    api, queue, ledger = cluster(nodes=1, now=now)
    for name in ("a", "c"):
        api.put(gated(name, cpu="2"))
    asyncio.run(queue.round())
    for key in ("default/a", "default/c"):
        bind(api, ledger, key)
    api.put(gated("b", cpu="4", created=5))
    asyncio.run(queue.round())
    now[0] = 10.0
    finish(api, ledger, "default/a")
    asyncio.run(queue.round())  # c still runs: 2 of 4 cpu free
    assert sorted(api.writes) == ["default/a", "default/c"]
    now[0] = 50.0
    finish(api, ledger, "default/c")
    now[0] = 50.25
    asyncio.run(queue.round())
    assert api.writes[2:] == ["default/b"]
    assert recorded == [0.25]


def test_a_placed_group_is_written_while_the_round_places_the_groups_behind_it(
    monkeypatch: Any,
) -> None:
    """A long round (a deep queue on a large cluster) does not hold back the releases of
    the groups it has placed already: the first starts before the round reaches the next."""
    api, queue, _ = cluster(nodes=2)
    api.put(gated("a", cpu="1"))
    api.put(gated("b", cpu="1", created=5))
    first_written = threading.Event()
    write = api.release

    async def release(namespace: str, name: str, ops: Sequence[dict[str, Any]]) -> None:
        await write(namespace, name, ops)
        if name == "a":
            first_written.set()

    monkeypatch.setattr(api, "release", release)
    place_group = queue.scheduler.place_group
    seen: list[bool] = []

    def place(ref: GroupRef, members: Sequence[Pod], *args: Any, **kwargs: Any) -> Any:
        if members[0].metadata.name == "b":
            seen.append(first_written.wait(5))
        return place_group(ref, members, *args, **kwargs)

    monkeypatch.setattr(queue.scheduler, "place_group", place)
    asyncio.run(queue.round())
    assert seen == [True]
    assert api.writes == ["default/a", "default/b"]


def test_a_gang_that_forms_and_starts_within_the_grace_writes_no_condition() -> None:
    """Pods of a gang being created one after another, then released: no status writes
    beyond the release (the Queued condition is for groups that wait)."""
    now = [0.0]
    api, queue, _ = cluster(nodes=1, now=now)
    written: list[str] = []
    queue.conditions = lambda pod, c: written.append(pod)
    for i in range(4):
        api.put(gated(f"m{i}", labels=GANG, size=4, cpu="1"))
        now[0] += 0.4
        asyncio.run(queue.round())
    assert sorted(api.writes) == [f"default/m{i}" for i in range(4)]
    assert written == []


def ports(doc: dict[str, Any], *host_ports: int, protocol: str = "TCP", ip: str = "") -> Any:
    """``doc`` with its container taking ``host_ports`` on its node."""
    doc["spec"]["containers"][0]["ports"] = [
        {"containerPort": p, "hostPort": p, "protocol": protocol, **({"hostIP": ip} if ip else {})}
        for p in host_ports
    ]
    return doc


def test_gang_members_taking_one_host_port_are_released_to_distinct_nodes() -> None:
    """First fit would put all three one-cpu members on n0; kube-scheduler would refuse
    two of them there for the port."""
    api, queue, ledger = cluster(nodes=3)
    for i in range(3):
        api.put(ports(gated(f"m{i}", cpu="1", labels=GANG, size=3), 8080))
    assert len(round_trip(queue)) == 3
    nodes = {ledger.get(f"default/m{i}").node for i in range(3)}  # type: ignore[union-attr]
    assert nodes == {"n0", "n1", "n2"}
    # A fourth pod taking the port has no node left; one without it goes anywhere.
    api.put(ports(gated("late", cpu="1", created=5), 8080))
    api.put(gated("free", cpu="1", created=6))
    assert round_trip(queue) == ["default/free"]
    (late,) = queue.waiting
    assert late.group == "default/late" and "host ports are taken" in late.reason, late


def test_a_node_where_a_running_pod_takes_the_port_is_left_out() -> None:
    api, queue, ledger = cluster(nodes=2)
    theirs = ports(make_pod("theirs", cpu="1", node="n0", phase="Running", raw=True), 8080)
    theirs["spec"]["schedulerName"] = "default-scheduler"
    ledger.observe(api.put(theirs))
    api.put(ports(gated("same", cpu="1", created=1), 8080))
    assert round_trip(queue) == ["default/same"]
    assert ledger.get("default/same").node == "n1"  # type: ignore[union-attr]
    # Once it has ended, its port is free again.
    api.put(ports(gated("next", cpu="1", created=3), 8080))
    assert round_trip(queue) == []
    finish(api, ledger, "default/theirs")
    assert round_trip(queue) == ["default/next"]
    assert ledger.get("default/next").node == "n0"  # type: ignore[union-attr]


def test_ports_on_other_protocols_or_addresses_share_a_node() -> None:
    api, queue, ledger = cluster(nodes=1)
    theirs = ports(
        make_pod("theirs", cpu="1", node="n0", phase="Running", raw=True), 8080, ip="10.0.0.1"
    )
    theirs["spec"]["schedulerName"] = "default-scheduler"
    ledger.observe(api.put(theirs))
    api.put(ports(gated("udp", cpu="1", created=1), 8080, protocol="UDP"))
    api.put(ports(gated("other-ip", cpu="1", created=2), 8080, ip="10.0.0.2"))
    api.put(ports(gated("every-ip", cpu="1", created=3), 8080))
    assert sorted(round_trip(queue)) == ["default/other-ip", "default/udp"]
    for key in ("default/other-ip", "default/udp"):
        bind(api, ledger, key)
    finish(api, ledger, "default/theirs")
    assert round_trip(queue) == []  # 10.0.0.2:8080 is still taken
    finish(api, ledger, "default/other-ip")
    assert round_trip(queue) == ["default/every-ip"]


def test_members_with_overlapping_ports_do_not_meet_on_a_node() -> None:
    """Different port sets (so matched as one slot shape) that share one port."""
    api, queue, ledger = cluster(nodes=2)
    api.put(ports(gated("a", cpu="1", labels=GANG, size=2), 80, 81))
    api.put(ports(gated("b", cpu="1", labels=GANG, size=2), 81, 82))
    assert len(round_trip(queue)) == 2
    assert ledger.get("default/a").node != ledger.get("default/b").node  # type: ignore[union-attr]


def test_a_standby_whose_watch_lags_passes_a_released_pod_to_its_node() -> None:
    """kube-scheduler may ask an extender about a released pod before that extender's watch
    shows the release or the end that made its room: the pod's sealed record decides, and
    the pod does not join this extender's own queue."""
    api, queue, ledger = cluster(nodes=1)
    api.put(gated("first", created=1))
    (first,) = round_trip(queue)
    bind(api, ledger, first)
    api.put(gated("second", created=2))
    _, standby, standby_ledger = cluster(nodes=1, api=api)
    api.queue = queue
    finish(api, ledger, first)  # the standby's ledger does not see this end yet
    assert round_trip(queue) == ["default/second"]
    out = standby.scheduler.filter(api.pod("default/second"), ["n0"])
    assert out.nodes == ["n0"] and not out.failed and not out.error
    assert standby_ledger.waiting() == []
    assert standby_ledger.get("default/second") is None  # no room for it in this view yet
    standby_ledger.observe(api.pod(first))  # the end arrives: the released pod is held
    held = standby_ledger.get("default/second")
    assert held is not None and held.state == TENTATIVE and held.node == "n0"
    assert standby.scheduler.filter(api.pod("default/second"), ["n0"]).nodes == ["n0"]


def test_a_pod_waiting_here_but_bound_by_another_extender_leaves_the_queue() -> None:
    api, queue, ledger = cluster(nodes=1)
    api.put(gated("first", created=1))
    (first,) = round_trip(queue)
    bind(api, ledger, first)
    doc = make_pod("late", cpu="4", raw=True)
    api.put(doc)
    out = queue.scheduler.filter(api.pod("default/late"), ["n0"])
    assert out.failed and [w["group"] for w in ledger.waiting()] == ["default/late"]
    doc["spec"]["nodeName"] = "n0"
    ledger.observe(api.put(doc))
    assert ledger.waiting() == []


def affinity(kind: str, key: str = "kubernetes.io/hostname", **match: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_gang_members_one_keeps_off_the_others_node_are_released_to_distinct_nodes() -> None:
    api, queue, ledger = cluster(nodes=3)
    for i in range(3):
        doc = gated(f"r{i}", cpu="1", labels={**GANG, "app": "mpi"}, size=3)
        doc["spec"]["affinity"] = affinity("podAntiAffinity", app="mpi")
        api.put(doc)
    assert len(round_trip(queue)) == 3
    assert {bind(api, ledger, f"default/r{i}") for i in range(3)} == {"n0", "n1", "n2"}


def test_pod_affinity_with_running_pods_decides_where_a_pod_is_released() -> None:
    api, queue, ledger = cluster(nodes=3)
    api.put(gated("db", cpu="1", created=1, labels={"app": "db"}))
    (db,) = round_trip(queue)
    db_node = bind(api, ledger, db)
    away = gated("away", cpu="1", created=2)
    away["spec"]["affinity"] = affinity("podAntiAffinity", app="db")
    near = gated("near", cpu="1", created=3)
    near["spec"]["affinity"] = affinity("podAffinity", app="db")
    api.put(away)
    api.put(near)
    assert sorted(round_trip(queue)) == ["default/away", "default/near"]
    assert bind(api, ledger, "default/away") != db_node
    assert bind(api, ledger, "default/near") == db_node


def test_a_running_pods_anti_affinity_keeps_the_pods_it_picks_off_its_node() -> None:
    api, queue, ledger = cluster(nodes=2)
    loner = gated("loner", cpu="1", created=1)
    loner["spec"]["affinity"] = affinity("podAntiAffinity", app="web")
    api.put(loner)
    (key,) = round_trip(queue)
    node = bind(api, ledger, key)
    for i in range(3):
        api.put(gated(f"web{i}", cpu="1", created=2 + i, labels={"app": "web"}))
    assert len(round_trip(queue)) == 3
    assert {bind(api, ledger, f"default/web{i}") for i in range(3)} == {"n0", "n1"} - {node}


def test_a_pod_whose_affinity_finds_no_pod_waits_with_the_reason() -> None:
    api, queue, _ = cluster(nodes=2)
    lonely = gated("lonely", cpu="1")
    lonely["spec"]["affinity"] = affinity("podAffinity", app="db")
    api.put(lonely)
    assert round_trip(queue) == []
    (w,) = queue.waiting
    assert "pod affinity" in w.reason, w.reason


def spread_over(key: str = "kubernetes.io/hostname", **more: Any) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            **more,
        }
    ]


def test_a_pod_spread_per_node_is_released_where_its_kind_is_fewest() -> None:
    """n0 runs two web pods and has the most room; n1 and n2 are busier with other pods.
    A web pod spread per node (maxSkew 1) goes to n1 or n2."""
    api, queue, ledger = cluster(nodes=3)
    for i, (node, cpu, app) in enumerate(
        (("n0", "1", "web"), ("n0", "1", "web"), ("n1", "3", "db"), ("n2", "3", "db"))
    ):
        doc = gated(f"p{i}", cpu=cpu, created=i, labels={"app": app})
        doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        api.put(doc)
        (key,) = round_trip(queue)
        assert bind(api, ledger, key) == node
    # Fluxion alone sends a one-cpu pod to each node in turn, n0 included.
    for i in range(6):
        doc = gated(f"spread{i}", cpu="1", created=10 + i, labels={"app": "web"})
        doc["spec"]["topologySpreadConstraints"] = spread_over()
        api.put(doc)
        (key,) = round_trip(queue)
        assert bind(api, ledger, key) in ("n1", "n2")
        finish(api, ledger, key)


def test_pods_released_before_the_watch_shows_it_count_in_the_next_round() -> None:
    """Two pods that may go to n0 only, each taking host port 80, and the watch shows no
    release: the second round still counts the port the pod the first released takes
    there (the second pod waits, where kube-scheduler would refuse it on n0), and once
    the release is seen, so does every round after."""
    api, queue, ledger = cluster(nodes=3)
    api.lagging = []
    for i in range(2):
        doc = ports(gated(f"port{i}", cpu="1", created=i), 80)
        doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n0"}
        api.put(doc)
    assert round_trip(queue) == ["default/port0"], queue.waiting
    assert round_trip(queue) == [], "a second pod with port 80 on n0"
    api.deliver()
    assert round_trip(queue) == []
    assert bind(api, ledger, "default/port0") == "n0"
    assert round_trip(queue) == []
    finish(api, ledger, "default/port0")
    assert round_trip(queue) == ["default/port1"]


def test_gang_members_spread_per_node_are_released_to_distinct_nodes() -> None:
    api, queue, ledger = cluster(nodes=3)
    for i in range(3):
        doc = gated(f"m{i}", cpu="1", labels={**GANG, "app": "web"}, size=3)
        doc["spec"]["topologySpreadConstraints"] = spread_over()
        api.put(doc)
    assert len(round_trip(queue)) == 3
    assert {bind(api, ledger, f"default/m{i}") for i in range(3)} == {"n0", "n1", "n2"}


def test_a_spread_that_needs_a_domain_missing_keeps_the_pod_waiting() -> None:
    api, queue, _ = cluster(nodes=2)
    doc = gated("w", cpu="1", labels={"app": "web"})
    doc["spec"]["topologySpreadConstraints"] = spread_over("topology.kubernetes.io/zone")
    api.put(doc)
    assert round_trip(queue) == []
    (w,) = queue.waiting
    assert "spread" in w.reason, w.reason


def test_a_pod_whose_bound_volume_is_local_to_a_node_is_released_there() -> None:
    api, queue, ledger = cluster(nodes=3)
    queue.storage = storage([claim("scratch", "pv-n2", annotations=BOUND)], [volume("pv-n2", "n2")])
    for i in range(3):
        doc = gated(f"v{i}", cpu="1", created=i)
        doc["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "scratch"}}]
        api.put(doc)
        (key,) = round_trip(queue)
        assert bind(api, ledger, key) == "n2"


def test_gang_members_waiting_for_local_volumes_get_one_each() -> None:
    """Three members with claims of a class without a provisioner; local volumes: one on
    n0, two on n2, none on n1. Fluxion packs them on n0 first, where only one gets a
    volume: the two left without are kept off n0 alone, and the gang is released as
    one on n0 and two on n2, where kube-scheduler finds a volume for each."""
    api, queue, ledger = cluster(nodes=3)
    queue.storage = storage(
        [claim(f"d{i}") for i in range(3)],
        [volume("pv-n0", "n0"), volume("pv-n2a", "n2"), volume("pv-n2b", "n2")],
    )
    for i in range(3):
        doc = gated(f"m{i}", cpu="1", created=i, labels=GANG, size=3)
        doc["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": f"d{i}"}}]
        api.put(doc)
    assert len(round_trip(queue)) == 3, queue.waiting
    on = sorted(bind(api, ledger, f"default/m{i}") for i in range(3))
    assert on == ["n0", "n2", "n2"], on


def test_a_pod_whose_claim_has_no_volume_yet_waits_until_one_is_made() -> None:
    api, queue, ledger = cluster(nodes=3)
    volumes: list[Any] = []
    queue.storage = storage([claim("d")], volumes)
    doc = gated("lonely", cpu="1")
    doc["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]
    api.put(doc)
    assert round_trip(queue) == []
    (w,) = queue.waiting
    assert (
        w.reason == "pod lonely: no available volume fits claim d, and its class local makes none"
    )
    volumes.append(volume("pv-n1", "n1"))
    queue.storage = storage([claim("d")], volumes)
    assert round_trip(queue) == ["default/lonely"]
    assert bind(api, ledger, "default/lonely") == "n1"


def test_a_node_one_member_may_not_use_stays_open_to_the_others() -> None:
    """Three 3-cpu members on three 4-cpu nodes: one needs a volume only n2 reaches, one
    takes a port a running pod holds on n0. Each is kept off its own nodes alone, so the
    gang fits (kept off the union, it would need n2 for all three)."""
    api, queue, ledger = cluster(nodes=3)
    queue.storage = storage([claim("scratch", "pv-n2", annotations=BOUND)], [volume("pv-n2", "n2")])
    holder = ports(gated("holder", cpu="1", created=0), 8080)
    holder["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n0"}
    api.put(holder)
    (key,) = round_trip(queue)
    assert bind(api, ledger, key) == "n0"
    disk = gated("disk", cpu="3", created=1, labels=GANG, size=3)
    disk["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "scratch"}}]
    api.put(disk)
    api.put(ports(gated("port", cpu="3", created=2, labels=GANG, size=3), 8080))
    api.put(gated("plain", cpu="3", created=3, labels=GANG, size=3))
    assert len(round_trip(queue)) == 3, queue.waiting
    on = {name: bind(api, ledger, f"default/{name}") for name in ("disk", "port", "plain")}
    assert on["disk"] == "n2" and on["port"] == "n1" and on["plain"] == "n0", on


def test_more_members_spread_per_node_than_nodes_are_released_evenly() -> None:
    """Seven members spread per node with maxSkew 1 on three nodes: matched in rounds of
    three on distinct nodes, so the nodes get 3, 2 and 2 (distinct nodes alone would
    never fit)."""
    api, queue, ledger = cluster(nodes=3)
    for i in range(7):
        doc = gated(f"m{i}", cpu="1", labels={**GANG, "app": "web"}, size=7)
        doc["spec"]["topologySpreadConstraints"] = spread_over()
        api.put(doc)
    assert len(round_trip(queue)) == 7, queue.waiting
    on = Counter(bind(api, ledger, f"default/m{i}") for i in range(7))
    assert sorted(on.values()) == [2, 2, 3], on


def test_a_pod_whose_read_write_once_pod_claim_is_in_use_waits_for_its_user() -> None:
    api, queue, ledger = cluster(nodes=3)
    solo = claim("solo", "pv-a", annotations=BOUND, mode="ReadWriteOncePod")
    queue.storage = storage([solo], [volume("pv-a")])
    uses = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "solo"}}]}
    first = gated("first", cpu="1", created=0)
    first["spec"].update(uses)
    api.put(first)
    (key,) = round_trip(queue)
    bind(api, ledger, key)
    second = gated("second", cpu="1", created=1)
    second["spec"].update(uses)
    api.put(second)
    assert round_trip(queue) == []
    (w,) = queue.waiting
    assert w.reason == "pod second: claim solo is ReadWriteOncePod and pod first uses it"
    finish(api, ledger, key)
    assert round_trip(queue) == ["default/second"]


def test_requests_the_graph_does_not_hold_are_summed_per_node() -> None:
    """Each node has two dongles and 10Gi of ephemeral storage. A pod on n0 holds one
    dongle; a gang of five one-dongle members fits only as 1 + 2 + 2 (cpu alone would
    pack them), and a pod asking 8Gi of storage goes where the 6Gi one is not."""
    api, queue, ledger = cluster(
        nodes=3, extra={"example.com/dongle": "2", "ephemeral-storage": "10Gi"}
    )
    first = gated("first", cpu="1", created=0)
    first["spec"]["containers"][0]["resources"]["requests"]["example.com/dongle"] = "1"
    first["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n0"}
    api.put(first)
    (key,) = round_trip(queue)
    assert bind(api, ledger, key) == "n0"
    for i in range(5):
        doc = gated(f"m{i}", cpu="0.5", created=1 + i, labels=GANG, size=5)
        doc["spec"]["containers"][0]["resources"]["requests"]["example.com/dongle"] = "1"
        api.put(doc)
    assert len(round_trip(queue)) == 5, queue.waiting
    on = Counter(bind(api, ledger, f"default/m{i}") for i in range(5))
    assert on == {"n0": 1, "n1": 2, "n2": 2}, on
    for name, size, created in (("big", "6Gi", 10), ("bigger", "8Gi", 11)):
        doc = gated(name, cpu="0.1", created=created)
        doc["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = size
        api.put(doc)
        (key,) = round_trip(queue)
        bind(api, ledger, key)
    assert (
        api.docs["default/big"]["spec"]["nodeName"]
        != api.docs["default/bigger"]["spec"]["nodeName"]
    )


def test_local_volumes_are_shared_out_among_a_gangs_members_before_the_match() -> None:
    """Five members, one claim each of a class without a provisioner; local volumes: one
    on n0, two on n1, two on n2. Each member is left the nodes whose volumes it may take,
    so the first match holds: 1 + 2 + 2."""
    api, queue, ledger = cluster(nodes=3)
    volumes = [volume("pv-n0", "n0")] + [
        volume(f"pv-n{n}{s}", f"n{n}") for n in (1, 2) for s in "ab"
    ]
    queue.storage = storage([claim(f"d{i}") for i in range(5)], volumes)
    for i in range(5):
        doc = gated(f"m{i}", cpu="0.5", created=i, labels=GANG, size=5)
        doc["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": f"d{i}"}}]
        api.put(doc)
    assert len(round_trip(queue)) == 5, queue.waiting
    on = Counter(bind(api, ledger, f"default/m{i}") for i in range(5))
    assert on == {"n0": 1, "n1": 2, "n2": 2}, on


def test_csi_volumes_stay_within_each_nodes_attach_limit() -> None:
    """Each node may attach two volumes of the driver; a running pod on n0 uses one. A
    gang of four members with a volume each fits any node by cpu (Fluxion would pack
    them), but within the counts only two a node: the first match holds to them. On a
    full node a pod whose volume the node has may still go; one with a new one may not."""
    api, queue, ledger = cluster(nodes=3)
    claims = [claim(f"c{i}", f"pv{i}", cls="now", annotations=BOUND) for i in range(7)]
    limits = [csi_node(f"n{i}", csi_example=2) for i in range(3)]
    queue.storage = csi_storage(claims, [csi_volume(f"pv{i}") for i in range(7)], limits)

    def uses(doc: dict[str, Any], i: int) -> dict[str, Any]:
        doc["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": f"c{i}"}}]
        return doc

    first = uses(gated("first", cpu="1", created=0), 0)
    first["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n0"}
    api.put(first)
    (key,) = round_trip(queue)
    assert bind(api, ledger, key) == "n0"
    for i in range(1, 5):
        api.put(uses(gated(f"m{i}", cpu="0.5", created=i, labels=GANG, size=4), i))
    assert len(round_trip(queue)) == 4, queue.waiting
    claim_on = {0: "n0"} | {i: bind(api, ledger, f"default/m{i}") for i in range(1, 5)}
    used = Counter(claim_on.values())
    assert max(used.values()) == 2, used
    # Five volumes, two a node: two nodes are full. A pod there with a volume the node
    # has goes; one with a new volume waits.
    full = min(n for n, k in used.items() if k == 2)
    has = min(i for i, n in claim_on.items() if n == full)
    for name, i in (("again", has), ("new", 5)):
        doc = uses(gated(name, cpu="0.1", created=10 + len(name)), i)
        doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": full}
        api.put(doc)
    assert round_trip(queue) == ["default/again"], queue.waiting
    assert bind(api, ledger, "default/again") == full
    (w,) = queue.waiting
    assert w.members == ("default/new",), w


def test_members_with_resource_claims_go_where_their_devices_are() -> None:
    """One GPU device a node, and n0's already allocated: a gang of two members with a
    claim each fits any node by cpu (Fluxion would pack them), but only n1 and n2 have a
    free device, one each. A pod whose claim is not there yet waits and says so."""
    api, queue, ledger = cluster(nodes=3)
    claims = [resource_claim("used", allocated=[("n0", "g0")], on="n0")]
    claims += [resource_claim(f"c{i}") for i in range(2)]
    queue.devices = devices(claims, [resource_slice(f"n{i}", [gpu("g0")]) for i in range(3)])

    def uses(doc: dict[str, Any], claim: str) -> dict[str, Any]:
        doc["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        return doc

    for i in range(2):
        api.put(uses(gated(f"m{i}", cpu="0.5", created=i, labels=GANG, size=2), f"c{i}"))
    api.put(uses(gated("later", cpu="0.5", created=5), "missing"))
    assert sorted(round_trip(queue)) == ["default/m0", "default/m1"], queue.waiting
    assert sorted(bind(api, ledger, f"default/m{i}") for i in range(2)) == ["n1", "n2"]
    (w,) = queue.waiting
    assert w.reason == "pod later: waiting for ResourceClaim missing to exist", w


def test_extended_resources_a_device_class_backs_go_where_its_devices_are() -> None:
    """No node's allocatable has ``example.com/gpu``, but a DeviceClass backs it and n2 has
    its one device: a pod asking one goes there (without the class it waits: no node has
    room for it), and a second waits until the first is gone."""
    api, queue, ledger = cluster(nodes=3)
    cls = device_class(extended="example.com/gpu")
    slices = [resource_slice("n2", [gpu("g0")])]
    queue.devices = backing = devices([], slices, [cls])
    queue.scheduler.graph.device_backed = lambda: backing.backing().keys()
    for i in range(2):
        doc = gated(f"p{i}", cpu="1", created=i)
        doc["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
        api.put(doc)
    assert round_trip(queue) == ["default/p0"], queue.waiting
    assert round_trip(queue) == []
    # kube-scheduler binds it with a claim of its own, allocated that device.
    assert bind(api, ledger, "default/p0") == "n2"
    made = resource_claim("p0-extended-resources", allocated=[("n2", "g0")], on="n2")
    queue.devices = devices([made], slices, [cls])
    assert round_trip(queue) == []
    finish(api, ledger, "default/p0")
    queue.devices = backing
    assert round_trip(queue) == ["default/p1"]


def test_gang_members_spread_over_zones_are_dealt_out_evenly() -> None:
    """Six members spread over three zones (maxSkew 1), two nodes a zone, one web pod
    already running in z0: the members are dealt to the zones with the fewest first, so
    one match releases two to each (3, 2 and 2 with the running one); packed, they
    would fill z0 and kube-scheduler would refuse most."""
    api, queue, ledger = cluster(nodes=6, zones=3)
    running = gated("running", cpu="1", labels={"app": "web"})
    running["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n0"}
    api.put(running)
    (key,) = round_trip(queue)
    assert bind(api, ledger, key) == "n0"
    for i in range(6):
        doc = gated(f"m{i}", cpu="1", created=1 + i, labels={**GANG, "app": "web"}, size=6)
        doc["spec"]["topologySpreadConstraints"] = spread_over("topology.kubernetes.io/zone")
        api.put(doc)
    assert len(round_trip(queue)) == 6, queue.waiting
    zone = {f"n{i}": f"z{i % 3}" for i in range(6)}
    on = Counter(zone[bind(api, ledger, f"default/m{i}")] for i in range(6))
    assert on == {"z0": 2, "z1": 2, "z2": 2}, on


def test_gang_members_spread_over_zones_are_dealt_round_a_zone_with_little_room() -> None:
    """Zone z0's nodes are nearly full (n0 full, one cpu free on n3); four members spread
    over three zones (maxSkew 1). Dealt by count alone, z0 would get two and the group
    would wait; dealt by room, z0 gets one and the others 2 + 1."""
    api, queue, ledger = cluster(nodes=6, zones=3)
    for name, node, cpu in (("fill0", "n0", "4"), ("fill3", "n3", "3")):
        doc = gated(name, cpu=cpu)
        doc["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        api.put(doc)
        (key,) = round_trip(queue)
        assert bind(api, ledger, key) == node
    for i in range(4):
        doc = gated(f"m{i}", cpu="1", created=1 + i, labels={**GANG, "app": "web"}, size=4)
        doc["spec"]["topologySpreadConstraints"] = spread_over("topology.kubernetes.io/zone")
        api.put(doc)
    assert len(round_trip(queue)) == 4, queue.waiting
    zone = {f"n{i}": f"z{i % 3}" for i in range(6)}
    on = Counter(zone[bind(api, ledger, f"default/m{i}")] for i in range(4))
    assert on["z0"] == 1 and sorted(on.values()) == [1, 1, 2], on


def test_gang_members_kept_apart_per_zone_are_released_to_distinct_zones() -> None:
    """Three members whose anti-affinity keeps them out of each other's zone, three zones
    of two nodes: packed, they would share a zone; each is dealt a zone of its own."""
    api, queue, ledger = cluster(nodes=6, zones=3)
    term = {
        "labelSelector": {"matchLabels": {"app": "mpi"}},
        "topologyKey": "topology.kubernetes.io/zone",
    }
    for i in range(3):
        doc = gated(f"m{i}", cpu="1", created=i, labels={**GANG, "app": "mpi"}, size=3)
        doc["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
        api.put(doc)
    assert len(round_trip(queue)) == 3, queue.waiting
    zones = {f"z{int(bind(api, ledger, f'default/m{i}')[1:]) % 3}" for i in range(3)}
    assert zones == {"z0", "z1", "z2"}
