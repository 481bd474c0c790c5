"""A control plane of KWOK nodes ruled by kube-scheduler alone or with fluence: for the benches.

The benchmarks that compare fluence with kube-scheduler's own rules run each rule
on a fresh control plane with the same nodes, so no rule inherits another's state:

- ``default``: kube-scheduler's default profile, pods without groups;
- ``native``: the same profile with kube-scheduler's gang scheduling (the pods name a
  ``scheduling.k8s.io`` PodGroup) and, where asked, its topology-aware placement;
- ``fluence``: the same PodGroups and pods for a kube-scheduler whose profile calls
  ``fluence-extender``;
- ``null``: ``native`` with ``bench/null_extender.py`` in the profile (keeps the first
  candidate kube-scheduler offers, binds): what being an extender at all costs, the
  baseline "fluence / null" is read against.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.extender_throughput import Extender
from fluence import names
from testbed import ControlPlane
from testbed.cluster import selected_release
from testbed.schedconfig import scheduler_config


@dataclass
class NodeSet:
    """``count`` KWOK nodes named ``<prefix><i>``, all with ``labels``."""

    prefix: str
    count: int
    capacity: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RuleCluster:
    rule: str
    cp: ControlPlane
    scheduler_name: str
    podgroups_path: str

    def pods_path(self, namespace: str) -> str:
        return f"/api/v1/namespaces/{namespace}/pods"

    def groups_path(self, namespace: str) -> str:
        return self.podgroups_path.format(namespace=namespace)


def podgroup(
    name: str, min_count: int, topology: str = "", priority_class: str = ""
) -> dict[str, Any]:
    """A gang PodGroup in the served version; ``topology``: one domain of that label.

    ``priority_class`` must be its pods' own: kube-scheduler places a group only when
    every pod has the group's priority. The benches' gangs are all or nothing in
    preemption too (an MPI job loses every rank with one), which v1beta1 must be told:
    its default is ``single``.
    """
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if selected_release().podgroup_version == "v1beta1":
        spec["disruptionMode"] = {"all": {}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": f"scheduling.k8s.io/{selected_release().podgroup_version}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def one_cpu_pod(
    name: str, scheduler_name: str, group: str = "", labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pod of one cpu for ``scheduler_name``, in PodGroup ``group`` when given."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
            }
        ],
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


@contextlib.contextmanager
def rule_cluster(
    rule: str,
    node_sets: Sequence[NodeSet],
    namespace: str,
    log_dir: Path,
    *,
    topology: bool = False,
    extender_env: Mapping[str, str] | None = None,
    max_backoff_s: int = 2,
) -> Iterator[RuleCluster]:
    """A fresh control plane with KWOK nodes and one scheduler ruling by ``rule``.

    ``topology`` turns on kube-scheduler's topology-aware workload scheduling;
    ``max_backoff_s`` is its ``podMaxBackoffSeconds`` (a pod group's is that times the
    square root of its size).
    """
    release = selected_release()
    gates = release.with_topology() if topology else release.feature_gates
    with ControlPlane(feature_gates=gates) as cp:
        cp.start_kwok()
        for s in node_sets:
            cp.add_nodes(s.count, prefix=s.prefix, capacity=s.capacity, labels=s.labels)
        cp.create_namespace(namespace)
        log_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            if rule in ("fluence", "null"):
                extender = stack.enter_context(
                    Extender(
                        cp.kubeconfig,
                        log_dir / f"extender-{rule}.log",
                        env=extender_env,
                        null=rule == "null",
                    )
                )
                config = scheduler_config(extender.url)
                scheduler_name = names.SCHEDULER_NAME
            else:
                config = scheduler_config(None, profile="default-scheduler")
                scheduler_name = "default-scheduler"
            config["podMaxBackoffSeconds"] = max_backoff_s
            cp.start_scheduler(config, name=rule)
            groups = (
                f"/apis/scheduling.k8s.io/{release.podgroup_version}"
                "/namespaces/{namespace}/podgroups"
            )
            yield RuleCluster(rule, cp, scheduler_name, groups)
