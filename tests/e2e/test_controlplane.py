"""The local control plane harness against the real etcd, kube-apiserver and kube-scheduler."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

from testbed import ControlPlane, KubeApiError, ProcessStartError, ensure_release
from testbed.cluster import selected_release
from testbed.processes import wait_until

PODGROUP_VERSION = selected_release().podgroup_version
PODGROUPS = f"/apis/scheduling.k8s.io/{PODGROUP_VERSION}/namespaces/{{ns}}/podgroups"
DEFAULT_SCHEDULER_CONFIG: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "default-scheduler"}],
}


def pod_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            **spec,
        },
    }


def harness_children() -> set[int]:
    """Pids of control-plane binaries that are children of this test process."""
    bin_dirs = {path.parent for path in ensure_release(selected_release().minor).all()}
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if Path(child.exe()).parent in bin_dirs:
                pids.add(child.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return pids


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_podgroup_and_scheduling_group_round_trip(
    control_plane: ControlPlane, namespace: str, kube: ApiClient
) -> None:
    podgroup = {
        "apiVersion": f"scheduling.k8s.io/{PODGROUP_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "gang"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    CustomObjectsApi(kube).create_namespaced_custom_object(
        "scheduling.k8s.io", PODGROUP_VERSION, namespace, "podgroups", podgroup
    )
    control_plane.rest.create(
        f"/api/v1/namespaces/{namespace}/pods",
        pod_body("member-0", schedulingGroup={"podGroupName": "gang"}),
    )

    stored = control_plane.rest.get(PODGROUPS.format(ns=namespace) + "/gang")
    assert stored["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    raw_pod = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/member-0")
    assert raw_pod["spec"]["schedulingGroup"] == {"podGroupName": "gang"}
    typed_pod = CoreV1Api(kube).read_namespaced_pod("member-0", namespace)
    assert typed_pod.spec is not None and typed_pod.spec.scheduling_group is not None
    assert typed_pod.spec.scheduling_group.pod_group_name == "gang"


def test_default_scheduler_binds_and_kwok_runs_then_succeeds(
    control_plane: ControlPlane, namespace: str
) -> None:
    nodes = control_plane.add_nodes(2, prefix=f"{namespace}-node-")
    kubelet = control_plane.start_kwok()
    scheduler = control_plane.start_scheduler(DEFAULT_SCHEDULER_CONFIG)
    try:
        control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", pod_body("web"))
        pod = kubelet.wait_for_phase(namespace, "web", "Running", timeout_s=60)
    finally:
        control_plane.stop_scheduler(scheduler)
    try:
        assert pod["spec"]["nodeName"] in nodes
        status = pod["status"]
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        for kind in ("Ready", "PodScheduled", "Initialized", "ContainersReady"):
            assert conditions[kind] == "True"
        (container,) = status["containerStatuses"]
        assert container["name"] == "main" and "running" in container["state"]
        assert status["podIP"] and status["startTime"]

        done = kubelet.succeed(namespace, "web")
        assert done["status"]["phase"] == "Succeeded"
        assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        reread = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/web")
        assert reread["status"]["phase"] == "Succeeded"
    finally:
        for node in nodes:
            control_plane.delete_node(node)


def test_fail_marks_pod_failed_with_exit_code(control_plane: ControlPlane, namespace: str) -> None:
    (node,) = control_plane.add_nodes(1, prefix=f"{namespace}-node-")
    kubelet = control_plane.start_kwok()
    try:
        control_plane.rest.create(
            f"/api/v1/namespaces/{namespace}/pods", pod_body("job", nodeName=node)
        )
        kubelet.wait_for_phase(namespace, "job", "Running")
        failed = kubelet.fail(namespace, "job", exit_code=3)
        assert failed["status"]["phase"] == "Failed"
        terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 3
    finally:
        control_plane.delete_node(node)


def test_kwok_finishes_graceful_deletion(control_plane: ControlPlane, namespace: str) -> None:
    (node,) = control_plane.add_nodes(1, prefix=f"{namespace}-node-")
    kubelet = control_plane.start_kwok()
    try:
        path = f"/api/v1/namespaces/{namespace}/pods"
        control_plane.rest.create(path, pod_body("victim", nodeName=node))
        kubelet.wait_for_phase(namespace, "victim", "Running")
        control_plane.rest.delete(f"{path}/victim")
        deadline = time.monotonic() + 20
        while True:
            try:
                control_plane.rest.get(f"{path}/victim")
            except KubeApiError as exc:
                assert exc.status == 404
                break
            assert time.monotonic() < deadline, "bound pod still terminating after 20s"
            time.sleep(0.1)
    finally:
        control_plane.delete_node(node)


def test_patch_node_status_merges_extended_resources(control_plane: ControlPlane) -> None:
    (node,) = control_plane.add_nodes(1, prefix=f"ext-{uuid.uuid4().hex[:6]}-")
    try:
        qpu = "fluxion.flux-framework.org/qpu"
        control_plane.patch_node_status(node, capacity={qpu: "2"}, allocatable={qpu: "2"})
        status = control_plane.rest.get(f"/api/v1/nodes/{node}")["status"]
        for section in ("capacity", "allocatable"):
            assert status[section][qpu] == "2"
            assert status[section]["cpu"] == "4"
            assert status[section]["memory"] == "16Gi"
        control_plane.patch_node_status(node, capacity={qpu: None}, allocatable={qpu: None})
        status = control_plane.rest.get(f"/api/v1/nodes/{node}")["status"]
        assert qpu not in status["capacity"] and qpu not in status["allocatable"]
    finally:
        control_plane.delete_node(node)


def test_fake_nodes_are_ready_and_untainted(control_plane: ControlPlane) -> None:
    (node,) = control_plane.add_nodes(1, prefix=f"ready-{uuid.uuid4().hex[:6]}-")
    try:
        stored = control_plane.rest.get(f"/api/v1/nodes/{node}")
        assert not stored["spec"].get("taints")
        ready = [c for c in stored["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"
    finally:
        control_plane.delete_node(node)


def test_two_schedulers_with_leader_election_share_one_lease(
    control_plane: ControlPlane,
) -> None:
    lease = f"sched-{uuid.uuid4().hex[:6]}"
    config = {
        **DEFAULT_SCHEDULER_CONFIG,
        "profiles": [{"schedulerName": lease}],
        "leaderElection": {
            "leaderElect": True,
            "resourceNamespace": "kube-system",
            "resourceName": lease,
            "leaseDuration": "4s",
            "renewDeadline": "3s",
            "retryPeriod": "1s",
        },
    }
    first = control_plane.start_scheduler(config)
    second = control_plane.start_scheduler(config)
    try:
        assert first.running() and second.running()
        deadline = time.monotonic() + 30
        holder = ""
        while not holder:
            try:
                obj = control_plane.rest.get(
                    f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}"
                )
                holder = obj["spec"].get("holderIdentity", "")
            except KubeApiError:
                holder = ""
            assert time.monotonic() < deadline, "no scheduler took the lease within 30s"
            time.sleep(0.2)
        restarted = control_plane.restart_scheduler(second)
        second = restarted
        assert restarted.running()
    finally:
        control_plane.stop_scheduler(first)
        control_plane.stop_scheduler(second)


def test_scheduler_start_failure_reports_its_log(control_plane: ControlPlane) -> None:
    with pytest.raises(ProcessStartError) as info:
        control_plane.start_scheduler(DEFAULT_SCHEDULER_CONFIG, extra_args=["--no-such-flag"])
    assert "unknown flag: --no-such-flag" in str(info.value)
    assert control_plane.schedulers == []


def test_throwaway_control_plane_stops_without_leftovers() -> None:
    before = harness_children()
    cp = ControlPlane()
    t0 = time.monotonic()
    cp.start()
    start_s = time.monotonic() - t0
    try:
        workdir = cp.workdir
        cp.start_scheduler(DEFAULT_SCHEDULER_CONFIG)
        pids = set(cp.pids)
        assert len(pids) == 4  # etcd, kube-apiserver, kube-controller-manager, scheduler
        assert pids <= harness_children() - before
        # Each component leads its own process group (Ctrl-C reaches only the harness).
        for pid in pids:
            assert os.getpgid(pid) == pid
    finally:
        t0 = time.monotonic()
        cp.stop()
        stop_s = time.monotonic() - t0
    print(f"\nthrowaway control plane: start {start_s:.2f}s, stop {stop_s:.2f}s")
    assert all(gone(pid) for pid in pids)
    assert harness_children() - before == set()
    assert not workdir.exists()


def test_apiserver_start_failure_raises_with_log_tail_and_cleans_up() -> None:
    before = harness_children()
    cp = ControlPlane(apiserver_args=["--no-such-flag"])
    with pytest.raises(ProcessStartError) as info:
        cp.start()
    message = str(info.value)
    assert "kube-apiserver" in message
    assert "unknown flag: --no-such-flag" in message
    assert harness_children() - before == set()


def read_line_with(proc: subprocess.Popen[str], marker: str, timeout_s: float) -> str:
    """Read the child's stdout until a line containing ``marker`` (or fail with its output)."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return line
    raise AssertionError(f"no line with {marker!r} from child; output so far:\n{''.join(seen)}")


CHILD_SCRIPT = """
import json, sys, time
from testbed import ControlPlane
cp = ControlPlane(sys.argv[1]).start()
cp.start_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
print("PIDS " + json.dumps(cp.pids), flush=True)
time.sleep(600)
"""


def test_components_die_when_the_harness_is_sigkilled(tmp_path: Path) -> None:
    workdir = tmp_path / "cp"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD_SCRIPT, str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pids: list[int] = []
    try:
        line = read_line_with(proc, "PIDS ", timeout_s=120)
        pids = json.loads(line.split(" ", 1)[1])
        assert len(pids) == 4 and not any(gone(pid) for pid in pids)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while not all(gone(pid) for pid in pids):
            assert time.monotonic() < deadline, "components outlived their SIGKILLed parent"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_cli_up_status_down(tmp_path: Path) -> None:
    workdir = tmp_path / "cluster"
    cli = [sys.executable, "-m", "testbed"]
    up = subprocess.Popen(
        [*cli, "up", "--nodes", "1", "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = read_line_with(up, "kubeconfig: ", timeout_s=120)
        kubeconfig = Path(line.split(": ", 1)[1].strip())
        assert kubeconfig.is_file()
        status = subprocess.run(
            [*cli, "status", "--workdir", str(workdir)], capture_output=True, text=True
        )
        assert status.returncode == 0, status.stdout + status.stderr
        state = json.loads(status.stdout)
        assert state["running"] is True and state["nodes"] == ["node-0"]
        down = subprocess.run(
            [*cli, "down", "--workdir", str(workdir)], capture_output=True, text=True
        )
        assert down.returncode == 0, down.stdout + down.stderr
        assert up.wait(timeout=60) == 0
        assert not workdir.exists()
    finally:
        if up.poll() is None:
            up.terminate()
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()


def test_kubelet_also_serves_nodes_created_elsewhere_with_the_fake_label(
    control_plane: ControlPlane, namespace: str
) -> None:
    from testbed.nodes import node_manifest

    name = f"{namespace}-external"
    control_plane.rest.create("/api/v1/nodes", node_manifest(name))
    kubelet = control_plane.start_kwok()
    try:
        control_plane.rest.create(
            f"/api/v1/namespaces/{namespace}/pods", pod_body("ext", nodeName=name)
        )
        pod = kubelet.wait_for_phase(namespace, "ext", "Running")
        assert pod["spec"]["nodeName"] == name
    finally:
        control_plane.delete_node(name)


def job_body(name: str, parallelism: int, **template_meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "completionMode": "Indexed",
            "template": {
                "metadata": template_meta,
                "spec": {
                    "restartPolicy": "Never",
                    "schedulerName": "nobody-schedules-these",
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        },
    }


def pods_owned_by(control_plane: ControlPlane, namespace: str, uid: str) -> list[Any]:
    items = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return [
        p for p in items if any(o["uid"] == uid for o in p["metadata"].get("ownerReferences") or ())
    ]


def test_real_controllers_make_pods_and_collect_them(
    control_plane: ControlPlane, namespace: str
) -> None:
    """kube-controller-manager runs: Jobs get indexed pods, and deleting a Job deletes them."""
    job = control_plane.rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs", job_body("train", 3)
    )
    uid = job["metadata"]["uid"]
    wait_until(
        lambda: len(pods_owned_by(control_plane, namespace, uid)) == 3,
        timeout_s=30,
        what="given 3 pods by the job controller",
    )
    pods = pods_owned_by(control_plane, namespace, uid)
    indexes = sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
    )
    assert indexes == ["0", "1", "2"]
    assert all(p["metadata"]["name"].startswith("train-") for p in pods)
    control_plane.rest.delete(
        f"/apis/batch/v1/namespaces/{namespace}/jobs/train", propagationPolicy="Background"
    )
    wait_until(
        lambda: not pods_owned_by(control_plane, namespace, uid),
        timeout_s=30,
        what="collected by the garbage collector",
    )
