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

import contextlib
import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes.client import (
    ApiClient,
    BatchV1Api,
    ResourceV1Api,
    SchedulingV1Api,
    StorageV1Api,
    V1ObjectMeta,
    V1PriorityClass,
)
from kubernetes.client.exceptions import ApiException

from fluence import names
from testbed import ControlPlane
from testbed.kwok import ANNOTATION_EXIT_AFTER, ANNOTATION_EXIT_CODE
from testbed.schedconfig import scheduler_config
from tests.e2e.test_extender_e2e import (
    RACK_KEY,
    Extender,
    Stack,
    Suite,
    _assert_no_overcommit,
    wait_for,
)
from tests.e2e.test_helm_chart import CHART
from tests.support.extender import SUITE_LABEL, fluence_scheduler, pod_body
from tests.support.helm import template
from webhook.job_policy import DISRUPTION_RULE

LEASE_SECONDS = 3
"""The queue Lease's duration: how long a restarted extender waits to take the queue."""

HOLD_GATE = "example.com/hold"
"""A gate that is not the queue's: the queue leaves a pod alone while it is there."""

PICK_LABEL = "example.com/pick"
"""A label only some of a test's nodes carry, for node affinity to select."""

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

GANG_TIMEOUT = 12
"""FLUENCE_GANG_TIMEOUT of the extender the requeue tests restart: released groups not all
bound this many seconds after their release are evicted."""

REFUSED_CLAIM = "refused"
"""The device claim (DRA) of :func:`refused_devices`: kube-scheduler finds no device for it."""

BIG_MEMORY = 'device.capacity["{driver}"].memory.isGreaterThan(quantity("100Gi"))'
"""A selector only Kubernetes' CEL library decides (the queue takes it to hold, kube-scheduler
finds it false for the devices of :func:`device_objects`)."""


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
        stack = Stack(control_plane, extender, scheduler)
        try:
            yield stack
        finally:
            # A test may have started another in its place (without_extender_calls).
            control_plane.stop_scheduler(stack.scheduler)


@pytest.fixture
def suite(stack: Stack, kube: ApiClient, namespace: str) -> Iterator[Suite]:
    with Suite(stack, kube, namespace) as s:
        yield s


@pytest.fixture
def short_gang_timeout(stack: Stack) -> Iterator[float]:
    """The module's extender restarted with a gang timeout of :data:`GANG_TIMEOUT` seconds for
    one test, then restarted as it was (same port: kube-scheduler keeps asking it). Each
    restart takes the queue Lease over within :data:`LEASE_SECONDS`."""
    ext = stack.extender
    before = dict(ext.env)
    ext.kill(signal.SIGTERM)
    ext.env["FLUENCE_GANG_TIMEOUT"] = str(GANG_TIMEOUT)
    ext.start()
    try:
        yield float(GANG_TIMEOUT)
    finally:
        ext.kill(signal.SIGTERM)
        ext.env.clear()
        ext.env.update(before)
        ext.start()


NodeDevices = Sequence[str] | Mapping[str, list[dict[str, Any]]]
"""Nodes with one device of 40Gi each, or node -> its devices."""


def device_objects(
    suite: Suite, selector: str, nodes: NodeDevices = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A DeviceClass of the test's own driver that also asks ``selector`` (``{driver}``
    filled in), and ResourceSlices: one device of 40Gi every node reaches, or with
    ``nodes`` devices on each of those nodes (a pool per node)."""
    name, driver = f"fluence-e2e-{suite.id}", f"e2e-{suite.id}.fluence.example"
    expressions = [f'device.driver == "{driver}"'] + (
        [selector.format(driver=driver)] if selector else []
    )
    device_class = {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }
    device = {"name": "dev-0", "capacity": {"memory": {"value": "40Gi"}}}

    def pool(
        pool: str, reach: dict[str, Any], slice_name: str, devices: list[dict[str, Any]]
    ) -> dict[str, Any]:
        spec = {"pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}, **reach}
        return {
            "metadata": {"name": slice_name},
            "spec": {"driver": driver, **spec, "devices": devices},
        }

    if not nodes:
        return device_class, [pool("shared", {"allNodes": True}, name, [device])]
    on = nodes if isinstance(nodes, Mapping) else {n: [device] for n in nodes}
    return device_class, [pool(n, {"nodeName": n}, f"{name}-{n}", d) for n, d in on.items()]


@contextlib.contextmanager
def devices_published(
    suite: Suite, selector: str = "", nodes: NodeDevices = (), extended: str = ""
) -> Iterator[str]:
    """:func:`device_objects` created (the class backing ``extended`` when given) for the
    block, deleted after it; yields the DeviceClass's name."""
    dra = ResourceV1Api(suite.core.api_client)
    device_class, slices = device_objects(suite, selector, nodes)
    if extended:
        device_class["spec"]["extendedResourceName"] = extended
    # The client takes dict bodies as they are; its typed signatures want models.
    body: Any = device_class
    dra.create_device_class(body)
    try:
        for body in slices:
            dra.create_resource_slice(body)
        yield device_class["metadata"]["name"]
    finally:
        for body in slices:
            with contextlib.suppress(ApiException):
                dra.delete_resource_slice(body["metadata"]["name"])
        with contextlib.suppress(ApiException):
            dra.delete_device_class(device_class["metadata"]["name"])


def device_claim(suite: Suite, name: str) -> dict[str, Any]:
    """A ResourceClaim asking one device of :func:`device_objects`' class."""
    request = {"name": "dev", "exactly": {"deviceClassName": f"fluence-e2e-{suite.id}"}}
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}


@pytest.fixture
def refused_devices(suite: Suite) -> Iterator[dict[str, Any]]:
    """A pod spec part whose device claim kube-scheduler refuses on every node and the
    queue cannot tell: the claim's class asks a selector of Kubernetes' own CEL functions
    (:data:`BIG_MEMORY`), which the queue leaves to kube-scheduler (it reads devices,
    classes and claims, and holds back pods whose claims are missing or cannot be met)."""
    dra = ResourceV1Api(suite.core.api_client)
    with devices_published(suite, BIG_MEMORY):
        body: Any = device_claim(suite, REFUSED_CLAIM)
        dra.create_namespaced_resource_claim(suite.ns, body)
        yield {"resourceClaims": [{"name": "devices", "resourceClaimName": REFUSED_CLAIM}]}


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


def spread_over(key: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod spec part: spread over ``key`` with maxSkew 1 (DoNotSchedule), counting the
    pods ``labels`` picks."""
    rule = {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
    }
    return {"topologySpreadConstraints": [rule]}


def assert_none_refused(suite: Suite) -> None:
    """kube-scheduler refused none of the suite's pods (no ``FailedScheduling`` Event)."""
    events = suite.core.list_namespaced_event(suite.ns).items
    assert not [e.message for e in events if e.reason == "FailedScheduling"]


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
    """The suite's groups the extender's queue has matched and keeps waiting (``/state``), in
    queue order; gated groups not matched yet (position null) are left out."""
    queue = [
        w
        for w in suite.stack.extender.state()["queue"]
        if w["group"].startswith(suite.ns + "/") and w["position"] is not None
    ]
    return [w["group"] for w in sorted(queue, key=lambda w: w["position"])]


def queue_entry(suite: Suite, group: str) -> dict[str, Any] | None:
    """The extender's ``/state`` queue entry of ``group`` (namespace/name), if any."""
    for w in suite.stack.extender.state()["queue"]:
        if w["group"] == group:
            entry: dict[str, Any] = w
            return entry
    return None


def queued_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The queue's condition on the pod (why its group waits), if written."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == names.CONDITION_QUEUED:
            cond: dict[str, Any] = c
            return cond
    return None


def condition_of(suite: Suite, name: str) -> dict[str, Any] | None:
    return queued_condition(suite.get(name))


def condition_says(suite: Suite, name: str, text: str) -> dict[str, Any] | None:
    """The pod's Queued condition once its message holds ``text``."""
    cond = condition_of(suite, name)
    return cond if cond and text in str(cond.get("message")) else None


def released_condition(suite: Suite, name: str) -> dict[str, Any] | None:
    """The pod's Queued condition once the queue has turned it False."""
    cond = condition_of(suite, name)
    return cond if cond and cond.get("status") == "False" else None


def released_and_refused(suite: Suite, name: str, node: str) -> None:
    """Wait until the queue has released ``name`` pinned to ``node`` and kube-scheduler has
    refused it for its device claim (:func:`refused_devices`)."""
    wait_released(suite, name)
    assert_released_to(suite.get(name), node)
    wait_for(
        partial(held_for_devices, suite, name),
        30,
        "kube-scheduler to hold the pod back for its device claim",
        partial(suite.describe, name),
    )


def held_for_devices(suite: Suite, name: str) -> bool:
    """kube-scheduler refuses the pod: no device for its claim (its PodScheduled condition)."""
    conditions = suite.get(name).get("status", {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and "cannot allocate all claims" in (c.get("message") or "")
        for c in conditions
    )


def gone(suite: Suite, name: str) -> bool:
    """The pod is no longer in the API server."""
    try:
        suite.core.read_namespaced_pod(name, suite.ns)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def warnings_about(suite: Suite, name: str, reason: str) -> list[Any]:
    """The Warning Events of ``reason`` on the pod called ``name`` (any of its incarnations)."""
    return [
        e
        for e in suite.core.list_namespaced_event(suite.ns).items
        if e.involved_object.name == name and e.reason == reason and e.type == "Warning"
    ]


def wait_held(suite: Suite, name: str, state: str, timeout: float = 30) -> dict[str, Any]:
    """Until the extender's ``/state`` holds the pod in ``state``; that holding."""
    key = f"{suite.ns}/{name}"
    wait_for(
        lambda: suite.state_pods().get(key, {}).get("state") == state,
        timeout,
        f"the extender to hold {name} as {state}",
        lambda: str(suite.state_pods()),
    )
    held: dict[str, Any] = suite.state_pods()[key]
    return held


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
    assert wait_held(suite, "solo", "committed", 20)["node"] == node
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


def test_a_released_pod_not_bound_yet_is_held_again_after_a_restart(
    suite: Suite, refused_devices: dict[str, Any]
) -> None:
    """kube-scheduler holds the released pod back (no device for its claim), so it
    stays released and unbound. A restarted extender holds it again where its record
    says, and does not give that room to another pod until it is gone."""
    (node,) = suite.add_nodes(1, cpu="4")
    gated_pod(suite, "stuck", cpu="3", spec=refused_devices)
    released_and_refused(suite, "stuck", node)
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


def filter_calls(suite: Suite) -> float:
    """How many filter calls the extender has answered (its request histogram's count)."""
    text = httpx.get(suite.stack.extender.url + "/metrics/", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("fluence_extender_request_seconds_count") and 'verb="filter"' in line
    )


@pytest.fixture
def without_extender_calls(stack: Stack) -> Iterator[dict[str, Any]]:
    """kube-scheduler configured as the chart renders it with ``scheduler.extenderCalls=false``
    (no extender in the profile) for one test, then as it was."""
    rendered = template(CHART, "--set", "scheduler.extenderCalls=false")
    (config_map,) = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "fluence-scheduler-config"
    ]
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    config["leaderElection"] = {"leaderElect": False}  # one scheduler here, no Lease needed
    cp = stack.cp
    cp.stop_scheduler(stack.scheduler)
    stack.scheduler = cp.start_scheduler(config, name="fluence-queue-only", extra_args=["--v=4"])
    try:
        yield config
    finally:
        cp.stop_scheduler(stack.scheduler)
        stack.scheduler = cp.start_scheduler(
            scheduler_config(stack.extender.url), name="fluence", extra_args=["--v=4"]
        )


def test_without_extender_calls_the_queue_places_and_kube_scheduler_binds_alone(
    suite: Suite, without_extender_calls: dict[str, Any]
) -> None:
    """The chart's queue-only profile: no HTTP call per pod, the same placements."""
    assert "extenders" not in without_extender_calls
    suite.add_nodes(3, cpu="4")
    calls = filter_calls(suite)
    lab = {names.LABEL_GROUP: "trio"}
    ann = {names.ANNOTATION_GROUP_SIZE: "3"}
    gang = [f"trio-{i}" for i in range(3)]
    for p in gang:
        gated_pod(suite, p, cpu="3", labels=lab, annotations=ann)
    bound = suite.wait_bound(*gang, timeout=90)
    assert sorted(bound.values()) == sorted(suite.nodes), bound  # 3 of 4 cpu: one per node
    for p, node in bound.items():
        pod = suite.get(p)
        assert_released_to(pod, node)
        assert record_of(pod)["group"] == f"{suite.ns}/trio"
    for p, node in bound.items():  # kube-scheduler's binds, followed to committed
        assert wait_held(suite, p, "committed")["node"] == node
    # A pod created without the gate is kube-scheduler's alone; the extender counts what it
    # holds, so the queue never hands that room out again.
    suite.pod("ungated", cpu="1", memory="64Mi")
    node = suite.wait_bound("ungated")["ungated"]
    assert wait_held(suite, "ungated", "foreign")["node"] == node
    gated_pod(suite, "late", cpu="1")
    late = suite.wait_bound("late")["late"]
    assert late != node, "the node the ungated pod filled (3 + 1 of 4 cpu) has no room left"
    assert filter_calls(suite) == calls, "kube-scheduler called the extender's filter"


def queue_leader(extender: Extender) -> bool:
    """The extender says it runs the queue (its ``fluence_queue_leader`` gauge is 1)."""
    text = httpx.get(extender.url + "/metrics/", timeout=10).text
    return any(
        line.startswith("fluence_queue_leader") and line.rsplit(" ", 1)[1] in ("1", "1.0")
        for line in text.splitlines()
    )


def releases_logged(*extenders: Extender) -> Counter[str]:
    """How many times each pod was released, over the extenders' whole logs."""
    counts: Counter[str] = Counter()
    for ext in extenders:
        for line in ext.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and doc.get("msg") == "pod released":
                    counts[str(doc.get("pod"))] += 1
    return counts


def test_two_extenders_share_one_queue_and_the_standby_takes_it_over(
    suite: Suite, tmp_path: Path
) -> None:
    """A second extender competes for the queue Lease under gated load: one releases, no pod
    is released twice or overcommits a node; killed, the leader's queue goes on in the other."""
    ext = suite.stack.extender
    standby = Extender(tmp_path, suite.stack.cp.kubeconfig)
    for key in ("FLUENCE_QUEUE_LEASE_NAMESPACE", "FLUENCE_QUEUE_LEASE_SECONDS"):
        standby.env[key] = ext.env[key]
    standby.start()
    try:
        suite.add_nodes(4, cpu="4")
        gangs = {f"g{g}": [f"g{g}-{i}" for i in range(4)] for g in range(3)}
        for g, members in gangs.items():
            lab = {names.LABEL_GROUP: g}
            ann = {names.ANNOTATION_GROUP_SIZE: "4"}
            for p in members:
                gated_pod(suite, p, cpu="1", labels=lab, annotations=ann)
        singles = [f"s{i}" for i in range(8)]
        for p in singles:
            gated_pod(suite, p, cpu="1")
        everyone = [p for members in gangs.values() for p in members] + singles
        # 20 one-cpu pods on 16 cpus: 16 start, the rest wait gated.
        wait_for(
            lambda: sum(bool(suite.node_of(p)) for p in everyone) == 16,
            90,
            "16 of the 20 pods to be bound",
            lambda: suite.describe(*everyone),
        )
        assert [queue_leader(ext), queue_leader(standby)].count(True) == 1
        _assert_no_overcommit(suite)
        released = releases_logged(ext, standby)
        assert max(released.values()) == 1, released
        for g, members in gangs.items():
            placed = [p for p in members if suite.node_of(p)]
            assert len(placed) in (0, 4), (g, placed)
        waiting = [p for p in everyone if not suite.node_of(p)]
        assert all(held_back(suite, p) for p in waiting), suite.describe(*waiting)

        leader, other = (ext, standby) if queue_leader(ext) else (standby, ext)
        leader.kill(signal.SIGKILL)
        if leader is ext:
            ext.start()  # kube-scheduler's own extender, back for its filter calls
        wait_for(
            lambda: queue_leader(other), 30, "the other extender to take the queue", other.log_tail
        )
        # Room for the waiting pods, 4 cpus, frees; the new leader releases them.
        for p in [p for p in everyone if suite.node_of(p)][:4]:
            finish(suite, p)
        suite.wait_bound(*waiting, timeout=90)
        _assert_no_overcommit(suite)
        released = releases_logged(ext, standby)
        assert all(released[f"{suite.ns}/{p}"] == 1 for p in everyone), released
        assert all(f"{suite.ns}/{p}" in releases_logged(other) for p in waiting)
    finally:
        standby.kill(signal.SIGTERM)


# ---- released groups that do not start ------------------------------------------------


def test_a_released_gang_one_member_cannot_bind_is_evicted_whole(
    short_gang_timeout: float, suite: Suite, refused_devices: dict[str, Any]
) -> None:
    """Both members of a label gang are released; kube-scheduler binds one and refuses the
    other (no device for its claim). A gang timeout after the release the queue
    evicts the whole group, the bound member too, and says why in an Event on each."""
    suite.add_nodes(2, cpu="4")
    lab = {names.LABEL_GROUP: "pair"}
    ann = {names.ANNOTATION_GROUP_SIZE: "2"}
    gated_pod(suite, "pair-0", cpu="1", labels=lab, annotations=ann)
    gated_pod(suite, "pair-1", cpu="1", labels=lab, annotations=ann, spec=refused_devices)
    pair = ("pair-0", "pair-1")
    for p in pair:
        wait_released(suite, p)
    released_at = time.monotonic()
    uids = {p: suite.get(p)["metadata"]["uid"] for p in pair}
    node = suite.wait_bound("pair-0")["pair-0"]
    assert_released_to(suite.get("pair-0"), node)
    wait_for(
        partial(held_for_devices, suite, "pair-1"),
        30,
        "kube-scheduler to hold the second member back for its device claim",
        lambda: suite.describe("pair-1"),
    )
    stuck = suite.get("pair-1")
    assert not stuck["spec"].get("nodeName")
    assert record_of(stuck)["group"] == f"{suite.ns}/pair"
    assert_released_to(stuck, record_of(stuck)["node"])
    assert all(not gone(suite, p) for p in pair)  # nothing is evicted at once

    wait_for(
        lambda: all(gone(suite, p) for p in pair),
        GANG_TIMEOUT + 30,
        "the queue to evict the whole gang after its gang timeout",
        suite.stack.extender.log_tail,
    )
    # Not before the gang timeout (less the time this test took to see the release).
    assert time.monotonic() - released_at >= short_gang_timeout - 2
    for p in pair:
        events = wait_for(
            partial(warnings_about, suite, p, "GangRequeued"),
            20,
            f"the GangRequeued Event on {p}",
            lambda: suite.stack.extender.log_tail(),
        )
        (event,) = events
        assert event.involved_object.uid == uids[p]
        assert f"group {suite.ns}/pair evicted to queue again" in event.message, event.message
        assert "gang timeout" in event.message, event.message
    # Bare pods: nothing makes them again, and nothing of theirs is held any more.
    wait_for(
        lambda: not suite.state_pods(),
        20,
        "the extender to let go of the evicted gang",
        lambda: str(suite.state_pods()),
    )
    assert sum(n["core"]["allocated"] for n in suite.state_nodes().values()) == 0
    assert not suite.core.list_namespaced_pod(suite.ns).items


def test_a_job_gang_evicted_after_the_gang_timeout_is_made_again_and_runs(
    short_gang_timeout: float, suite: Suite
) -> None:
    """A Job's gang (template gated by the queue, as the webhook would make it) is released,
    and kube-scheduler holds both pods back: no device meets their shared claim (its
    class asks more memory than the device has, in Kubernetes' own CEL functions, which
    the queue leaves to kube-scheduler). After the gang timeout the queue evicts them; once
    they are gone the class asks no more than the device has; the Job controller makes the
    pods again, gated from the template, and the queue releases them, kube-scheduler
    allocates the claim, and they run."""
    suite.add_nodes(2, cpu="4")
    core = suite.core
    batch = BatchV1Api(core.api_client)
    dra = ResourceV1Api(core.api_client)
    template = pod_body("unused", {"cpu": "1", "memory": "64Mi"}, suite.id)
    template["metadata"] = {
        "labels": {names.LABEL_GROUP: "sweep"},
        "annotations": {
            names.ANNOTATION_GROUP_SIZE: "2",
            ANNOTATION_EXIT_CODE: "0",
            ANNOTATION_EXIT_AFTER: "5s",
        },
    }
    template["spec"].update(
        restartPolicy="Never",
        schedulingGates=[{"name": names.QUEUE_GATE}],
        resourceClaims=[{"name": "devices", "resourceClaimName": "data"}],
    )
    job: Any = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 6,
            # As the webhook's Jobs entry makes it: the queue's evictions are not failures.
            "podFailurePolicy": {"rules": [DISRUPTION_RULE]},
            "podReplacementPolicy": "Failed",
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    with devices_published(suite, BIG_MEMORY) as name:
        body: Any = device_claim(suite, "data")
        dra.create_namespaced_resource_claim(suite.ns, body)
        try:
            batch.create_namespaced_job(suite.ns, job)

            def members() -> list[str]:
                pods = core.list_namespaced_pod(suite.ns, label_selector="job-name=sweep").items
                return sorted(
                    str(p.metadata.name)
                    for p in pods
                    if p.metadata is not None and not p.metadata.deletion_timestamp
                )

            def two(exclude: Sequence[str] = ()) -> list[str] | None:
                made = members()
                return made if len(made) == 2 and not set(made) & set(exclude) else None

            first: list[str] = wait_for(two, 60, "the Job controller to make two pods")
            for p in first:
                # Gated from the template: the queue released it (record, pin), not the filter.
                wait_released(suite, p)
                pod = suite.get(p)
                assert_released_to(pod, record_of(pod)["node"])
                assert record_of(pod)["group"] == f"{suite.ns}/sweep"
                wait_for(
                    partial(held_for_devices, suite, p),
                    30,
                    f"kube-scheduler to hold {p} back for its device claim",
                    partial(suite.describe, p),
                )
            assert all(not suite.node_of(p) for p in first)
            uids = {p: suite.get(p)["metadata"]["uid"] for p in first}

            wait_for(
                lambda: all(gone(suite, p) for p in first),
                GANG_TIMEOUT + 60,
                "the queue to evict the Job's gang after its gang timeout",
                lambda: suite.stack.extender.log_tail(),
            )
            for p in first:
                (event,) = wait_for(
                    partial(warnings_about, suite, p, "GangRequeued"),
                    20,
                    f"the GangRequeued Event on {p}",
                )
                assert event.involved_object.uid == uids[p]
                assert f"group {suite.ns}/sweep evicted to queue again" in event.message
            # Now the class asks what the device has: the pods made again can bind.
            met, _ = device_objects(
                suite, 'device.capacity["{driver}"].memory.isLessThan(quantity("100Gi"))'
            )
            dra.patch_device_class(name, {"spec": met["spec"]})

            again: list[str] = wait_for(
                lambda: two(exclude=first),
                90,
                "the Job controller to make the pods again",
                lambda: str(members()),
            )
            bound = suite.wait_bound(*again, timeout=90)
            for p, node in bound.items():
                assert node in suite.nodes
                pod = suite.get(p)
                assert_released_to(pod, node)  # it came through the queue again
                assert record_of(pod)["group"] == f"{suite.ns}/sweep"

            def complete() -> bool:
                job = batch.read_namespaced_job("sweep", suite.ns)
                return bool(job.status and job.status.succeeded == 2)

            wait_for(complete, 90, "the Job to complete", lambda: str(members()))
            # The two pods the queue evicted were ignored, not counted toward backoffLimit.
            status = batch.read_namespaced_job("sweep", suite.ns).status
            assert status is not None and not status.failed
            wait_for(
                lambda: sum(n["core"]["allocated"] for n in suite.state_nodes().values()) == 0,
                30,
                "fluence to release the finished gang",
                lambda: str(suite.state_nodes()),
            )
        finally:
            with contextlib.suppress(ApiException):
                batch.delete_namespaced_job("sweep", suite.ns, propagation_policy="Background")


def test_a_released_pod_whose_node_is_deleted_is_evicted(
    suite: Suite, refused_devices: dict[str, Any]
) -> None:
    """The pod is released pinned to the one node and held back there (no device for its
    claim); the node is deleted. The queue evicts the pod within seconds, long before the
    gang timeout (600 s here), and says its node is gone."""
    (node,) = suite.add_nodes(1, cpu="4")
    gated_pod(suite, "orphan", cpu="1", spec=refused_devices)
    released_and_refused(suite, "orphan", node)
    uid = suite.get("orphan")["metadata"]["uid"]
    assert suite.state_pods()[f"{suite.ns}/orphan"]["node"] == node

    suite.stack.cp.delete_node(node)
    suite.nodes.remove(node)
    deleted_at = time.monotonic()
    wait_for(
        lambda: gone(suite, "orphan"),
        20,
        "the queue to evict the pod whose node is gone",
        lambda: suite.stack.extender.log_tail(),
    )
    assert time.monotonic() - deleted_at < 10
    (event,) = wait_for(
        lambda: warnings_about(suite, "orphan", "GangRequeued"),
        20,
        "the GangRequeued Event on the pod",
    )
    assert event.involved_object.uid == uid
    assert f"its node {node} is gone" in event.message, event.message
    assert f"group {suite.ns}/orphan evicted to queue again" in event.message, event.message
    wait_for(
        lambda: f"{suite.ns}/orphan" not in suite.state_pods(),
        20,
        "the extender to let go of the evicted pod",
        lambda: str(suite.state_pods()),
    )


# ---- why a group waits ----------------------------------------------------------------


def test_a_waiting_pod_says_why_in_its_condition_and_in_the_queue(suite: Suite) -> None:
    """A label gang of three with two members made: each says in its Queued condition that
    the group waits for one more pod, and ``/state`` lists the group, unmatched (position
    null), with that note. The third member lets all three go."""
    suite.add_nodes(1, cpu="4")
    lab = {names.LABEL_GROUP: "trio"}
    ann = {names.ANNOTATION_GROUP_SIZE: "3"}
    trio = [f"trio-{i}" for i in range(3)]
    for p in trio[:2]:
        gated_pod(suite, p, cpu="1", labels=lab, annotations=ann)
    group = f"{suite.ns}/trio"
    why = f"waiting for 1 more pod(s) of group {group}"
    for p in trio[:2]:
        # Told once the group has waited 2 s; a pod told "2 more" before the second came is
        # told the changed reason at most 30 s after the last write for the group.
        cond = wait_for(
            partial(condition_says, suite, p, why),
            60,
            f"the queue to write why {p} waits",
            partial(suite.describe, p),
        )
        assert cond["type"] == names.CONDITION_QUEUED, cond
        assert cond["status"] == "True", cond
        assert cond["reason"] == "WaitingInQueue", cond
        assert why in cond["message"], cond
        assert held_back(suite, p), suite.describe(p)
    entry = queue_entry(suite, group)
    assert entry is not None, suite.stack.extender.state()["queue"]
    assert entry["position"] is None, entry
    assert entry["note"] == why, entry
    assert entry["pods"] == 2, entry
    assert group not in waiting_groups(suite)
    assert not suite.state_pods()  # nothing is held for a group short of its members

    gated_pod(suite, trio[2], cpu="1", labels=lab, annotations=ann)
    bound = suite.wait_bound(*trio, timeout=60)
    assert set(bound.values()) == {suite.nodes[0]}
    for p in trio:
        assert_released_to(suite.get(p), suite.nodes[0])
    wait_for(
        lambda: queue_entry(suite, group) is None,
        20,
        "the queue to stop listing the released group",
        lambda: str(queue_entry(suite, group)),
    )
    for p in trio[:2]:  # those told they waited are told they went
        cond = wait_for(
            partial(released_condition, suite, p),
            20,
            f"{p}'s Queued condition to turn False",
            partial(suite.describe, p),
        )
        assert cond["reason"] == "Released" and suite.nodes[0] in cond["message"], cond


def test_a_pod_waiting_only_for_a_nodes_pod_limit_keeps_its_place_in_the_queue(
    suite: Suite,
) -> None:
    """The one node takes two pods and runs two: a third, which its cpu would take, waits
    as a group that does not fit now (not one that can never fit, which would take it
    out of the queue), listed in the queue with a position, and starts there once one of
    the two is gone."""
    (node,) = suite.add_nodes(1, cpu="4", extra={"pods": "2"})
    for name in ("first", "second"):
        gated_pod(suite, name, cpu="1")
    assert suite.wait_bound("first", "second", timeout=60) == {"first": node, "second": node}
    gated_pod(suite, "late", cpu="1")
    cond = wait_for(
        partial(condition_says, suite, "late", "does not fit now"),
        60,
        "the queue to write why the pod waits",
        partial(suite.describe, "late"),
    )
    assert "can never fit" not in cond["message"], cond
    assert "at their pod limit" in cond["message"], cond
    assert waiting_groups(suite) == [f"{suite.ns}/late"], suite.stack.extender.state()["queue"]
    assert held_back(suite, "late"), suite.describe("late")
    suite.delete("first")
    assert suite.wait_bound("late", timeout=60) == {"late": node}
    assert_released_to(suite.get("late"), node)


def test_a_gang_waiting_for_places_under_a_pod_limit_is_not_overtaken(suite: Suite) -> None:
    """The one node takes two pods and runs two; a gang of two waits for places. A place
    freed is kept for it from a pod behind it that would still run when the second frees
    (no deadline: the default estimate), and the gang starts once both are free."""
    (node,) = suite.add_nodes(1, cpu="4", extra={"pods": "2"})
    for name in ("first", "second"):
        gated_pod(suite, name, cpu="1")
    assert suite.wait_bound("first", "second", timeout=60) == {"first": node, "second": node}
    lab = {names.LABEL_GROUP: "pair"}
    ann = {names.ANNOTATION_GROUP_SIZE: "2"}
    for name in ("pair-0", "pair-1"):
        gated_pod(suite, name, cpu="1", labels=lab, annotations=ann)
    wait_for(
        partial(condition_says, suite, "pair-0", "places are kept for it"),
        60,
        "the queue to keep places for the gang",
        partial(suite.describe, "pair-0"),
    )
    suite.delete("first")
    gated_pod(suite, "late", cpu="1")
    wait_for(
        partial(condition_says, suite, "late", "does not fit now"),
        60,
        "the queue to keep the pod behind off the place kept",
        partial(suite.describe, "late"),
    )
    assert held_back(suite, "late"), suite.describe("late")
    assert held_back(suite, "pair-0") and held_back(suite, "pair-1")
    suite.delete("second")
    assert suite.wait_bound("pair-0", "pair-1", timeout=60) == {"pair-0": node, "pair-1": node}
    assert held_back(suite, "late"), suite.describe("late")


def test_members_taking_one_host_port_are_released_where_kube_scheduler_takes_them(
    suite: Suite,
) -> None:
    """A gang of two one-cpu pods that each take host port 18080 on two 4-cpu nodes: the
    queue matches them on distinct nodes (packed on one, kube-scheduler's NodePorts would
    refuse the second). A third pod taking the port waits gated, and is released to the
    node a member leaves. kube-scheduler refuses none of them."""
    nodes = suite.add_nodes(2, cpu="4")
    lab = {names.LABEL_GROUP: "ported"}
    ann = {names.ANNOTATION_GROUP_SIZE: "2"}

    def with_port(name: str, **kw: Any) -> None:
        container = {
            "name": "app",
            "image": "busybox",
            "resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
            "ports": [{"containerPort": 8080, "hostPort": 18080}],
        }
        gated_pod(suite, name, spec={"containers": [container]}, **kw)

    gang = ["ported-0", "ported-1"]
    for p in gang:
        with_port(p, labels=lab, annotations=ann)
    bound = suite.wait_bound(*gang, timeout=60)
    assert sorted(bound.values()) == sorted(nodes), bound
    for p, node in bound.items():
        assert_released_to(suite.get(p), node)

    with_port("third")
    wait_for(
        lambda: (
            "host ports are taken"
            in ((queue_entry(suite, f"{suite.ns}/third") or {}).get("note") or "")
        ),
        30,
        "the queue to keep the third pod waiting for the port",
        lambda: str(queue_entry(suite, f"{suite.ns}/third")),
    )
    assert held_back(suite, "third")
    finish(suite, gang[0])
    assert suite.wait_bound("third", timeout=60) == {"third": bound[gang[0]]}
    assert_released_to(suite.get("third"), bound[gang[0]])
    assert_none_refused(suite)


def test_pod_affinity_is_kept_where_the_queue_releases_pods(suite: Suite) -> None:
    """Required pod (anti-)affinity, as kube-scheduler's InterPodAffinity filter checks it:
    gang members that keep off each other's node go to distinct nodes (packed, the second
    would be refused); a pod drawn to a running pod goes to its node, one kept off it
    elsewhere. kube-scheduler refuses none of them."""
    nodes = suite.add_nodes(3, cpu="4")

    def term(**match: str) -> dict[str, Any]:
        selector = {"labelSelector": {"matchLabels": match}}
        return {**selector, "topologyKey": names.LABEL_HOSTNAME}

    def rule(kind: str, **match: str) -> dict[str, Any]:
        required = {"requiredDuringSchedulingIgnoredDuringExecution": [term(**match)]}
        return {"affinity": {kind: required}}

    ranks = [f"rank-{i}" for i in range(3)]
    lab = {names.LABEL_GROUP: "ranks", "app": "mpi"}
    ann = {names.ANNOTATION_GROUP_SIZE: "3"}
    for p in ranks:
        gated_pod(suite, p, labels=lab, annotations=ann, spec=rule("podAntiAffinity", app="mpi"))
    bound = suite.wait_bound(*ranks, timeout=60)
    assert sorted(bound.values()) == sorted(nodes), bound

    gated_pod(suite, "db", labels={"app": "db"})
    db_node = suite.wait_bound("db", timeout=60)["db"]
    gated_pod(suite, "near", spec=rule("podAffinity", app="db"))
    gated_pod(suite, "away", spec=rule("podAntiAffinity", app="db"))
    placed = suite.wait_bound("near", "away", timeout=60)
    assert placed["near"] == db_node and placed["away"] != db_node, (db_node, placed)
    for p, node in {**bound, **placed}.items():
        assert_released_to(suite.get(p), node)
    assert_none_refused(suite)


def test_pod_affinity_picks_namespaces_by_their_labels(suite: Suite) -> None:
    """A pod drawn to a db in the namespaces labelled with the suite's tier (the term
    lists another namespace too) goes to the db's node; one kept off it by the same
    selector goes elsewhere. The queue reads the namespace's labels as kube-scheduler
    does; it refuses neither."""
    nodes = suite.add_nodes(3, cpu="4")
    tier = {"fluence-e2e-tier": suite.id}
    suite.core.patch_namespace(suite.ns, {"metadata": {"labels": tier}})
    pin = {"nodeSelector": {SUITE_LABEL: suite.id, names.LABEL_HOSTNAME: nodes[2]}}
    gated_pod(suite, "db", labels={"app": "db"}, spec=pin)
    assert suite.wait_bound("db", timeout=60) == {"db": nodes[2]}

    def rule(kind: str) -> dict[str, Any]:
        term = {
            "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaces": [f"{suite.ns}-elsewhere"],
            "namespaceSelector": {"matchLabels": tier},
            "topologyKey": names.LABEL_HOSTNAME,
        }
        return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}

    gated_pod(suite, "near", spec=rule("podAffinity"))
    gated_pod(suite, "away", spec=rule("podAntiAffinity"))
    placed = suite.wait_bound("near", "away", timeout=60)
    assert placed["near"] == nodes[2] and placed["away"] != nodes[2], placed
    for p, node in placed.items():
        assert_released_to(suite.get(p), node)
    assert_none_refused(suite)


def test_pods_spread_per_node_are_released_evenly(suite: Suite) -> None:
    """Two web pods run on the first node; four more, spread per node with maxSkew 1
    (DoNotSchedule), are released two to each of the other nodes, which kube-scheduler's
    own PodTopologySpread would have done, and it refuses none of them."""
    nodes = suite.add_nodes(3, cpu="4")
    web = {"app": "web"}
    for i in range(2):
        pin = {"nodeSelector": {SUITE_LABEL: suite.id, names.LABEL_HOSTNAME: nodes[0]}}
        gated_pod(suite, f"first-{i}", labels=web, spec=pin)
    assert set(suite.wait_bound("first-0", "first-1", timeout=60).values()) == {nodes[0]}
    spread = spread_over(names.LABEL_HOSTNAME, web)
    spread_pods = [f"web-{i}" for i in range(4)]
    for p in spread_pods:
        gated_pod(suite, p, labels=web, spec=spread)
    placed = suite.wait_bound(*spread_pods, timeout=60)
    assert sorted(Counter(placed.values()).items()) == [(nodes[1], 2), (nodes[2], 2)], placed
    assert_none_refused(suite)


def test_a_gang_spread_per_node_with_more_members_than_nodes_is_released_evenly(
    suite: Suite,
) -> None:
    """Seven members of a gang spread per node with maxSkew 1 (DoNotSchedule) on three
    nodes: released 3, 2 and 2, as kube-scheduler's own PodTopologySpread allows, and it
    refuses none of them."""
    nodes = suite.add_nodes(3, cpu="4")
    lab = {names.LABEL_GROUP: "wide", "app": "wide"}
    ann = {names.ANNOTATION_GROUP_SIZE: "7"}
    spread = spread_over(names.LABEL_HOSTNAME, {"app": "wide"})
    members = [f"wide-{i}" for i in range(7)]
    for p in members:
        gated_pod(suite, p, labels=lab, annotations=ann, spec=spread)
    placed = suite.wait_bound(*members, timeout=60)
    assert sorted(Counter(placed.values()).values()) == [2, 2, 3], placed
    assert set(placed.values()) == set(nodes)
    assert_none_refused(suite)


def test_a_gang_spread_over_racks_is_dealt_out_evenly(suite: Suite) -> None:
    """Six one-cpu members of a gang spread over three racks of two 4-cpu nodes (maxSkew
    1, DoNotSchedule): packed, they would fill one rack and kube-scheduler would refuse
    most; the queue deals two to each rack, and it refuses none of them."""
    racks = suite.add_racks("a", "b", "c", per_rack=2)
    rack_of = {n: r for r, made in racks.items() for n in made}
    lab = {names.LABEL_GROUP: "racked", "app": "racked"}
    ann = {names.ANNOTATION_GROUP_SIZE: "6"}
    spread = spread_over(RACK_KEY, {"app": "racked"})
    members = [f"racked-{i}" for i in range(6)]
    for p in members:
        gated_pod(suite, p, labels=lab, annotations=ann, spec=spread)
    placed = suite.wait_bound(*members, timeout=60)
    assert Counter(rack_of[n] for n in placed.values()) == {"a": 2, "b": 2, "c": 2}, placed
    assert_none_refused(suite)


def test_a_gang_spread_over_racks_is_dealt_round_a_rack_with_little_room(
    suite: Suite,
) -> None:
    """Rack a's nodes are nearly full (one cpu free in all); four one-cpu members spread
    over three racks (maxSkew 1): dealt by count, rack a would get two of them and the
    gang would wait; dealt by room it gets one, the others 2 + 1, and kube-scheduler
    refuses none."""
    racks = suite.add_racks("a", "b", "c", per_rack=2)
    rack_of = {n: r for r, made in racks.items() for n in made}
    for name, node, cpu in (("fill-0", racks["a"][0], "4"), ("fill-1", racks["a"][1], "3")):
        gated_pod(suite, name, cpu, spec={"nodeSelector": {names.LABEL_HOSTNAME: node}})
    suite.wait_bound("fill-0", "fill-1", timeout=60)
    lab = {names.LABEL_GROUP: "roomy", "app": "roomy"}
    ann = {names.ANNOTATION_GROUP_SIZE: "4"}
    spread = spread_over(RACK_KEY, {"app": "roomy"})
    members = [f"roomy-{i}" for i in range(4)]
    for p in members:
        gated_pod(suite, p, labels=lab, annotations=ann, spec=spread)
    placed = suite.wait_bound(*members, timeout=60)
    on = Counter(rack_of[n] for n in placed.values())
    assert on["a"] == 1 and sorted(on.values()) == [1, 1, 2], placed
    assert_none_refused(suite)


def test_gang_members_kept_apart_per_rack_go_to_distinct_racks(suite: Suite) -> None:
    """Three members whose required anti-affinity keeps them out of each other's rack,
    three racks of two nodes: packed, they would share a rack and kube-scheduler would
    refuse two; each is dealt a rack of its own, and none is refused."""
    racks = suite.add_racks("a", "b", "c", per_rack=2)
    rack_of = {n: r for r, made in racks.items() for n in made}
    lab = {names.LABEL_GROUP: "apart", "app": "apart"}
    ann = {names.ANNOTATION_GROUP_SIZE: "3"}
    term = {"labelSelector": {"matchLabels": {"app": "apart"}}, "topologyKey": RACK_KEY}
    rule = {"affinity": {"podAntiAffinity": {REQUIRED: [term]}}}
    members = [f"apart-{i}" for i in range(3)]
    for p in members:
        gated_pod(suite, p, labels=lab, annotations=ann, spec=rule)
    placed = suite.wait_bound(*members, timeout=60)
    assert sorted(rack_of[n] for n in placed.values()) == ["a", "b", "c"], placed
    assert_none_refused(suite)


def test_requests_the_graph_does_not_hold_are_shared_out_per_node(suite: Suite) -> None:
    """Three nodes with two dongles each (an extended resource the graph does not hold);
    a gang of five half-cpu members asking one dongle each fits any node by cpu, but
    kube-scheduler's NodeResourcesFit takes at most two on a node: released 2, 2 and 1,
    and it refuses none of them."""
    nodes = suite.add_nodes(3, cpu="4", extra={"example.com/dongle": "2"})
    lab = {names.LABEL_GROUP: "dongles"}
    ann = {names.ANNOTATION_GROUP_SIZE: "5"}
    members = [f"dongle-{i}" for i in range(5)]
    for p in members:
        body = gated_pod(
            suite, p, cpu="500m", labels=lab, annotations=ann, extra={"example.com/dongle": "1"}
        )
        assert body["spec"]["containers"][0]["resources"]["requests"]["example.com/dongle"] == "1"
    placed = suite.wait_bound(*members, timeout=60)
    assert sorted(Counter(placed.values()).values()) == [1, 2, 2], placed
    assert set(placed.values()) == set(nodes)
    assert_none_refused(suite)


def test_pods_of_a_volume_one_node_reaches_are_released_to_that_node(suite: Suite) -> None:
    """A local PersistentVolume reachable from one of three nodes, bound to a claim: three
    gated pods using the claim are each released to that node (kube-scheduler's
    VolumeBinding refuses any other), and it refuses none of them."""
    nodes = suite.add_nodes(3, cpu="4")
    pv, pvc = f"scratch-{suite.id}", "scratch"
    source = {"local": {"path": "/mnt/scratch"}}
    suite.core.create_persistent_volume(
        persistent_volume(pv, source, claim=(suite.ns, pvc), node=nodes[1])
    )
    try:
        claim_bound_to(suite, pvc, pv)
        users = [f"user-{i}" for i in range(3)]
        volume = {"volumes": [{"name": "scratch", "persistentVolumeClaim": {"claimName": pvc}}]}
        for p in users:
            gated_pod(suite, p, spec=volume)
        placed = suite.wait_bound(*users, timeout=60)
        assert set(placed.values()) == {nodes[1]}, placed
        for p in users:
            assert_released_to(suite.get(p), nodes[1])
        assert_none_refused(suite)
    finally:
        with contextlib.suppress(ApiException):
            suite.core.delete_persistent_volume(pv)


def test_a_pod_whose_read_write_once_pod_claim_is_in_use_waits_for_its_user(
    suite: Suite,
) -> None:
    """A claim only one pod at a time may use (ReadWriteOncePod), bound: the first pod
    using it runs; the second waits in the queue and says why (kube-scheduler would
    refuse it everywhere) until the first is gone, then is released and runs."""
    suite.add_nodes(2, cpu="4")
    pv = f"solo-{suite.id}"
    source = {"hostPath": {"path": f"/tmp/{pv}"}}
    suite.core.create_persistent_volume(
        persistent_volume(pv, source, mode="ReadWriteOncePod", claim=(suite.ns, "solo"))
    )
    try:
        claim_bound_to(suite, "solo", pv, "ReadWriteOncePod")
        uses = {"volumes": [{"name": "solo", "persistentVolumeClaim": {"claimName": "solo"}}]}
        gated_pod(suite, "first", spec=uses)
        suite.wait_bound("first", timeout=60)
        gated_pod(suite, "second", spec=uses)
        wait_for(
            partial(condition_says, suite, "second", "claim solo is ReadWriteOncePod"),
            30,
            "the second pod to say why it waits",
            partial(suite.describe, "second"),
        )
        assert held_back(suite, "second")
        suite.delete("first")
        placed = suite.wait_bound("second", timeout=60)
        assert_released_to(suite.get("second"), placed["second"])
        assert_none_refused(suite)
    finally:
        with contextlib.suppress(ApiException):
            suite.core.delete_persistent_volume(pv)


def persistent_volume(
    name: str,
    source: dict[str, Any],
    *,
    storage_class: str = "",
    mode: str = "ReadWriteOnce",
    claim: tuple[str, str] | None = None,
    node: str = "",
) -> dict[str, Any]:
    """A 1Gi PersistentVolume served by ``source``, made for ``claim`` (namespace, name)
    if given, reachable only from ``node`` if given."""
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": [mode],
        "storageClassName": storage_class,
        **source,
    }
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    if node:
        reach = {"key": names.LABEL_HOSTNAME, "operator": "In", "values": [node]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [reach]}]}}
    return {"metadata": {"name": name}, "spec": spec}


def claim_bound_to(suite: Suite, name: str, volume: str, mode: str = "ReadWriteOnce") -> None:
    """Create claim ``name`` for the volume made for it, and wait until it is bound."""
    suite.core.create_namespaced_persistent_volume_claim(
        suite.ns,
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": [mode],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    def bound() -> bool:
        claim = suite.core.read_namespaced_persistent_volume_claim(name, suite.ns)
        return bool(claim.status.phase == "Bound")

    wait_for(bound, 60, f"claim {name} to be bound to its volume")


def test_a_pod_whose_ephemeral_claim_another_owns_waits_until_it_is_its_own(
    suite: Suite,
) -> None:
    """A claim already carries the name of a pod's generic ephemeral volume claim, made by
    someone else: kube-scheduler would refuse the pod everywhere, so the queue keeps it
    and says which claim. Once that claim is deleted, the ephemeral volume controller makes
    the pod's own, the volume binder binds it to a free volume, and the pod is released
    and bound; kube-scheduler refuses nothing."""
    suite.add_nodes(2, cpu="4")
    theirs, mine = f"theirs-{suite.id}", f"mine-{suite.id}"
    for pv, claim in ((theirs, (suite.ns, "eph-scratch")), (mine, None)):
        source = {"hostPath": {"path": f"/tmp/{pv}"}}
        suite.core.create_persistent_volume(persistent_volume(pv, source, claim=claim))
    try:
        # The other claim is bound (to a volume made for it): only its owner is wrong.
        claim_bound_to(suite, "eph-scratch", theirs)
        template = {
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "resources": {"requests": {"storage": "1Gi"}},
            }
        }
        ephemeral = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}}
        gated_pod(suite, "eph", spec={"volumes": [ephemeral]})
        wait_for(
            partial(condition_says, suite, "eph", "was not made for it"),
            30,
            "the pod to say why it waits",
            partial(suite.describe, "eph"),
        )
        assert held_back(suite, "eph")
        suite.core.delete_namespaced_persistent_volume_claim("eph-scratch", suite.ns)
        # The protection controller, which lifts a claim's finalizer once no pod uses it,
        # does not run here (testbed.cluster.CONTROLLERS): lift it as it would.
        suite.core.patch_namespaced_persistent_volume_claim(
            "eph-scratch", suite.ns, {"metadata": {"finalizers": None}}
        )
        placed = suite.wait_bound("eph", timeout=90)
        assert_released_to(suite.get("eph"), placed["eph"])
        claim = suite.core.read_namespaced_persistent_volume_claim("eph-scratch", suite.ns)
        assert [o.name for o in claim.metadata.owner_references or []] == ["eph"]
        assert_none_refused(suite)
    finally:
        for pv in (theirs, mine):
            with contextlib.suppress(ApiException):
                suite.core.delete_persistent_volume(pv)


def local_volume(name: str, node: str, storage_class: str) -> dict[str, Any]:
    """A local PersistentVolume of ``storage_class`` that only ``node`` reaches."""
    return persistent_volume(
        name, {"local": {"path": f"/mnt/{name}"}}, storage_class=storage_class, node=node
    )


def test_gang_members_with_device_claims_go_where_free_devices_are(suite: Suite) -> None:
    """Three nodes; a driver publishes one device on each of the last two, and a running
    pod's claim holds the second's. A gang of two one-cpu pods, each with a claim for
    one device, fits any node by cpu (Fluxion would pack them), but kube-scheduler's
    DynamicResources filter takes each only where a free device is: the gang waits,
    saying why, until the running pod is gone, then is released one a node to the last
    two, kube-scheduler allocates the claims there and refuses none. A pod whose claim
    does not exist yet waits and says so."""
    nodes = suite.add_nodes(3, cpu="4")
    dra = ResourceV1Api(suite.core.api_client)
    with devices_published(suite, nodes=nodes[1:]):
        members = ["dev-0", "dev-1"]
        for claim in ("held", *members):
            body: Any = device_claim(suite, claim)
            dra.create_namespaced_resource_claim(suite.ns, body)
        # Without the gate: kube-scheduler allocates its claim on the node it is sent to.
        holder = {"name": "d", "resourceClaimName": "held"}
        pin = {"kubernetes.io/hostname": nodes[1]}
        suite.pod("holder", memory="64Mi", spec={"nodeSelector": pin, "resourceClaims": [holder]})
        assert suite.wait_bound("holder", timeout=60) == {"holder": nodes[1]}
        lab = {names.LABEL_GROUP: "devices"}
        ann = {names.ANNOTATION_GROUP_SIZE: "2"}
        for m in members:
            spec = {"resourceClaims": [{"name": "d", "resourceClaimName": m}]}
            gated_pod(suite, m, spec=spec, labels=lab, annotations=ann)
        absent = {"resourceClaims": [{"name": "d", "resourceClaimName": "absent"}]}
        gated_pod(suite, "unclaimed", spec=absent)
        for pod, text in (
            (members[0], "its devices rule out"),
            ("unclaimed", "waiting for ResourceClaim absent to exist"),
        ):
            wait_for(
                partial(condition_says, suite, pod, text),
                30,
                f"{pod} to say why it waits",
                lambda pod=pod: suite.describe(pod),
            )
        assert all(held_back(suite, m) for m in members)
        suite.delete("holder")
        placed = suite.wait_bound(*members, timeout=60)
        assert sorted(placed.values()) == nodes[1:], placed
        for m in members:
            assert_released_to(suite.get(m), placed[m])
            claim = dra.read_namespaced_resource_claim(m, suite.ns)
            assert claim.status is not None and claim.status.allocation is not None
        assert held_back(suite, "unclaimed")
        assert_none_refused(suite)


def test_a_pod_whose_claim_is_made_from_a_template_goes_where_its_device_is(
    suite: Suite,
) -> None:
    """A gated pod whose claim comes from a ResourceClaimTemplate: kube-controller-manager
    makes the claim for it while it waits, and the queue releases it to the one node with
    a device, where kube-scheduler allocates the claim; it refuses none."""
    nodes = suite.add_nodes(3, cpu="4")
    dra = ResourceV1Api(suite.core.api_client)
    template: Any = {"metadata": {"name": "gpu"}, "spec": {"spec": device_claim(suite, "")["spec"]}}
    with devices_published(suite, nodes=nodes[1:2]):
        dra.create_namespaced_resource_claim_template(suite.ns, template)
        spec = {"resourceClaims": [{"name": "d", "resourceClaimTemplateName": "gpu"}]}
        gated_pod(suite, "made", spec=spec)
        assert suite.wait_bound("made", timeout=60) == {"made": nodes[1]}
        assert_released_to(suite.get("made"), nodes[1])
        (status,) = suite.get("made")["status"]["resourceClaimStatuses"]
        claim = dra.read_namespaced_resource_claim(status["resourceClaimName"], suite.ns)
        assert claim.status is not None and claim.status.allocation is not None
        assert_none_refused(suite)


def test_a_claims_devices_that_must_share_an_attribute_go_where_they_agree(suite: Suite) -> None:
    """Two nodes with two devices each: the first's both on NUMA node 1, the second's
    (which a match tries first) on 0 and 1. A gated pod whose claim asks two devices
    that must share ``numa`` (a ``matchAttribute`` constraint) fits either node by
    count, but kube-scheduler allocates it only on the first: the queue releases it
    there, kube-scheduler allocates both devices, and refuses none."""
    nodes = suite.add_nodes(2, cpu="4")
    dra = ResourceV1Api(suite.core.api_client)

    def numa(name: str, n: int) -> dict[str, Any]:
        return {"name": name, "attributes": {"numa": {"int": n}}}

    on = {
        nodes[0]: [numa("dev-0", 1), numa("dev-1", 1)],
        nodes[1]: [numa("dev-0", 0), numa("dev-1", 1)],
    }
    with devices_published(suite, nodes=on):
        claim = device_claim(suite, "pair")
        claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
        claim["spec"]["devices"]["constraints"] = [
            {"matchAttribute": f"e2e-{suite.id}.fluence.example/numa"}
        ]
        body: Any = claim
        dra.create_namespaced_resource_claim(suite.ns, body)
        gated_pod(
            suite, "pair", spec={"resourceClaims": [{"name": "d", "resourceClaimName": "pair"}]}
        )
        assert suite.wait_bound("pair", timeout=60) == {"pair": nodes[0]}
        assert_released_to(suite.get("pair"), nodes[0])
        made = dra.read_namespaced_resource_claim("pair", suite.ns)
        assert made.status is not None and made.status.allocation is not None
        assert len(made.status.allocation.devices.results) == 2
        assert_none_refused(suite)


def test_an_extended_resource_a_device_class_backs_goes_where_its_device_is(
    suite: Suite,
) -> None:
    """No node's allocatable has the extended resource; a DeviceClass backs it, and its one
    device is on the third node. A pod asking one is released there (kube-scheduler makes
    a claim for it and allocates that device); a second waits, saying why, until the first
    is gone, and is then released there too; kube-scheduler refuses neither."""
    nodes = suite.add_nodes(3, cpu="4")
    resource = f"e2e-{suite.id}.fluence.example/gpu"
    with devices_published(suite, nodes=nodes[2:], extended=resource):
        gated_pod(suite, "first", extra={resource: "1"})
        assert suite.wait_bound("first", timeout=60) == {"first": nodes[2]}
        assert_released_to(suite.get("first"), nodes[2])
        gated_pod(suite, "second", extra={resource: "1"})
        wait_for(
            partial(condition_says, suite, "second", "its devices rule out"),
            30,
            "the second pod to say why it waits",
            lambda: suite.describe("second"),
        )
        assert held_back(suite, "second")
        suite.delete("first")
        assert suite.wait_bound("second", timeout=60) == {"second": nodes[2]}
        assert_released_to(suite.get("second"), nodes[2])
        assert_none_refused(suite)


def test_gang_members_csi_volumes_stay_within_each_nodes_attach_limit(suite: Suite) -> None:
    """Three nodes whose CSINode lets a CSI driver attach one volume each; a gang of three
    one-cpu pods, each with a claim bound to a volume of that driver. By cpu they fit on
    one node (and Fluxion packs them), but kube-scheduler's NodeVolumeLimits takes one
    per node: the queue releases them one a node and kube-scheduler refuses none."""
    nodes = suite.add_nodes(3, cpu="4")
    driver = f"e2e-{suite.id}.csi.example.com"
    storage = StorageV1Api(suite.core.api_client)
    for node in nodes:
        allowed = {"name": driver, "nodeID": node, "allocatable": {"count": 1}}
        storage.create_csi_node({"metadata": {"name": node}, "spec": {"drivers": [allowed]}})
    members = [f"attach-{i}" for i in range(3)]
    volumes = [f"attach-{suite.id}-{i}" for i in range(3)]
    try:
        for i, pv in enumerate(volumes):
            source = {"csi": {"driver": driver, "volumeHandle": pv}}
            suite.core.create_persistent_volume(
                persistent_volume(pv, source, claim=(suite.ns, f"vol-{i}"))
            )
            claim_bound_to(suite, f"vol-{i}", pv)
        lab = {names.LABEL_GROUP: "attach"}
        ann = {names.ANNOTATION_GROUP_SIZE: "3"}
        for i, pod in enumerate(members):
            spec = {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": f"vol-{i}"}}]}
            gated_pod(suite, pod, spec=spec, labels=lab, annotations=ann)
        placed = suite.wait_bound(*members, timeout=90)
        assert sorted(placed.values()) == sorted(nodes), placed
        for pod in members:
            assert_released_to(suite.get(pod), placed[pod])
        assert_none_refused(suite)
    finally:
        for pv in volumes:
            with contextlib.suppress(ApiException):
                suite.core.delete_persistent_volume(pv)
        for node in nodes:
            with contextlib.suppress(ApiException):
                storage.delete_csi_node(node)


def test_a_pod_whose_volume_is_labelled_with_a_zone_goes_to_that_zone(suite: Suite) -> None:
    """Three zones of two nodes; a claim bound to a volume labelled with the last zone
    (kube-scheduler's VolumeZone takes the pod only to nodes of that zone). A gang of two
    pods sharing the claim fits anywhere by cpu: the queue releases both to that zone,
    and kube-scheduler refuses neither."""
    zones = suite.add_racks("za", "zb", "zc", per_rack=2, key=names.LABEL_ZONE)
    pv = f"zoned-{suite.id}"
    volume = persistent_volume(
        pv, {"hostPath": {"path": f"/tmp/{pv}"}}, mode="ReadWriteMany", claim=(suite.ns, "zoned")
    )
    volume["metadata"]["labels"] = {names.LABEL_ZONE: f"{suite.id}-zc"}
    suite.core.create_persistent_volume(volume)
    try:
        claim_bound_to(suite, "zoned", pv, "ReadWriteMany")
        uses = {"volumes": [{"name": "z", "persistentVolumeClaim": {"claimName": "zoned"}}]}
        lab = {names.LABEL_GROUP: "zoned"}
        ann = {names.ANNOTATION_GROUP_SIZE: "2"}
        for pod in ("zoned-0", "zoned-1"):
            gated_pod(suite, pod, spec=uses, labels=lab, annotations=ann)
        placed = suite.wait_bound("zoned-0", "zoned-1", timeout=60)
        assert set(placed.values()) <= set(zones["zc"]), (placed, zones)
        for pod, node in placed.items():
            assert_released_to(suite.get(pod), node)
        assert_none_refused(suite)
    finally:
        with contextlib.suppress(ApiException):
            suite.core.delete_persistent_volume(pv)


def test_gang_claims_waiting_for_their_first_consumer_each_get_a_local_volume(
    suite: Suite,
) -> None:
    """A class without a provisioner that binds on first use (as local disks are run);
    local volumes: one on node 0, two on node 2, none on node 1. A gang of three gated
    pods with a claim each fits any node by cpu, but only one-and-two on nodes 0 and 2
    gives each claim a volume of its own: the queue releases it so, and kube-scheduler
    binds each claim to a volume of its pod's node and refuses none."""
    nodes = suite.add_nodes(3, cpu="4")
    cls = f"local-{suite.id}"
    storage = StorageV1Api(suite.core.api_client)
    storage.create_storage_class(
        {
            "metadata": {"name": cls},
            "provisioner": names.NO_PROVISIONER,
            "volumeBindingMode": names.WAIT_FOR_FIRST_CONSUMER,
        }
    )
    volumes = {f"{cls}-0": nodes[0], f"{cls}-2a": nodes[2], f"{cls}-2b": nodes[2]}
    try:
        for name, node in volumes.items():
            suite.core.create_persistent_volume(local_volume(name, node, cls))
        lab = {names.LABEL_GROUP: "disks"}
        ann = {names.ANNOTATION_GROUP_SIZE: "3"}
        members = [f"disk-{i}" for i in range(3)]
        for i, pod in enumerate(members):
            suite.core.create_namespaced_persistent_volume_claim(
                suite.ns,
                {
                    "metadata": {"name": f"data-{i}"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": cls,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                },
            )
            claim = {"persistentVolumeClaim": {"claimName": f"data-{i}"}}
            spec = {"volumes": [{"name": "data", **claim}]}
            gated_pod(suite, pod, spec=spec, labels=lab, annotations=ann)
        placed = suite.wait_bound(*members, timeout=90)
        assert sorted(placed.values()) == sorted([nodes[0], nodes[2], nodes[2]]), placed
        for i, pod in enumerate(members):
            assert_released_to(suite.get(pod), placed[pod])

            def bound(i: int = i) -> str:
                c = suite.core.read_namespaced_persistent_volume_claim(f"data-{i}", suite.ns)
                return str(c.spec.volume_name or "") if c.status.phase == "Bound" else ""

            wait_for(bound, 60, f"claim data-{i} to be bound")
            assert volumes[bound()] == placed[pod], (pod, bound(), placed)
        assert_none_refused(suite)
    finally:
        for name in volumes:
            with contextlib.suppress(ApiException):
                suite.core.delete_persistent_volume(name)
        with contextlib.suppress(ApiException):
            storage.delete_storage_class(cls)
