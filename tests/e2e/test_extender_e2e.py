"""fluence-extender as a real process behind a real kube-scheduler, on the local control plane.

Each test gets its own fake nodes (labelled with the test's id) and pods that
select them, so tests sharing the session's control plane do not see each
other's capacity.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import urllib3
from kubernetes.client import (
    ApiClient,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    SchedulingV1Api,
)
from kubernetes.client.exceptions import ApiException

from fluence import names
from fluence.pods import cpu_millicores
from scheduler_extender.requeue import api_condition_writer
from testbed import ControlPlane, SchedulerHandle
from testbed.kwok import ANNOTATION_EXIT_AFTER, ANNOTATION_EXIT_CODE
from testbed.processes import free_port
from tests.support.extender import SUITE_LABEL, create_podgroup, fluence_scheduler, pod_body

SCRIPT = Path(sys.executable).with_name("fluence-extender")
RESOURCES = Path(__file__).resolve().parents[2] / "examples" / "resources.yaml"
QPU = names.resource_name("qpu")


def record_key(directory: Path) -> Path:
    """The Secret every extender of a test run shares, as mounted in the scheduler pod."""
    path = directory / "record-key"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
    return path


RACK_KEY = "topology.kubernetes.io/rack"


class Extender:
    """A ``fluence-extender`` child process; always stopped by the fixture."""

    def __init__(self, workdir: Path, kubeconfig: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "extender.log"
        self.env = {
            **os.environ,
            "FLUENCE_BIND": f"127.0.0.1:{self.port}",
            "FLUENCE_KUBECONFIG": str(kubeconfig),
            "FLUENCE_RESOURCES": str(RESOURCES),
            "FLUENCE_RECORD_KEY_FILE": str(record_key(workdir.parent)),
            "FLUENCE_UNBOUND_TIMEOUT": "60",
            "FLUENCE_EXPIRE_INTERVAL": "1",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(SCRIPT)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        if wait:
            wait_for(self.ready, 60, "the extender to become ready", self.log_tail)

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"fluence-extender exited: {self.log_tail()}")
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def state(self) -> dict[str, Any]:
        doc: dict[str, Any] = httpx.get(self.url + "/state", timeout=10).json()
        return doc

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


def wait_for(
    probe: Callable[[], Any], timeout: float, what: str, detail: Callable[[], str] = lambda: ""
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}. {detail()}")
        time.sleep(0.2)


class Stack:
    def __init__(self, cp: ControlPlane, extender: Extender, scheduler: SchedulerHandle) -> None:
        self.cp = cp
        self.extender = extender
        self.scheduler = scheduler


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("fluence-extender")
    extender = Extender(workdir, control_plane.kubeconfig)
    with fluence_scheduler(control_plane, extender) as scheduler:
        yield Stack(control_plane, extender, scheduler)


class Suite:
    """One test's nodes and helpers to create pods that land only on them."""

    def __init__(self, stack: Stack, kube: ApiClient, namespace: str) -> None:
        self.stack = stack
        self.core = CoreV1Api(kube)
        self.custom = CustomObjectsApi(kube)
        self.ns = namespace
        self.id = uuid.uuid4().hex[:6]
        self.nodes: list[str] = []

    def add_nodes(
        self,
        count: int,
        cpu: str = "4",
        memory: str = "8Gi",
        qpu: bool = False,
        extra: dict[str, str] | None = None,
    ) -> list[str]:
        """``extra``: more capacity (extended resources, ephemeral storage)."""
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})}
        if qpu:
            capacity[QPU] = "1000"
        made = self.stack.cp.add_nodes(
            count, prefix=f"f{self.id}-", capacity=capacity, labels={SUITE_LABEL: self.id}
        )
        self.nodes += made
        wait_for(
            lambda: all(n in self.stack.extender.state()["nodes"] for n in made),
            20,
            "the extender to see the new nodes",
        )
        return made

    def add_racks(
        self, *racks: str, per_rack: int = 2, key: str = RACK_KEY
    ) -> dict[str, list[str]]:
        """``per_rack`` nodes of 4 cpu labelled ``key`` with each rack (``f<id>-<rack>-<i>``;
        the label's value ``<id>-<rack>``)."""
        made: dict[str, list[str]] = {}
        for rack in racks:
            made[rack] = self.stack.cp.add_nodes(
                per_rack,
                prefix=f"f{self.id}-{rack}-",
                capacity={"cpu": "4", "memory": "8Gi", "pods": "110"},
                labels={SUITE_LABEL: self.id, key: f"{self.id}-{rack}"},
            )
            self.nodes += made[rack]
        wait_for(
            lambda: all(n in self.stack.extender.state()["nodes"] for n in self.nodes),
            20,
            "the extender to see the racks",
        )
        return made

    def pod(
        self,
        name: str,
        cpu: str = "1",
        memory: str = "512Mi",
        *,
        group: str | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
        spec: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        requests = {"cpu": cpu, "memory": memory, **(extra or {})}
        metadata = {"labels": labels or {}, "annotations": annotations or {}}
        body = pod_body(name, requests, self.id, group=group, metadata=metadata)
        body["spec"].update(spec or {})
        out: dict[str, Any] = self.core.api_client.sanitize_for_serialization(
            self.core.create_namespaced_pod(self.ns, body)
        )
        return out

    def podgroup(
        self, name: str, min_count: int, owners: list[dict[str, Any]] | None = None, **spec: Any
    ) -> None:
        create_podgroup(self.custom, self.ns, name, min_count, owners=owners, **spec)

    def get(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.core.api_client.sanitize_for_serialization(
            self.core.read_namespaced_pod(name, self.ns)
        )
        return out

    def node_of(self, name: str) -> str:
        return str(self.get(name)["spec"].get("nodeName") or "")

    def wait_bound(self, *pods: str, timeout: float = 60) -> dict[str, str]:
        def probe() -> dict[str, str] | None:
            got = {p: self.node_of(p) for p in pods}
            return got if all(got.values()) else None

        result: dict[str, str] = wait_for(
            probe, timeout, f"pods {pods} to be bound", lambda: self.describe(*pods)
        )
        return result

    def describe(self, *pods: str) -> str:
        out = []
        for p in pods:
            pod = self.get(p)
            conds = (pod.get("status") or {}).get("conditions") or []
            out.append(f"{p}: node={pod['spec'].get('nodeName')} conditions={conds}")
        queue = [w for w in self.stack.extender.state()["queue"] if w["group"].startswith(self.ns)]
        scheduler_log = self.stack.scheduler.process.log_tail(3000).splitlines()
        mine = [line for line in scheduler_log if self.ns in line][-15:]
        return (
            " | ".join(out)
            + f" | queue: {queue} | kube-scheduler: {mine}"
            + " | extender log: "
            + self.stack.extender.log_tail()[-1500:]
        )

    def gang_gated(self, *pods: str) -> bool:
        """kube-scheduler's gang plugin holds each of ``pods`` before scheduling it (its log
        says so; it writes no condition): a short gang was looked at and kept back."""
        log = self.stack.scheduler.process.log_tail(20000)
        return all(f'pod="{self.ns}/{p}" plugin="GangScheduling"' in log for p in pods)

    def unschedulable_message(self, name: str) -> str:
        conds = (self.get(name).get("status") or {}).get("conditions") or []
        for c in conds:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return str(c.get("message") or "")
        return ""

    def delete(self, *pods: str) -> None:
        for p in pods:
            self.core.delete_namespaced_pod(p, self.ns, grace_period_seconds=0)

    def state_nodes(self) -> dict[str, Any]:
        nodes = self.stack.extender.state()["nodes"]
        return {n: nodes[n] for n in self.nodes if n in nodes}

    def state_pods(self) -> dict[str, Any]:
        pods = self.stack.extender.state()["pods"]
        return {k: v for k, v in pods.items() if k.startswith(self.ns + "/")}

    def cleanup(self) -> None:
        for n in self.nodes:
            self.stack.cp.delete_node(n)

    def __enter__(self) -> Suite:
        return self

    def __exit__(self, *_: object) -> None:
        self.cleanup()


@pytest.fixture
def suite(stack: Stack, kube: ApiClient, namespace: str) -> Iterator[Suite]:
    with Suite(stack, kube, namespace) as s:
        yield s


def test_single_pod_is_bound_with_its_allocation_record(suite: Suite) -> None:
    suite.add_nodes(2)
    suite.pod("solo", cpu="2")
    node = suite.wait_bound("solo")["solo"]
    pod = suite.get("solo")
    record = json.loads(pod["metadata"]["annotations"][names.ANNOTATION_ALLOCATION])
    assert record["node"] == node and record["amounts"]["core"] == 2000
    assert record["group"] == f"{suite.ns}/solo"
    suite.stack.cp.kwok.wait_for_phase(suite.ns, "solo", "Running")
    assert suite.state_pods()[f"{suite.ns}/solo"]["node"] == node
    assert suite.state_nodes()[node]["core"]["allocated"] == 2000
    lines = httpx.get(suite.stack.extender.url + "/metrics/", timeout=10).text.splitlines()
    for metric, label in (
        ("fluence_extender_request_seconds_count", 'verb="filter"'),
        ("fluence_extender_request_seconds_count", 'verb="bind"'),
        ("fluence_match_seconds_count", ""),
        ("fluence_allocations_held", 'state="committed"'),
        ("fluence_graph_utilization", 'type="core"'),
    ):
        assert any(ln.startswith(metric) and label in ln for ln in lines), (metric, label)


def test_native_podgroup_is_placed_as_a_gang_where_fluxion_chose(suite: Suite) -> None:
    suite.add_nodes(2, cpu="4")
    suite.podgroup("training", 2)
    for i in range(2):
        suite.pod(f"training-{i}", cpu="4", memory="1Gi", group="training")
    bound = suite.wait_bound("training-0", "training-1")
    assert sorted(bound.values()) == sorted(suite.nodes)
    group = suite.stack.extender.state()["groups"][f"{suite.ns}/training"]
    assert group["pods"] == {f"{suite.ns}/{p}": n for p, n in bound.items()}


def test_lowering_min_count_on_a_live_podgroup_lets_its_pods_go(suite: Suite) -> None:
    """minCount is mutable from 1.37: the extender follows the PodGroup as it changes."""
    suite.add_nodes(1, cpu="4")
    suite.podgroup("shrink", 3)
    for i in range(2):
        suite.pod(f"shrink-{i}", cpu="1", group="shrink")
    release = suite.stack.cp.release

    def lower() -> None:
        suite.custom.patch_namespaced_custom_object(
            "scheduling.k8s.io",
            release.podgroup_version,
            suite.ns,
            "podgroups",
            "shrink",
            {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
        )

    if release.minor == "1.36":  # v1alpha2's minCount is immutable: nothing changes
        with pytest.raises(ApiException) as refused:
            lower()
        assert refused.value.status == 422
        return
    # The gang is short of its quorum: kube-scheduler's gang gate holds it, nothing placed.
    wait_for(
        lambda: suite.gang_gated("shrink-0", "shrink-1"),
        30,
        "kube-scheduler's gang gate to hold both members",
        lambda: suite.describe("shrink-0", "shrink-1"),
    )
    assert suite.node_of("shrink-0") == suite.node_of("shrink-1") == ""
    lower()
    bound = suite.wait_bound("shrink-0", "shrink-1", timeout=120)
    assert set(bound.values()) == {suite.nodes[0]}


def test_label_gang_waits_for_its_quorum_then_shares_a_node(suite: Suite) -> None:
    suite.add_nodes(1, cpu="4")
    lab = {names.LABEL_GROUP: "gang3"}
    ann = {names.ANNOTATION_GROUP_SIZE: "4"}
    for i in range(3):
        suite.pod(f"gang3-{i}", cpu="1", labels=lab, annotations=ann)
    wait_for(
        lambda: "waiting for 1 more pod(s) of group" in suite.unschedulable_message("gang3-0"),
        30,
        "the quorum message",
        lambda: suite.describe("gang3-0"),
    )
    assert suite.node_of("gang3-0") == ""
    suite.pod("gang3-3", cpu="1", labels=lab, annotations=ann)
    bound = suite.wait_bound(*(f"gang3-{i}" for i in range(4)))
    assert set(bound.values()) == {suite.nodes[0]}
    assert suite.state_nodes()[suite.nodes[0]]["core"]["free"] == 0


def test_gang_that_does_not_fit_waits_with_a_reason_and_runs_when_capacity_frees(
    suite: Suite,
) -> None:
    suite.add_nodes(2, cpu="4")
    suite.pod("blocker", cpu="3")
    suite.wait_bound("blocker")
    suite.stack.cp.kwok.wait_for_phase(suite.ns, "blocker", "Running")
    suite.podgroup("big", 2)
    for i in range(2):
        suite.pod(f"big-{i}", cpu="3", group="big")
    wait_for(
        lambda: (
            "does not fit now" in suite.unschedulable_message("big-0")
            or "does not fit now" in suite.unschedulable_message("big-1")
        ),
        60,
        "a readable reason on the pending gang",
        lambda: suite.describe("big-0", "big-1"),
    )
    assert suite.node_of("big-0") == "" and suite.node_of("big-1") == ""
    suite.stack.cp.kwok.succeed(suite.ns, "blocker")
    bound = suite.wait_bound("big-0", "big-1", timeout=90)
    assert sorted(bound.values()) == sorted(suite.nodes)


def test_the_room_free_condition_makes_kube_scheduler_try_a_parked_pod_again(
    suite: Suite,
) -> None:
    """What the extender's requeuer relies on, shown with the real kube-scheduler.

    A pod the extender refused sits in kube-scheduler's unschedulable queue; the
    condition the requeuer writes on its status is a pod update, after which
    kube-scheduler asks the extender about it again at once. Merged by type, it
    leaves kube-scheduler's own PodScheduled condition in place.
    """
    suite.add_nodes(2, cpu="4")
    suite.pod("blocker", cpu="3")
    suite.wait_bound("blocker")
    # Each pod fits the free node (kube-scheduler's own filters pass it); the gang does not.
    labels, annotations = {names.LABEL_GROUP: "pair"}, {names.ANNOTATION_GROUP_SIZE: "2"}
    for name in ("parked", "partner"):
        suite.pod(name, cpu="3", labels=labels, annotations=annotations)
    wait_for(
        lambda: "does not fit now" in suite.unschedulable_message("parked"),
        60,
        "the extender to refuse the pod",
        lambda: suite.describe("parked"),
    )
    key = f'pod="{suite.ns}/parked"'

    def attempts() -> int:
        lines = suite.stack.scheduler.process.log_tail(20000).splitlines()
        return sum(1 for line in lines if "Attempting to schedule pod" in line and key in line)

    def parked() -> bool:
        before = attempts()
        time.sleep(3)
        return attempts() == before

    wait_for(parked, 60, "kube-scheduler to stop trying the pod", lambda: suite.describe("parked"))
    before = attempts()
    api_condition_writer(suite.core.api_client)(
        f"{suite.ns}/parked",
        {
            "type": names.CONDITION_ROOM_FREE,
            "status": "True",
            "reason": "GroupFitsNow",
            "message": "test",
            "lastProbeTime": datetime.now().astimezone().isoformat(timespec="seconds"),
        },
    )
    wait_for(
        lambda: attempts() > before,
        15,
        "kube-scheduler to try the pod again",
        lambda: suite.describe("parked"),
    )
    conditions = {c["type"]: c for c in suite.get("parked")["status"]["conditions"]}
    assert conditions[names.CONDITION_ROOM_FREE]["reason"] == "GroupFitsNow"
    assert conditions["PodScheduled"]["status"] == "False"
    assert suite.node_of("parked") == ""


def test_quantum_pod_gets_a_backend_annotation(suite: Suite) -> None:
    suite.add_nodes(1, qpu=True)
    suite.pod(
        "sampler",
        cpu="100m",
        extra={QPU: "1"},
        annotations={names.ANNOTATION_REQUIRE_PREFIX + "vendor": "ibm"},
    )
    suite.wait_bound("sampler")
    ann = suite.get("sampler")["metadata"]["annotations"]
    backend = ann[names.ANNOTATION_BACKEND]
    assert backend in ("ibm_fez", "ibm_marrakesh")
    assert ann[names.attr_annotation("vendor")] == "ibm"
    assert ann[names.attr_annotation("qrmi_type")] == "qiskit-runtime-service"
    state = suite.stack.extender.state()
    assert state["backends"][backend]["held"] is True
    assert state["backends"][backend]["pod"] == f"{suite.ns}/sampler"
    suite.delete("sampler")
    wait_for(
        lambda: not suite.stack.extender.state()["backends"][backend]["held"],
        20,
        "the backend to be released",
    )


def test_group_that_can_never_fit_is_unresolvable(suite: Suite) -> None:
    suite.add_nodes(1, cpu="4")
    # Each member fits the node alone (so the in-tree filters pass); together they never do.
    suite.podgroup("wide", 2)
    for i in range(2):
        suite.pod(f"wide-{i}", cpu="3", group="wide")
    wait_for(
        lambda: (
            "can never fit" in suite.unschedulable_message("wide-0")
            or "can never fit" in suite.unschedulable_message("wide-1")
        ),
        60,
        "the unresolvable reason",
        lambda: suite.describe("wide-0", "wide-1"),
    )
    assert suite.node_of("wide-0") == "" and suite.node_of("wide-1") == ""


def test_deleting_pods_returns_state_to_free(suite: Suite) -> None:
    suite.add_nodes(2)
    pods = [f"p{i}" for i in range(5)]
    for p in pods:
        suite.pod(p, cpu="1")
    suite.wait_bound(*pods)
    assert sum(n["core"]["allocated"] for n in suite.state_nodes().values()) == 5000
    suite.delete(*pods)
    wait_for(
        lambda: all(
            n["core"]["allocated"] == 0 and n["memory"]["allocated"] == 0
            for n in suite.state_nodes().values()
        ),
        30,
        "the nodes to be free again",
    )
    assert suite.state_pods() == {}


def _bound_cpu(suite: Suite) -> tuple[dict[str, int], dict[str, int]]:
    """From the API server, not the extender: millicores bound per node, and pods per
    backend, over the suite's running pods."""
    listed: dict[str, Any] = suite.core.api_client.sanitize_for_serialization(
        suite.core.list_namespaced_pod(suite.ns)
    )
    per_node: dict[str, int] = {}
    backends: dict[str, int] = {}
    for p in listed["items"]:
        node = p["spec"].get("nodeName")
        if not node or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        requests = p["spec"]["containers"][0].get("resources", {}).get("requests", {})
        per_node[node] = per_node.get(node, 0) + cpu_millicores(requests.get("cpu", "0"))
        be = (p["metadata"].get("annotations") or {}).get(names.ANNOTATION_BACKEND)
        if be and QPU in requests:
            backends[be] = backends.get(be, 0) + 1
    return per_node, backends


def _assert_no_overcommit(suite: Suite, node_cpu_m: int = 4000) -> None:
    per_node, backends = _bound_cpu(suite)
    assert all(v <= node_cpu_m for v in per_node.values()), per_node
    assert all(v <= 1 for v in backends.values()), backends


def test_restart_after_kill_rebuilds_the_same_state_and_never_double_books(
    suite: Suite,
) -> None:
    suite.add_nodes(6, cpu="4", qpu=True)
    names_: list[str] = []
    for g in range(4):
        suite.podgroup(f"g{g}", 5)
        for i in range(5):
            suite.pod(f"g{g}-{i}", cpu="1", group=f"g{g}")
            names_.append(f"g{g}-{i}")
    suite.pod("q0", cpu="100m", extra={QPU: "1"})
    names_.append("q0")
    suite.wait_bound(*names_, timeout=120)
    wait_for(
        lambda: (
            all(v["state"] == "committed" for v in suite.state_pods().values())
            and len(suite.state_pods()) == len(names_)
        ),
        30,
        "every allocation to be committed",
    )
    before = suite.stack.extender.state()
    ext = suite.stack.extender
    ext.kill(signal.SIGKILL)
    ext.start()
    after = ext.state()
    assert {n: after["nodes"][n] for n in suite.nodes} == {
        n: before["nodes"][n] for n in suite.nodes
    }
    assert suite.state_pods() == {
        k: v for k, v in before["pods"].items() if k.startswith(suite.ns + "/")
    }
    assert after["backends"] == before["backends"]
    # New work after the restart fills what is left (24 cpu - 20.2 held, in whole cpus per
    # node as the gangs left them) and never double-books.
    suite.pod("q1", cpu="100m", extra={QPU: "1"})
    suite.wait_bound("q1")
    # The room left, from what the API server has bound (a leak in the extender's own
    # accounting across the restart would show as fewer late pods bound than this).
    per_node, _ = _bound_cpu(suite)
    fits = sum((4000 - per_node.get(n, 0)) // 1000 for n in suite.nodes)
    assert 1 <= fits <= 3
    more = [f"late-{i}" for i in range(5)]
    for p in more:
        suite.pod(p, cpu="1")
    suite.pod("q2", cpu="100m", extra={QPU: "1"})
    wait_for(
        lambda: sum(bool(suite.node_of(p)) for p in more) == fits,
        60,
        f"{fits} late pods to be bound",
        lambda: suite.describe(*more),
    )
    # The others were tried and refused: a decision, not a pause, before the checks.
    wait_for(
        lambda: all(suite.node_of(p) or suite.unschedulable_message(p) for p in [*more, "q2"]),
        60,
        "the pods that cannot fit to be refused",
        lambda: suite.describe(*more, "q2"),
    )
    _assert_no_overcommit(suite)
    assert sum(bool(suite.node_of(p)) for p in more) == fits
    assert suite.node_of("q2") == "", "a third qpu pod must wait: two backends, both held"
    held = [p for p, v in suite.state_pods().items() if v["backend"]]
    assert sorted(held) == [f"{suite.ns}/q0", f"{suite.ns}/q1"]


def test_hostile_pods_in_the_api_server_do_not_stop_a_restarted_extender(suite: Suite) -> None:
    """Pods any tenant may write, running while the extender is killed and restarted: a
    non-ASCII seal, a request no node has, a record of the wrong shape. The new process
    becomes ready, accounts each as far as it can, and places other pods beside them."""
    (node,) = suite.add_nodes(1, cpu="4", qpu=True)
    elsewhere = {"nodeName": node, "schedulerName": "default-scheduler"}
    seal = names.ANNOTATION_ALLOCATION_SEAL
    hostile = {
        "bad-seal": suite.pod(
            "bad-seal", annotations={names.ANNOTATION_ALLOCATION: "{}", seal: "é"}, spec=elsewhere
        ),
        "huge": suite.pod("huge", cpu="1e18", spec=elsewhere),
        "wild": suite.pod(
            "wild",
            annotations={names.ANNOTATION_ALLOCATION: '{"group": 7}', seal: "\u202e" * 64},
            spec=elsewhere,
        ),
    }
    wait_for(
        lambda: all(suite.get(p)["status"].get("phase") == "Running" for p in hostile),
        60,
        "the hostile pods to run",
    )
    ext = suite.stack.extender
    ext.kill(signal.SIGKILL)
    ext.start()  # ready within the minute, not crash-looping
    held = suite.state_pods()
    assert held[f"{suite.ns}/bad-seal"]["state"] == "foreign"
    assert held[f"{suite.ns}/wild"]["state"] == "foreign"
    assert suite.state_nodes()[node]["core"]["allocated"] == 2000  # 1e18 is held nowhere
    # The room left (2 cpu) is placed; more than that waits.
    suite.pod("fits", cpu="2")
    suite.pod("waits", cpu="3")
    assert suite.wait_bound("fits") == {"fits": node}
    wait_for(
        lambda: (
            "Insufficient cpu" in suite.unschedulable_message("waits")
            or "does not fit now" in suite.unschedulable_message("waits")
        ),
        30,
        "the 3-cpu pod to be refused for want of room",
        lambda: suite.describe("waits"),
    )
    assert suite.node_of("waits") == ""
    reasons = {
        e.reason
        for e in suite.core.list_namespaced_event(
            suite.ns, field_selector="involvedObject.name=bad-seal"
        ).items
    }
    assert "UntrustedAllocationRecord" in reasons, reasons


def test_standby_replica_follows_the_watch_without_double_booking(
    suite: Suite, tmp_path: Path
) -> None:
    standby = Extender(tmp_path, suite.stack.cp.kubeconfig)
    try:
        standby.start()
        suite.add_nodes(2, cpu="4", qpu=True)
        suite.podgroup("ha", 3)
        pods = [f"ha-{i}" for i in range(3)]
        for p in pods:
            suite.pod(p, cpu="2", group="ha")
        suite.pod("hq", cpu="100m", extra={QPU: "1"})
        suite.wait_bound(*pods, "hq")

        def mine(doc: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in doc["pods"].items() if k.startswith(suite.ns + "/")}

        def same() -> bool:
            a, b = suite.stack.extender.state(), standby.state()
            return mine(a) == mine(b) and all(a["nodes"][n] == b["nodes"][n] for n in suite.nodes)

        wait_for(same, 20, "the standby to hold what the primary holds")
        assert all(v["state"] == "committed" for v in mine(standby.state()).values())
        suite.delete(*pods, "hq")
        wait_for(lambda: mine(standby.state()) == {}, 20, "the standby to release ended pods")
        assert not any(b["held"] for b in standby.state()["backends"].values())
    finally:
        standby.kill(signal.SIGTERM)


# ---- kill -9 in a busy cluster, restarted without waiting for readiness ---------------
# The rebuild takes seconds here (thousands of other schedulers' pods to read), and
# kube-scheduler calls the new process from its first second: every answer before the
# rebuild is done must be "retry", never a placement on a half-built graph. Afterwards
# nothing is over-committed, no backend has two holders, no gang is partial, and /state
# holds exactly the pods the API server has bound.

BALLAST = 3000
"""Pods of another scheduler, bound to a node of their own: they make the rebuild slow."""

BALLAST_BATCH = 250
"""Ballast pods deleted per call: a loaded API server answers 504 after 60 s on thousands."""


def _ballast(suite: Suite) -> None:
    (node,) = suite.stack.cp.add_nodes(
        1, prefix=f"b{suite.id}-", capacity={"cpu": "64", "memory": "64Gi", "pods": "5000"}
    )
    suite.nodes.append(node)

    def create(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"ballast-{i}",
                "labels": {
                    "fluence-e2e/ballast": "yes",
                    "fluence-e2e/ballast-batch": str(i // BALLAST_BATCH),
                },
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "busybox"}],
            },
        }
        suite.core.create_namespaced_pod(suite.ns, body)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(BALLAST)))


def _not_ready_answers(url: str) -> int:
    text = httpx.get(url + "/metrics/", timeout=10).text
    found = re.findall(
        r"^fluence_extender_not_ready_answers_total\{[^}]*\} ([0-9.e+]+)$", text, re.M
    )
    return int(sum(float(v) for v in found))


def _filter_while_rebuilding(suite: Suite, pod: str) -> int | None:
    """Once the new process listens and is not ready yet, ask it to filter: the status code."""
    url = suite.stack.extender.url
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return None  # the rebuild was over before we got in
            body = {"Pod": suite.get(pod), "Nodes": None, "NodeNames": suite.nodes}
            r = httpx.post(url + "/filter", json=body, timeout=5)
            assert r.status_code != 200 or "rebuilding" not in r.text
            if r.status_code == 503:
                assert "rebuilding" in r.json()["Error"]
            return r.status_code
        except httpx.TransportError:
            time.sleep(0.05)
    return None


def _bound(suite: Suite) -> dict[str, dict[str, Any]]:
    listed: dict[str, Any] = suite.core.api_client.sanitize_for_serialization(
        suite.core.list_namespaced_pod(suite.ns)
    )
    return {
        f"{suite.ns}/{p['metadata']['name']}": p
        for p in listed["items"]
        if p["spec"].get("nodeName")
        and p["spec"].get("schedulerName") == names.SCHEDULER_NAME
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    }


def test_kill_9_in_a_busy_cluster_never_double_books(suite: Suite) -> None:
    suite.add_nodes(8, cpu="5", qpu=True)
    _ballast(suite)
    try:
        _kill_9_rounds(suite)
    finally:
        _delete_ballast(suite)


def _delete_ballast(suite: Suite) -> None:
    """Batch by batch: the namespace teardown's one call would time out on 3,000 pods."""
    for batch in range((BALLAST + BALLAST_BATCH - 1) // BALLAST_BATCH):
        selector = f"fluence-e2e/ballast-batch={batch}"

        def gone(selector: str = selector) -> bool:
            try:
                suite.core.delete_collection_namespaced_pod(
                    suite.ns, label_selector=selector, grace_period_seconds=0, _request_timeout=90
                )
            except (ApiException, urllib3.exceptions.HTTPError):
                return False  # a 504 or a read timeout: the server goes on; ask again
            listed = suite.core.list_namespaced_pod(suite.ns, label_selector=selector, limit=1)
            return not listed.items

        wait_for(gone, 300, f"ballast batch {batch} to be deleted")


def _kill_9_rounds(suite: Suite) -> None:
    gangs: dict[str, list[str]] = {}
    for g in range(6):  # 6 gangs of 5 x 1 cpu on 40 cpu, late work fills part of the rest
        suite.podgroup(f"g{g}", 5)
        gangs[f"g{g}"] = []
        for i in range(5):
            suite.pod(f"g{g}-{i}", cpu="1", group=f"g{g}")
            gangs[f"g{g}"].append(f"g{g}-{i}")
    for i in range(3):  # two backends: one quantum pod waits
        suite.pod(f"q{i}", cpu="100m", extra={QPU: "1"})
    wait_for(
        lambda: sum(1 for p in _bound(suite) if "/g" in p) >= 25,
        120,
        "five gangs to be bound",
    )
    ext = suite.stack.extender
    rounds = []
    for round_ in range(3):
        ext.kill(signal.SIGKILL)
        ext.start(wait=False)  # kube-scheduler calls it at once
        for i in range(4):  # new work arrives during the rebuild
            suite.pod(f"late{round_}-{i}", cpu="250m")
        suite.pod(f"lq{round_}", cpu="100m", extra={QPU: "1"})
        started = time.monotonic()
        retry = _filter_while_rebuilding(suite, f"late{round_}-0")
        wait_for(ext.ready, 90, "the extender to rebuild", ext.log_tail)
        rounds.append((time.monotonic() - started, retry, _not_ready_answers(ext.url)))
        wait_for(
            lambda r=round_: all(suite.node_of(f"late{r}-{i}") for i in range(4)),
            60,
            "the late pods to be placed",
            lambda r=round_: suite.describe(*(f"late{r}-{i}" for i in range(4))),
        )

    def settled() -> bool:
        """No bind in flight (nothing held tentatively) and every pod bound or refused."""
        if any(v["state"] == "tentative" for v in suite.state_pods().values()):
            return False
        pods = suite.core.list_namespaced_pod(suite.ns).items
        return all(
            p.spec.node_name
            or any(
                c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or []
            )
            for p in pods
        )

    wait_for(settled, 60, "every pod to be bound or refused", suite.stack.extender.log_tail)
    print(
        "kill -9 rounds (rebuild seconds, our filter during the rebuild, "
        f"calls answered 'retry'): {rounds}"
    )
    assert any(r[1] == 503 for r in rounds), "no filter reached the extender while it rebuilt"
    _assert_no_overcommit(suite, node_cpu_m=5000)
    bound = _bound(suite)
    # No partial gang: a gang is bound whole or not at all.
    for group, members in gangs.items():
        placed = [m for m in members if f"{suite.ns}/{m}" in bound]
        assert len(placed) in (0, len(members)), (group, placed)
    # /state holds exactly what the API server has bound for this scheduler.
    state = {k: v for k, v in suite.state_pods().items() if v["state"] == "committed"}
    assert set(state) == set(bound)
    assert all(state[k]["node"] == bound[k]["spec"]["nodeName"] for k in bound)
    backends = {
        k: (p["metadata"].get("annotations") or {}).get(names.ANNOTATION_BACKEND)
        for k, p in bound.items()
        if QPU in p["spec"]["containers"][0]["resources"]["requests"]
    }
    assert len(backends) == 2 and len(set(backends.values())) == 2, backends


def test_a_job_gang_runs_to_completion_and_its_capacity_is_released(suite: Suite) -> None:
    """The real job controller makes the pods, KWOK runs them for a while, fluence releases."""
    suite.add_nodes(2, cpu="4")
    template = pod_body("unused", {"cpu": "2", "memory": "256Mi"}, suite.id)
    template["metadata"] = {
        "labels": {names.LABEL_GROUP: "sweep"},
        "annotations": {
            names.ANNOTATION_GROUP_SIZE: "3",
            ANNOTATION_EXIT_CODE: "0",
            # Long enough that a loaded machine still reads /state while they run.
            ANNOTATION_EXIT_AFTER: "20s",
        },
    }
    template["spec"]["restartPolicy"] = "Never"
    batch = BatchV1Api(suite.core.api_client)
    batch.create_namespaced_job(
        suite.ns,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "sweep"},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )

    def members() -> list[Any]:
        return suite.core.list_namespaced_pod(suite.ns, label_selector="job-name=sweep").items

    wait_for(
        lambda: len(members()) == 3 and all(p.spec.node_name for p in members()),
        60,
        "the job's three pods to be placed together",
        lambda: suite.stack.extender.log_tail(),
    )
    placed = {p.spec.node_name for p in members()}
    assert placed <= set(suite.nodes) and len(placed) == 2  # 2+1 on 4-cpu nodes
    assert sum(u["core"]["allocated"] for u in suite.state_nodes().values()) == 6000

    def complete() -> bool:
        job = batch.read_namespaced_job("sweep", suite.ns)
        return bool(job.status and job.status.succeeded == 3)

    wait_for(complete, 90, "the job to complete")
    wait_for(
        lambda: sum(u["core"]["allocated"] for u in suite.state_nodes().values()) == 0,
        30,
        "fluence to release the finished gang",
    )
    assert not suite.state_pods()


def test_a_gang_that_requires_one_rack_lands_in_one_rack(suite: Suite) -> None:
    """Nodes labelled with racks become graph levels; the gang asks for one rack."""
    rack_key = RACK_KEY
    suite.add_racks("ra", "rb")
    suite.pod("blocker", cpu="3", labels={}, annotations={})
    blocker_node = suite.wait_bound("blocker")["blocker"]
    lab = {names.LABEL_GROUP: "racked"}
    ann = {names.ANNOTATION_GROUP_SIZE: "3", names.ANNOTATION_TOPOLOGY: rack_key}
    for i in range(3):
        suite.pod(f"racked-{i}", cpu="2", labels=lab, annotations=ann)
    bound = suite.wait_bound(*(f"racked-{i}" for i in range(3)))
    racks = {n.split("-")[1] for n in bound.values()}
    assert len(racks) == 1, bound  # one rack holds the whole gang
    blocked_rack = blocker_node.split("-")[1]
    assert racks != {blocked_rack}  # the blocked rack has room for two pods only


def composite_team(suite: Suite, constraints: dict[str, dict[str, Any]] | None = None) -> bool:
    """CompositePodGroup "team" (gang of 2) with PodGroups "leader" (1) and "workers" (3),
    each with its ``constraints``; where the release has no composites, the same two
    PodGroups without a parent. Whether a composite was made."""
    release = suite.stack.cp.release
    composite = bool(release.composite_api)
    owners: list[dict[str, Any]] = []
    if composite:
        group, version = release.composite_api.split("/")
        made = suite.custom.create_namespaced_custom_object(
            group,
            version,
            suite.ns,
            "compositepodgroups",
            {
                "apiVersion": release.composite_api,
                "kind": "CompositePodGroup",
                "metadata": {"name": "team"},
                "spec": {
                    "workloadRef": {"workloadName": "team", "templateName": "team"},
                    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                },
            },
        )
        # The composite adopts its children: owned by it, they count toward its quorum.
        meta = made["metadata"]
        owners = [
            {
                "apiVersion": release.composite_api,
                "kind": "CompositePodGroup",
                "name": meta["name"],
                "uid": meta["uid"],
            }
        ]
    for name, size in (("leader", 1), ("workers", 3)):
        extra: dict[str, Any] = {}
        if composite:
            extra = {
                "parentCompositePodGroupName": "team",
                "workloadRef": {"workloadName": "team", "templateName": name},
            }
        if constraints and name in constraints:
            extra["schedulingConstraints"] = constraints[name]
        suite.podgroup(name, size, owners=owners, **extra)
    return composite


def test_a_composite_gang_is_placed_all_or_nothing(suite: Suite) -> None:
    """A CompositePodGroup with a gang policy: its PodGroups' pods go together or not at
    all (1.37, alpha). On 1.36, which has no composites, the same PodGroups without a
    parent are gangs each on its own."""
    suite.add_nodes(2, cpu="4")
    composite = composite_team(suite)
    suite.pod("leader-0", cpu="2", group="leader")
    for i in range(2):
        suite.pod(f"workers-{i}", cpu="2", group="workers")
    # Judged once kube-scheduler has looked at them: its gang gate holds the short gang's
    # pods (its log says so; no condition is written), and without a composite the
    # leader's gang of one is bound.
    short = ["leader-0", "workers-0", "workers-1"] if composite else ["workers-0", "workers-1"]
    wait_for(
        lambda: suite.gang_gated(*short),
        60,
        "kube-scheduler's gang gate to hold the short gang",
        lambda: suite.describe(*short),
    )
    if not composite:
        suite.wait_bound("leader-0")
    bound = [p for p in ("leader-0", "workers-0", "workers-1") if suite.node_of(p)]
    held = suite.state_pods()
    if composite:
        # One of the composite's gangs is short: nothing is bound, nothing held.
        assert bound == [] and held == {}, (bound, held)
    else:
        assert bound == ["leader-0"], bound  # the leader's gang of one is whole
    suite.pod("workers-2", cpu="2", group="workers")
    placed = suite.wait_bound("leader-0", *(f"workers-{i}" for i in range(3)), timeout=90)
    assert sorted(Counter(placed.values()).values()) == [2, 2], placed
    if composite:
        groups_held = {v["group"] for v in suite.state_pods().values()}
        assert groups_held <= {f"{suite.ns}/composite:team"}, groups_held


def test_a_composite_child_requiring_one_rack_lands_in_one_rack(suite: Suite) -> None:
    """The workers' PodGroup of a gang composite requires one rack; the leader's does
    not. Both go together, the workers in one rack, and the leader where it leaves them
    one."""
    rack_key = RACK_KEY
    suite.add_racks("ra", "rb")
    # rb keeps 5 cpu (a blocker takes 3 of rb-0's 4): the 3 workers of 2 cpu fit ra
    # alone. The leader (3 cpu) and workers (6) fit no one rack, so the gang spans two,
    # and only the workers' own constraint keeps them together.
    rb0 = next(n for n in suite.nodes if "-rb-" in n)
    suite.pod("blocker", cpu="3", spec={"nodeSelector": {"kubernetes.io/hostname": rb0}})
    suite.wait_bound("blocker")
    composite = composite_team(suite, {"workers": {"topology": [{"key": rack_key}]}})
    suite.pod("leader-0", cpu="3", group="leader")
    for i in range(3):
        suite.pod(f"workers-{i}", cpu="2", group="workers")
    if not composite:
        # Two gangs of their own (1.36): the leader goes first, wherever it fits, and
        # may leave no rack with room for all three workers; they wait, whole.
        suite.wait_bound("leader-0")
        if suite.node_of("leader-0").split("-")[1] == "ra":
            wait_for(
                lambda: "no single rack has room" in suite.unschedulable_message("workers-0"),
                30,
                "the workers to wait for one rack",
                lambda: suite.describe("workers-0"),
            )
            assert not any(suite.node_of(f"workers-{i}") for i in range(3))
            return
    placed = suite.wait_bound("leader-0", *(f"workers-{i}" for i in range(3)), timeout=90)
    racks = {placed[f"workers-{i}"].split("-")[1] for i in range(3)}
    assert racks == {"ra"}, placed  # the one rack with room for all three
    # fluence chose so itself: kube-scheduler's own placements did not have to undo it.
    log = suite.stack.extender.log_path.read_text(errors="replace")
    assert not [line for line in log.splitlines() if suite.ns in line and "ruled out" in line]


def test_a_podgroup_requiring_one_rack_passes_the_placement_kube_scheduler_tries_there(
    suite: Suite,
) -> None:
    """kube-scheduler's topology-aware placement tries every rack in turn, offering the
    members that rack's nodes alone; fluence must fail the racks it did not choose and
    pass the one it did, whole, and never split the gang between them."""
    rack_key = RACK_KEY
    suite.add_racks("ra", "rb", "rc")
    # Every rack holds either gang (3 x 2 cpu on 2 x 4 cpu), so kube-scheduler has
    # three placements to try for each, one of which is fluence's.
    for gang in ("first", "second"):
        suite.podgroup(gang, 3, schedulingConstraints={"topology": [{"key": rack_key}]})
        for i in range(3):
            suite.pod(f"{gang}-{i}", cpu="2", group=gang)
    for gang in ("first", "second"):
        bound = suite.wait_bound(*(f"{gang}-{i}" for i in range(3)), timeout=90)
        assert len({n.split("-")[1] for n in bound.values()}) == 1, bound
    stored = suite.custom.get_namespaced_custom_object(
        "scheduling.k8s.io", suite.stack.cp.release.podgroup_version, suite.ns, "podgroups", "first"
    )
    assert stored["spec"]["schedulingConstraints"]["topology"] == [{"key": rack_key}]
    log = suite.stack.extender.log_path.read_text(errors="replace")
    assert not [line for line in log.splitlines() if suite.ns in line and "ruled out" in line]


def test_a_gang_too_big_for_any_rack_spans_the_fewest_racks(suite: Suite) -> None:
    """No rack holds it: the fewest racks with room do, not the first nodes found."""
    made = suite.add_racks("ra", "rb", "rc")
    # ra keeps 8 cpu free, rb 4, rc 2: an 11-pod gang fits in ra and rb.
    for i, (where, cpu) in enumerate(
        ((made["rc"][0], "3"), (made["rc"][1], "3"), (made["rb"][0], "4"))
    ):
        suite.pod(f"blocker-{i}", cpu=cpu, spec={"nodeSelector": {"kubernetes.io/hostname": where}})
    suite.wait_bound("blocker-0", "blocker-1", "blocker-2")
    lab = {names.LABEL_GROUP: "wide"}
    ann = {names.ANNOTATION_GROUP_SIZE: "11"}
    for i in range(11):
        suite.pod(f"wide-{i}", cpu="1", memory="64Mi", labels=lab, annotations=ann)
    bound = suite.wait_bound(*(f"wide-{i}" for i in range(11)), timeout=120)
    assert {n.split("-")[1] for n in bound.values()} == {"ra", "rb"}, bound


def test_a_gang_behind_a_stream_of_small_jobs_starts_at_its_reservation(suite: Suite) -> None:
    """No starvation: the gang's capacity is reserved; only a job that ends first backfills."""
    suite.add_nodes(4, cpu="4")

    def timed(name: str, seconds: int, estimate: int, enforced: bool = False, **kw: Any) -> None:
        """A pod that runs ``seconds``, expected to run at most ``estimate``.

        ``enforced``: the estimate is its activeDeadlineSeconds, else an annotation.
        """
        annotations = {ANNOTATION_EXIT_CODE: "0", ANNOTATION_EXIT_AFTER: f"{seconds}s"}
        spec = {"activeDeadlineSeconds": estimate} if enforced else None
        if not enforced:
            annotations[names.ANNOTATION_RUNTIME] = f"{estimate}s"
        suite.pod(name, cpu="1", memory="64Mi", annotations=annotations, spec=spec, **kw)

    running = [f"run-{i}" for i in range(8)]
    for name in running:
        timed(name, 25, 30)
    suite.wait_bound(*running)
    suite.podgroup("big", 16)
    gang = [f"big-{i}" for i in range(16)]
    for name in gang:
        timed(name, 10, 15, group="big")
    wait_for(
        lambda: "reserved from" in suite.unschedulable_message("big-0"),
        60,
        "the gang to be reserved and say when it starts",
        lambda: suite.describe("big-0"),
    )
    # A stream of one-pod jobs that would still run when the gang's reservation starts.
    stream = [f"stream-{i}" for i in range(6)]
    for name in stream:
        timed(name, 60, 60)
        time.sleep(1)
    # A job whose deadline ends before the reservation starts backfills a free core now;
    # one that only claims to be as short (an annotation) does not jump the queue.
    timed("claims-quick", 60, 5)
    timed("quick", 3, 5, enforced=True)
    suite.wait_bound("quick", timeout=30)
    assert all(suite.node_of(p) == "" for p in stream), "a long job took the gang's capacity"
    assert suite.node_of("claims-quick") == "", "an unenforced estimate backfilled"
    queue = suite.stack.extender.state()["queue"]
    mine = [w for w in queue if w["group"].startswith(suite.ns + "/")]
    assert mine[0]["group"] == f"{suite.ns}/big" and mine[0]["reserved"]
    assert "reserved from" in suite.unschedulable_message("stream-0")
    bound = suite.wait_bound(*gang, timeout=90)
    assert set(bound.values()) == set(suite.nodes)
    gang_bound = max(_condition_time(suite.get(p), "PodScheduled") for p in gang)
    first_stream = min(
        (_condition_time(suite.get(p), "PodScheduled") for p in stream if suite.node_of(p)),
        default=float("inf"),
    )
    assert first_stream >= gang_bound, "a stream job started before the reserved gang"


def _condition_time(pod: dict[str, Any], kind: str) -> float:
    """When the pod's condition ``kind`` last turned True (Unix time)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return datetime.fromisoformat(str(c["lastTransitionTime"])).timestamp()
    raise AssertionError(f"{pod['metadata']['name']} has no {kind}=True condition")


def test_a_high_priority_gang_preempts_exactly_one_whole_lower_priority_gang(
    suite: Suite,
) -> None:
    suite.add_nodes(2, cpu="4")
    scheduling = SchedulingV1Api(suite.core.api_client)
    classes = {"low": f"low-{suite.id}", "high": f"high-{suite.id}"}
    for level, value in (("low", 10), ("high", 1000)):
        scheduling.create_priority_class(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": classes[level]},
                "value": value,
            }
        )
    try:
        # Label gangs: the pods' PriorityClass is the group's priority.
        def gang(name: str, level: str) -> None:
            for i in range(2):
                suite.pod(
                    f"{name}-{i}",
                    cpu="2",
                    memory="64Mi",
                    labels={names.LABEL_GROUP: name},
                    annotations={names.ANNOTATION_GROUP_SIZE: "2"},
                    spec={"priorityClassName": classes[level]},
                )

        for name in ("low-a", "low-b"):
            gang(name, "low")
            suite.wait_bound(f"{name}-0", f"{name}-1")
        gang("high", "high")
        bound = suite.wait_bound("high-0", "high-1", timeout=120)
        assert set(bound.values()) <= set(suite.nodes)

        def alive() -> set[str]:
            return {
                p.metadata.name
                for p in suite.core.list_namespaced_pod(suite.ns).items
                if not p.metadata.deletion_timestamp
            }

        # The newest lower-priority gang went, whole; the other one still runs where it was.
        wait_for(lambda: not alive() & {"low-b-0", "low-b-1"}, 60, "low-b to be evicted")
        assert {"low-a-0", "low-a-1", "high-0", "high-1"} <= alive()
        events = suite.core.list_namespaced_event(suite.ns).items
        preempted = {e.involved_object.name for e in events if e.reason == "Preempted"}
        assert preempted == {"low-b-0", "low-b-1"}
    finally:
        for name in classes.values():
            scheduling.delete_priority_class(name)


def test_a_podgroup_that_may_lose_single_pods_loses_one_not_the_gang(suite: Suite) -> None:
    """1.37: a PodGroup left without ``disruptionMode`` is ``single`` (the API server fills
    it in), so a higher-priority pod takes one of its pods. 1.36's v1alpha2 stores "Pod"
    whatever was asked (its gate is alpha and off), which says nothing: the gang goes
    whole, as every fluence gang does."""
    suite.add_nodes(2, cpu="4")
    scheduling = SchedulingV1Api(suite.core.api_client)
    high_class = f"high-{suite.id}"
    scheduling.create_priority_class(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": high_class},
            "value": 1000,
        }
    )
    try:
        suite.podgroup("loose", 4)
        stored = suite.custom.get_namespaced_custom_object(
            "scheduling.k8s.io",
            suite.stack.cp.release.podgroup_version,
            suite.ns,
            "podgroups",
            "loose",
        )
        single = suite.stack.cp.release.minor != "1.36"
        assert stored["spec"]["disruptionMode"] == ({"single": {}} if single else "Pod")
        loose = [f"loose-{i}" for i in range(4)]
        for name in loose:
            suite.pod(name, cpu="2", memory="64Mi", group="loose")
        suite.wait_bound(*loose)  # both nodes full
        suite.pod("urgent", cpu="2", memory="64Mi", spec={"priorityClassName": high_class})
        suite.wait_bound("urgent", timeout=120)

        def alive() -> set[str]:
            return {
                p.metadata.name
                for p in suite.core.list_namespaced_pod(suite.ns).items
                if not p.metadata.deletion_timestamp
            }

        def preempted() -> set[str]:
            events = suite.core.list_namespaced_event(suite.ns).items
            return {e.involved_object.name for e in events if e.reason == "Preempted"}

        if single:
            wait_for(
                lambda: len(preempted()) == 1,
                30,
                "the Preempted event",
                lambda: f"{preempted()} alive {alive()} | {suite.describe('urgent')}",
            )
            (gone,) = preempted()
            assert alive() == {"urgent", *loose} - {gone}
        else:
            wait_for(lambda: preempted() == set(loose), 30, "the Preempted events")
            assert alive() == {"urgent"}
    finally:
        scheduling.delete_priority_class(high_class)


def test_a_gang_whose_member_cannot_be_placed_lets_its_hold_go_after_the_gang_timeout(
    suite: Suite,
) -> None:
    """A label gang of two is held whole; one member binds, the other never reaches the
    extender (kube-scheduler itself refuses it: its volume claim does not exist). Once the
    gang timeout passes, what the member held is released (a ``GangTimeout`` event says
    why) and other pods may use it; the member that runs keeps its place."""
    ext = suite.stack.extender
    ext.env["FLUENCE_GANG_TIMEOUT"] = "8"
    ext.kill(signal.SIGTERM)
    ext.start()
    try:
        suite.add_nodes(1, cpu="4")
        lab = {names.LABEL_GROUP: "halfway"}
        ann = {names.ANNOTATION_GROUP_SIZE: "2"}
        suite.pod("halfway-0", cpu="2", labels=lab, annotations=ann)
        missing_claim = {
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
        }
        suite.pod("halfway-1", cpu="2", labels=lab, annotations=ann, spec=missing_claim)
        suite.wait_bound("halfway-0")
        held = suite.state_pods()
        assert held[f"{suite.ns}/halfway-1"]["state"] == "tentative", held
        node = suite.nodes[0]
        assert suite.state_nodes()[node]["core"]["free"] == 0
        # Nothing else fits while the member's share is held.
        suite.pod("other", cpu="2")
        wait_for(
            lambda: suite.unschedulable_message("other"),
            30,
            "the other pod to be refused",
            lambda: suite.describe("other"),
        )
        assert suite.node_of("other") == ""

        def timed_out() -> bool:
            events = suite.core.list_namespaced_event(suite.ns).items
            return any(
                e.reason == "GangTimeout" and e.involved_object.name == "halfway-1" for e in events
            )

        wait_for(timed_out, 60, "a GangTimeout event on the member", ext.log_tail)
        assert f"{suite.ns}/halfway-1" not in suite.state_pods()
        assert suite.state_pods()[f"{suite.ns}/halfway-0"]["state"] == "committed"
        assert suite.wait_bound("other", timeout=60) == {"other": node}
        assert suite.node_of("halfway-1") == ""
    finally:
        del ext.env["FLUENCE_GANG_TIMEOUT"]
        ext.kill(signal.SIGTERM)
        ext.start()
