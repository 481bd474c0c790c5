"""fluence's own queue, end to end: gated pods released by the extender, bound by kube-scheduler.

Pods here carry the queue's scheduling gate from creation (as the webhook gives it at
admission), so kube-scheduler leaves them alone until the extender holding the queue
Lease has placed their whole group with Fluxion and released each pod with one patch:
its sealed allocation record, its node pinned in its required node affinity, and the
gate gone. These tests watch that contract from the API server's side (gates,
affinity, records, nodeName), the order in which the queue starts waiting groups, and
what a SIGKILLed extender's successor makes of the gated and the released pods.

The extender of this module takes its queue Lease in a namespace of its own with a
short duration, so a restarted process takes the queue over within seconds and no
other module's extender competes for it.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes.client import ApiClient, SchedulingV1Api, V1ObjectMeta, V1PriorityClass

from fluence import names
from testbed import ControlPlane
from tests.e2e.test_extender_e2e import Extender, Stack, Suite, wait_for
from tests.support.extender import SUITE_LABEL, fluence_scheduler

LEASE_SECONDS = 3
"""The queue Lease's duration: how long a restarted extender waits to take the queue."""

HOLD_GATE = "example.com/hold"
"""A gate that is not the queue's: the queue leaves a pod alone while it is there."""

PICK_LABEL = "example.com/pick"
"""A label only some of a test's nodes carry, for node affinity to select."""

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@pytest.fixture(scope="module")
def lease_namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"queue-lease-{uuid.uuid4().hex[:8]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.delete_namespace(name)


@pytest.fixture(scope="module")
def stack(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory, lease_namespace: str
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("fluence-queue")
    extender = Extender(workdir, control_plane.kubeconfig)
    extender.env["FLUENCE_QUEUE_LEASE_NAMESPACE"] = lease_namespace
    extender.env["FLUENCE_QUEUE_LEASE_SECONDS"] = str(LEASE_SECONDS)
    with fluence_scheduler(control_plane, extender) as scheduler:
        yield Stack(control_plane, extender, scheduler)


@pytest.fixture
def suite(stack: Stack, kube: ApiClient, namespace: str) -> Iterator[Suite]:
    with Suite(stack, kube, namespace) as s:
        yield s


# ---- reading pods --------------------------------------------------------------------


def gated_pod(
    suite: Suite,
    name: str,
    cpu: str = "1",
    *,
    gates: Sequence[str] = (names.QUEUE_GATE,),
    spec: dict[str, Any] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A pod of the fluence profile created behind ``gates`` (the queue's by default)."""
    gated = {"schedulingGates": [{"name": g} for g in gates], **(spec or {})}
    return suite.pod(name, cpu=cpu, memory="64Mi", spec=gated, **kw)


def gates_of(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def held_back(suite: Suite, name: str) -> bool:
    """Still behind the queue's gate, unbound."""
    pod = suite.get(name)
    return names.QUEUE_GATE in gates_of(pod) and not pod["spec"].get("nodeName")


def wait_released(suite: Suite, name: str, timeout: float = 30) -> None:
    """Until the queue has released the pod (its gate gone), bound or not."""
    wait_for(
        lambda: not held_back(suite, name),
        timeout,
        f"the queue to release {name}",
        lambda: suite.describe(name),
    )


def scheduling_gated(suite: Suite, name: str) -> bool:
    """kube-scheduler has seen the pod and left it alone for its gates."""
    conds = (suite.get(name).get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "SchedulingGated"
        for c in conds
    )


def record_of(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's allocation record; its seal must be there too."""
    annotations = pod["metadata"].get("annotations") or {}
    assert annotations.get(names.ANNOTATION_ALLOCATION_SEAL), annotations
    record: dict[str, Any] = json.loads(annotations[names.ANNOTATION_ALLOCATION])
    return record


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    terms: list[dict[str, Any]] = (affinity.get(REQUIRED) or {}).get("nodeSelectorTerms") or []
    return terms


def pinned_to(term: dict[str, Any]) -> list[str]:
    """The nodes a term's ``matchFields`` pin it to by name."""
    return [
        v
        for f in term.get("matchFields") or []
        if f.get("key") == names.NODE_NAME_FIELD and f.get("operator") == "In"
        for v in f.get("values") or []
    ]


def assert_released_to(pod: dict[str, Any], node: str) -> None:
    """Released by the queue to ``node``: gate gone, every term pinned there, the record says so."""
    assert names.QUEUE_GATE not in gates_of(pod), gates_of(pod)
    terms = required_terms(pod)
    assert terms, pod["spec"].get("affinity")
    assert all(pinned_to(t) == [node] for t in terms), terms
    record = record_of(pod)
    assert record["node"] == node, record
    assert record["group"], record


def waiting_groups(suite: Suite) -> list[str]:
    """The suite's groups in the extender's queue (``/state``), in queue order."""
    queue = sorted(suite.stack.extender.state()["queue"], key=lambda w: w["position"])
    return [w["group"] for w in queue if w["group"].startswith(suite.ns + "/")]


def finish(suite: Suite, name: str) -> None:
    """The pod's containers exit 0 (KWOK): what it held is free again."""
    suite.stack.cp.kwok.succeed(suite.ns, name)


# ---- tests ---------------------------------------------------------------------------


def test_a_gated_pod_is_released_pinned_to_its_node_and_bound(suite: Suite) -> None:
    suite.add_nodes(2)
    # A second gate holds the pod: the queue places only pods gated by it alone, and
    # kube-scheduler reports the pod as gated meanwhile.
    gated_pod(suite, "solo", cpu="2", gates=(names.QUEUE_GATE, HOLD_GATE))
    # A pod created after it is released: a queue round has looked at it and left it.
    gated_pod(suite, "probe", cpu="1")
    suite.wait_bound("probe")
    assert f"{suite.ns}/solo" not in suite.state_pods(), suite.state_pods()
    wait_for(
        lambda: scheduling_gated(suite, "solo"),
        30,
        "kube-scheduler to report the pod SchedulingGated",
        lambda: suite.describe("solo"),
    )
    pod = suite.get("solo")
    assert not pod["spec"].get("nodeName")
    assert gates_of(pod) == [names.QUEUE_GATE, HOLD_GATE]
    assert names.ANNOTATION_ALLOCATION not in (pod["metadata"].get("annotations") or {})
    assert not pod["spec"].get("affinity")

    suite.core.patch_namespaced_pod(
        "solo",
        suite.ns,
        [
            {"op": "test", "path": "/spec/schedulingGates/1", "value": {"name": HOLD_GATE}},
            {"op": "remove", "path": "/spec/schedulingGates/1"},
        ],
    )
    node = suite.wait_bound("solo")["solo"]
    assert node in suite.nodes
    pod = suite.get("solo")
    assert gates_of(pod) == []
    assert_released_to(pod, node)
    record = record_of(pod)
    assert record["group"] == f"{suite.ns}/solo" and record["amounts"]["core"] == 2000
    suite.stack.cp.kwok.wait_for_phase(suite.ns, "solo", "Running")
    wait_for(
        lambda: suite.state_pods().get(f"{suite.ns}/solo", {}).get("state") == "committed",
        20,
        "the extender to hold the bound pod as committed",
        lambda: str(suite.state_pods()),
    )
    assert suite.state_pods()[f"{suite.ns}/solo"]["node"] == node
    allocated = sum(n["core"]["allocated"] for n in suite.state_nodes().values())
    assert allocated == 3000  # solo and the probe


def test_a_label_gang_stays_gated_until_whole_then_goes_to_distinct_nodes(suite: Suite) -> None:
    suite.add_nodes(4, cpu="4")
    lab = {names.LABEL_GROUP: "quad"}
    ann = {names.ANNOTATION_GROUP_SIZE: "4"}
    gang = [f"quad-{i}" for i in range(4)]
    for p in gang[:3]:
        gated_pod(suite, p, cpu="3", labels=lab, annotations=ann)
    # A single pod created after them is released: a queue round has looked at the three.
    gated_pod(suite, "probe", cpu="1")
    suite.wait_bound("probe")
    for p in gang[:3]:
        assert held_back(suite, p), suite.describe(p)
        assert not (suite.get(p)["metadata"].get("annotations") or {}).get(
            names.ANNOTATION_ALLOCATION
        )
    assert not [k for k in suite.state_pods() if "/quad-" in k], suite.state_pods()
    wait_for(
        lambda: all(scheduling_gated(suite, p) for p in gang[:3]),
        30,
        "kube-scheduler to report the short gang SchedulingGated",
        lambda: suite.describe(*gang[:3]),
    )

    gated_pod(suite, gang[3], cpu="3", labels=lab, annotations=ann)
    bound = suite.wait_bound(*gang, timeout=90)
    assert sorted(bound.values()) == sorted(suite.nodes), bound  # 3 of 4 cpu: one per node
    for p, node in bound.items():
        pod = suite.get(p)
        assert_released_to(pod, node)
        assert record_of(pod)["group"] == f"{suite.ns}/quad"


def test_a_pod_with_its_own_node_affinity_keeps_it_and_gains_the_pin(suite: Suite) -> None:
    suite.add_nodes(2, cpu="4")
    own = {"key": SUITE_LABEL, "operator": "In", "values": [suite.id]}
    other = {"key": "example.com/never", "operator": "Exists"}
    affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [own]}, {"matchExpressions": [other]}]
            }
        }
    }
    gated_pod(suite, "picky", cpu="1", spec={"affinity": affinity})
    node = suite.wait_bound("picky")["picky"]
    assert node in suite.nodes
    pod = suite.get("picky")
    assert_released_to(pod, node)
    terms = required_terms(pod)
    # Each term keeps what it asked and gains the pin; none is added or dropped.
    assert [t["matchExpressions"] for t in terms] == [[own], [other]], terms


def test_gated_pods_whose_affinity_admits_one_node_are_placed_on_that_node(
    suite: Suite,
) -> None:
    """Fluxion must choose among the nodes the pod's required node affinity admits; a pin
    to any other node would leave the pod unschedulable behind its own affinity. One
    after another, three pods go to the one node admitted, though the other has more
    room by the time the second comes."""
    suite.add_nodes(1, cpu="4")
    (target,) = suite.stack.cp.add_nodes(
        1,
        prefix=f"f{suite.id}-picked-",
        capacity={"cpu": "4", "memory": "8Gi", "pods": "110"},
        labels={SUITE_LABEL: suite.id, PICK_LABEL: suite.id},
    )
    suite.nodes.append(target)
    wait_for(
        lambda: target in suite.stack.extender.state()["nodes"],
        20,
        "the extender to see the node",
    )
    only = {"key": PICK_LABEL, "operator": "In", "values": [suite.id]}
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [only]}]}}}
    for i in range(3):
        name = f"choosy-{i}"
        gated_pod(suite, name, cpu="1", spec={"affinity": affinity})
        wait_released(suite, name)
        released = suite.get(name)
        assert record_of(released)["node"] == target, (record_of(released), suite.nodes)
        assert suite.wait_bound(name) == {name: target}
        assert_released_to(suite.get(name), target)


def test_waiting_pods_start_in_arrival_order_after_the_extender_is_killed(
    suite: Suite,
) -> None:
    """Three pods wait behind a blocker, each needing most of the one node. The extender
    is SIGKILLed and restarted; its successor forms the same queue from the gated pods,
    and as room for one frees at a time, they start in the order they were created."""
    (node,) = suite.add_nodes(1, cpu="4")
    gated_pod(suite, "blocker", cpu="4")
    suite.wait_bound("blocker")
    suite.stack.cp.kwok.wait_for_phase(suite.ns, "blocker", "Running")
    # Names that sort against their arrival; creation times are in whole seconds.
    order = ["zeta", "mu", "alpha"]
    for p in order:
        gated_pod(suite, p, cpu="3")
        time.sleep(1.1)
    groups = [f"{suite.ns}/{p}" for p in order]
    wait_for(
        lambda: waiting_groups(suite) == groups,
        30,
        "the three pods to wait in the extender's queue in arrival order",
        lambda: f"{waiting_groups(suite)} | {suite.describe(*order)}",
    )
    assert all(held_back(suite, p) for p in order)

    ext = suite.stack.extender
    ext.kill(signal.SIGKILL)
    ext.start()
    wait_for(
        lambda: waiting_groups(suite) == groups,
        60,
        "the restarted extender to take the queue and form it again",
        lambda: f"{waiting_groups(suite)} | {ext.log_tail()}",
    )
    assert suite.state_pods()[f"{suite.ns}/blocker"]["node"] == node
    assert all(held_back(suite, p) for p in order)

    running = "blocker"
    for i, p in enumerate(order):
        finish(suite, running)
        assert suite.wait_bound(p, timeout=60) == {p: node}
        assert_released_to(suite.get(p), node)
        later = order[i + 1 :]
        assert all(held_back(suite, q) for q in later), suite.describe(*later)
        suite.stack.cp.kwok.wait_for_phase(suite.ns, p, "Running")
        running = p


def test_a_higher_priority_pod_starts_before_earlier_ones(suite: Suite) -> None:
    (node,) = suite.add_nodes(1, cpu="4")
    scheduling = SchedulingV1Api(suite.core.api_client)
    classes = {"low": f"low-{suite.id}", "high": f"high-{suite.id}"}
    for level, value in (("low", 10), ("high", 1000)):
        scheduling.create_priority_class(
            V1PriorityClass(metadata=V1ObjectMeta(name=classes[level]), value=value)
        )
    try:
        # The blocker's priority is the highest: waiting pods do not preempt it.
        high = {"priorityClassName": classes["high"]}
        gated_pod(suite, "blocker", cpu="4", spec=high)
        suite.wait_bound("blocker")
        suite.stack.cp.kwok.wait_for_phase(suite.ns, "blocker", "Running")
        created = {
            "plain": {},
            "low": {"priorityClassName": classes["low"]},
            "urgent": high,
        }
        for p, spec in created.items():
            gated_pod(suite, p, cpu="3", spec=spec)
            time.sleep(1.1)
        expected = ["urgent", "low", "plain"]
        wait_for(
            lambda: waiting_groups(suite) == [f"{suite.ns}/{p}" for p in expected],
            30,
            "the pods to wait in the extender's queue by priority",
            lambda: f"{waiting_groups(suite)} | {suite.describe(*expected)}",
        )
        running = "blocker"
        for i, p in enumerate(expected):
            finish(suite, running)
            assert suite.wait_bound(p, timeout=60) == {p: node}
            later = expected[i + 1 :]
            assert all(held_back(suite, q) for q in later), suite.describe(*later)
            suite.stack.cp.kwok.wait_for_phase(suite.ns, p, "Running")
            running = p
        for p in ("blocker", *expected):  # nothing was preempted
            assert not suite.get(p)["metadata"].get("deletionTimestamp"), p
        events = suite.core.list_namespaced_event(suite.ns).items
        assert not [e.involved_object.name for e in events if e.reason == "Preempted"]
    finally:
        for name in classes.values():
            scheduling.delete_priority_class(name)


def test_a_released_pod_not_bound_yet_is_held_again_after_a_restart(suite: Suite) -> None:
    """kube-scheduler refuses the released pod (its volume claim does not exist), so it
    stays released and unbound. A restarted extender holds it again where its record
    says, and does not give that room to another pod until it is gone."""
    (node,) = suite.add_nodes(1, cpu="4")
    missing_claim = {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
    }
    gated_pod(suite, "stuck", cpu="3", spec=missing_claim)
    wait_released(suite, "stuck")
    assert_released_to(suite.get("stuck"), node)
    wait_for(
        lambda: "missing" in suite.unschedulable_message("stuck"),
        30,
        "kube-scheduler to refuse the pod for its claim",
        lambda: suite.describe("stuck"),
    )
    assert suite.node_of("stuck") == ""
    key = f"{suite.ns}/stuck"
    before = suite.state_pods()[key]
    assert before["state"] == "tentative" and before["node"] == node, before

    ext = suite.stack.extender
    ext.kill(signal.SIGKILL)
    ext.start()
    after = suite.state_pods()
    assert after[key]["state"] == "tentative" and after[key]["node"] == node, after
    assert suite.state_nodes()[node]["core"]["allocated"] == 3000

    # The room the released pod holds is not given again: this one waits in the queue.
    gated_pod(suite, "other", cpu="2")
    wait_for(
        lambda: waiting_groups(suite) == [f"{suite.ns}/other"],
        30,
        "the other pod to wait in the restarted extender's queue",
        lambda: f"{waiting_groups(suite)} | {suite.describe('other')} | {ext.log_tail()}",
    )
    assert held_back(suite, "other")
    assert suite.node_of("stuck") == ""

    suite.delete("stuck")
    assert suite.wait_bound("other", timeout=60) == {"other": node}
    assert_released_to(suite.get("other"), node)


def test_a_pod_created_without_the_gate_still_goes_through_the_filter(suite: Suite) -> None:
    """The old path is kept: kube-scheduler asks the extender, which places and binds it."""
    suite.add_nodes(1, cpu="4")
    suite.pod("ungated", cpu="1", memory="64Mi")
    node = suite.wait_bound("ungated")["ungated"]
    pod = suite.get("ungated")
    assert record_of(pod)["node"] == node
    assert not pod["spec"].get("affinity"), "nothing pinned it: it was never gated"
