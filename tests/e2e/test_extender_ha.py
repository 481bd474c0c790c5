"""Failover: two kube-schedulers with leader election, each with its own fluence-extender.

Sidecar pattern: scheduler A calls extender A, scheduler B calls extender B,
both schedulers compete for one Lease. Gangs are placed through the leader;
then the leader's scheduler and its extender are killed with SIGKILL. The
standby's extender has followed the watch all along, so when its scheduler
takes the Lease it already holds every earlier allocation and places new pods
without over-committing any node or backend.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api, CoreV1Api, CustomObjectsApi

from fluence import names
from fluence.pods import cpu_millicores
from testbed import ControlPlane, SchedulerHandle
from testbed.schedconfig import scheduler_config
from tests.e2e.test_extender_e2e import QPU, Extender, wait_for
from tests.support.extender import SUITE_LABEL, create_podgroup, pod_body

NODE_CPU = 4
ACQUIRED = "successfully acquired lease"
LEASE_NAMESPACE = "kube-system"


def ha_config(url: str, lease: str) -> dict[str, Any]:
    """The e2e scheduler config for extender ``url``, competing for Lease ``lease``."""
    doc = scheduler_config(url)
    doc["leaderElection"] = {
        "leaderElect": True,
        "leaseDuration": "4s",
        "renewDeadline": "3s",
        "retryPeriod": "1s",
        "resourceLock": "leases",
        "resourceName": lease,
        "resourceNamespace": LEASE_NAMESPACE,
    }
    return doc


def leads(handle: SchedulerHandle) -> bool:
    if not handle.log_path.exists():
        return False
    return ACQUIRED in handle.log_path.read_text(errors="replace").lower()


class Replica:
    """One scheduler + extender pair."""

    def __init__(self, name: str, extender: Extender) -> None:
        self.name = name
        self.extender = extender
        self.scheduler: SchedulerHandle | None = None


class HA:
    def __init__(
        self, cp: ControlPlane, kube: ApiClient, namespace: str, a: Replica, b: Replica
    ) -> None:
        self.cp = cp
        self.core = CoreV1Api(kube)
        self.custom = CustomObjectsApi(kube)
        self.coordination = CoordinationV1Api(kube)
        self.ns = namespace
        self.id = uuid.uuid4().hex[:6]
        self.lease = f"fluence-ha-{self.id}"
        self.a = a
        self.b = b
        self.nodes: list[str] = []

    def pod(self, name: str, cpu: str, *, group: str | None = None, qpu: bool = False) -> None:
        requests = {"cpu": cpu, "memory": "256Mi"}
        if qpu:
            requests[QPU] = "1"
        body = pod_body(name, requests, self.id, group=group)
        self.core.create_namespaced_pod(self.ns, body)

    def podgroup(self, name: str, min_count: int) -> None:
        create_podgroup(self.custom, self.ns, name, min_count)

    def pods(self) -> list[dict[str, Any]]:
        listed: dict[str, Any] = self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(self.ns)
        )
        items: list[dict[str, Any]] = listed["items"]
        return items

    def bound(self) -> dict[str, str]:
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in self.pods()
            if p["spec"].get("nodeName")
        }

    def wait_bound(self, *pods: str, timeout: float = 90) -> dict[str, str]:
        def probe() -> dict[str, str] | None:
            got = self.bound()
            return {p: got[p] for p in pods} if all(p in got for p in pods) else None

        result: dict[str, str] = wait_for(
            probe, timeout, f"pods {pods} to be bound", lambda: self.detail()
        )
        return result

    def refused(self) -> set[str]:
        """Pods kube-scheduler tried and could not place (PodScheduled False)."""
        return {
            p["metadata"]["name"]
            for p in self.pods()
            if any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        }

    def detail(self) -> str:
        out = []
        for p in self.pods():
            conds = (p.get("status") or {}).get("conditions") or []
            msg = [c.get("message") for c in conds if c.get("type") == "PodScheduled"]
            out.append(f"{p['metadata']['name']}: node={p['spec'].get('nodeName')} {msg}")
        tails = [
            f"extender {r.name}: {r.extender.log_tail()[-800:]}"
            for r in (self.a, self.b)
            if r.extender.proc is not None
        ]
        return " | ".join(out + tails)

    def mine(self, state: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in state["pods"].items() if k.startswith(self.ns + "/")}

    def assert_no_overcommit(self) -> None:
        """Per node: the bound pods' cpu requests fit its allocatable; a backend has one holder."""
        per_node: dict[str, int] = {}
        holders: dict[str, list[str]] = {}
        for p in self.pods():
            node = p["spec"].get("nodeName")
            if not node or p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            requests = p["spec"]["containers"][0]["resources"]["requests"]
            per_node[node] = per_node.get(node, 0) + cpu_millicores(requests["cpu"])
            backend = (p["metadata"].get("annotations") or {}).get(names.ANNOTATION_BACKEND)
            if QPU in requests:
                assert backend, f"qpu pod {p['metadata']['name']} bound without a backend"
                holders.setdefault(backend, []).append(p["metadata"]["name"])
        assert all(v <= NODE_CPU * 1000 for v in per_node.values()), per_node
        assert all(len(v) <= 1 for v in holders.values()), holders


def sees_nodes(extender: Extender, nodes: list[str]) -> Callable[[], bool]:
    return lambda: all(n in extender.state()["nodes"] for n in nodes)


@pytest.fixture
def ha(
    control_plane: ControlPlane, kube: ApiClient, namespace: str, tmp_path: Path
) -> Iterator[HA]:
    """Two extenders (A, B) and the nodes; the test starts the schedulers. All stopped after."""
    cp = control_plane
    cp.start_kwok()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = Replica("a", Extender(a_dir, cp.kubeconfig))
    b = Replica("b", Extender(b_dir, cp.kubeconfig))
    h = HA(cp, kube, namespace, a, b)
    try:
        a.extender.start()
        b.extender.start()
        capacity = {"cpu": str(NODE_CPU), "memory": "8Gi", "pods": "110", QPU: "1000"}
        h.nodes = cp.add_nodes(
            3, prefix=f"ha{h.id}-", capacity=capacity, labels={SUITE_LABEL: h.id}
        )
        for r in (a, b):
            wait_for(sees_nodes(r.extender, h.nodes), 30, f"extender {r.name} to see the nodes")
        yield h
    finally:
        for r in (a, b):
            if r.scheduler is not None and r.scheduler in cp.schedulers:
                cp.stop_scheduler(r.scheduler)
            r.extender.kill(signal.SIGTERM)
        for n in h.nodes:
            cp.delete_node(n)


def test_standby_takes_over_after_the_leader_and_its_extender_are_killed(ha: HA) -> None:
    cp = ha.cp
    ha.a.scheduler = cp.start_scheduler(ha_config(ha.a.extender.url, ha.lease), name="ha-a")
    wait_for(lambda: leads(ha.a.scheduler), 30, "scheduler A to take the lease")  # type: ignore[arg-type]
    ha.b.scheduler = cp.start_scheduler(ha_config(ha.b.extender.url, ha.lease), name="ha-b")
    time.sleep(2)
    assert not leads(ha.b.scheduler), "B must wait while A renews the lease"

    # Through the leader: two gangs and a quantum pod (6.1 of 12 cpus, one backend).
    before: list[str] = []
    for g in ("g0", "g1"):
        ha.podgroup(g, 3)
        for i in range(3):
            ha.pod(f"{g}-{i}", "1", group=g)
            before.append(f"{g}-{i}")
    ha.pod("q0", "100m", qpu=True)
    before.append("q0")
    ha.wait_bound(*before)
    keys = {f"{ha.ns}/{p}" for p in before}
    assert set(ha.mine(ha.a.extender.state())) == keys, "the leader's extender placed them"

    # The standby's extender follows the watch: it holds every allocation before it serves.
    def standby_holds_everything() -> bool:
        a, b = ha.a.extender.state(), ha.b.extender.state()
        return (
            ha.mine(b) == ha.mine(a)
            and set(ha.mine(b)) == keys
            and all(v["state"] == "committed" for v in ha.mine(b).values())
            and all(a["nodes"][n] == b["nodes"][n] for n in ha.nodes)
        )

    wait_for(standby_holds_everything, 30, "the standby extender to hold the leader's state")
    standby_before = ha.b.extender.state()
    held_cpu = sum(standby_before["nodes"][n]["core"]["allocated"] for n in ha.nodes)
    assert held_cpu == 6100
    assert sum(b["held"] for b in standby_before["backends"].values()) == 1

    # Kill the leader's scheduler and its extender at once, without warning.
    assert ha.a.scheduler is not None
    killed_at = time.monotonic()
    os.killpg(ha.a.scheduler.pid, signal.SIGKILL)
    ha.a.extender.kill(signal.SIGKILL)
    cp.stop_scheduler(ha.a.scheduler)

    # New work right away; only the standby can place it once it holds the lease.
    ha.podgroup("g2", 3)
    for i in range(3):
        ha.pod(f"g2-{i}", "1", group="g2")
    ha.pod("q1", "100m", qpu=True)
    wait_for(lambda: leads(ha.b.scheduler), 60, "scheduler B to take the lease")  # type: ignore[arg-type]
    lease_s = time.monotonic() - killed_at
    ha.wait_bound("g2-0", "g2-1", "g2-2", "q1")
    first_bound_s = time.monotonic() - killed_at
    ha.assert_no_overcommit()

    # Fill what is left: as many 1-cpu pods as the free cpu on each node allows, plus one
    # that must wait; a third qpu pod must wait too (two backends, both held).
    state = ha.b.extender.state()
    assert sum(state["nodes"][n]["core"]["allocated"] for n in ha.nodes) == 9200
    fits = sum(state["nodes"][n]["core"]["free"] // 1000 for n in ha.nodes)
    assert fits >= 1, state["nodes"]
    late = [f"late-{i}" for i in range(fits + 1)]
    for p in late:
        ha.pod(p, "1")
    ha.pod("q2", "100m", qpu=True)
    wait_for(
        lambda: sum(p in ha.bound() for p in late) == fits,
        60,
        f"{fits} late pods to be bound",
        ha.detail,
    )
    # The waiting ones were tried and refused: a decision, not a pause, before the checks.
    wait_for(
        lambda: {"q2", *(p for p in late if p not in ha.bound())} <= ha.refused(),
        60,
        "the pods that cannot fit to be refused",
        ha.detail,
    )
    bound = ha.bound()
    assert sum(p in bound for p in late) == fits, ha.detail()
    assert "q2" not in bound, "both backends are held: a third qpu pod must wait"
    ha.assert_no_overcommit()
    after = ha.b.extender.state()
    held = sum(after["nodes"][n]["core"]["allocated"] for n in ha.nodes)
    assert held == 9200 + fits * 1000
    assert all(after["backends"][name]["held"] for name in after["backends"])
    annotated = {
        p["metadata"]["name"]
        for p in ha.pods()
        if names.ANNOTATION_ALLOCATION in (p["metadata"].get("annotations") or {})
    }
    assert set(bound) <= annotated, "every pod was bound through an extender, with its record"
    report = {
        "lease_taken_after_kill_s": round(lease_s, 2),
        "new_gang_bound_after_kill_s": round(first_bound_s, 2),
    }
    print("failover " + json.dumps(report))
