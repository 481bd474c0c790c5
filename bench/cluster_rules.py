"""A control plane of KWOK nodes ruled by kube-scheduler alone or with fluence: for the benches.

The benchmarks that compare fluence with kube-scheduler's own rules run each rule
on a fresh control plane with the same nodes, so no rule inherits another's state:

- ``default``: kube-scheduler's default profile, pods without groups;
- ``native``: the same profile with kube-scheduler's gang scheduling (the pods name a
  ``scheduling.k8s.io`` PodGroup) and, where asked, its topology-aware placement;
- ``native-packed``: ``native`` with the scoring a user who wants packing sets
  (``NodeResourcesFit`` with the ``MostAllocated`` strategy);
- ``fluence``: the same PodGroups and pods for a kube-scheduler whose profile calls
  ``fluence-extender`` (filter and bind for every pod);
- ``queue``: ``fluence``'s scheduler and extender, but the pods carry the scheduling gate
  ``fluence.flux-framework.org/queue`` (as the webhook would add it): the extender's
  queue places whole groups and releases each pod pinned to its node, kube-scheduler
  then binds it (:meth:`RuleCluster.pod` adds the gate);
- ``queue-only``: the gated pods and the extender's queue of ``queue``, but the profile
  calls no extender: kube-scheduler binds each pre-placed pod itself, no extender call;
- ``null``: ``native`` with ``bench/null_extender.py`` in the profile (passes every
  candidate through, binds): what being an extender at all costs, the baseline
  "fluence / null" is read against.
- ``null-queue``: ``default``'s scheduler, but the pods carry the queue's gate and
  ``bench/null_queue.py`` lifts it from each as it comes (no decision, no pin): what
  gating at admission costs in itself, the baseline "queue-only / null-queue" is read
  against.

kube-scheduler runs at its strongest, as large clusters run it (and as scheduler_perf
measures it): client QPS and burst 5,000 (``client_qps``; 0: kube-scheduler's own
defaults, 50 and 100), and the rules without an extender score the adaptive share of
nodes it defaults to. The rules with an extender keep ``percentageOfNodesToScore: 100``:
kube-scheduler must offer the extender every feasible node, or fluence could not be
offered the node it chose. :func:`scheduler_settings` says which settings a row used.

The extenders run without the queue's Lease (``FLUENCE_QUEUE_LEASE_NAMESPACE=""``,
see :class:`bench.extender_throughput.Extender`): one extender, always the queue's leader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.extender_throughput import (
    CLIENT_QPS,
    EXTENDER_RULES,
    Extender,
    null_queue,
    scheduler_settings,
    scheduling_refusals,
    tune_scheduler,
)
from fluence import names
from testbed import ControlPlane
from testbed.cluster import selected_release
from testbed.schedconfig import scheduler_config

MOST_ALLOCATED: dict[str, Any] = {
    "name": "NodeResourcesFit",
    "args": {
        "scoringStrategy": {
            "type": "MostAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        }
    },
}
"""kube-scheduler's packing score, as a user who wants few racks busy configures it."""


@dataclass
class NodeSet:
    """``count`` KWOK nodes named ``<prefix><i>``, all with ``labels``."""

    prefix: str
    count: int
    capacity: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)


RULES = (
    "default",
    "native",
    "native-packed",
    "fluence",
    "queue",
    "queue-only",
    "null",
    "null-queue",
)


@dataclass
class RuleCluster:
    rule: str
    cp: ControlPlane
    scheduler_name: str
    podgroups_path: str
    settings: dict[str, Any] = field(default_factory=dict)
    """kube-scheduler's settings under this rule (:func:`scheduler_settings`), for the rows."""

    @property
    def gated(self) -> bool:
        """The rule's pods wait behind the queue's scheduling gate (rule ``queue``)."""
        return self.rule in ("queue", "queue-only", "null-queue")

    def pod(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as this rule creates it: with the queue's gate under ``queue``."""
        return queue_gated(body) if self.gated else body

    def pods_path(self, namespace: str) -> str:
        return f"/api/v1/namespaces/{namespace}/pods"

    def groups_path(self, namespace: str) -> str:
        return self.podgroups_path.format(namespace=namespace)

    def refusals(self, namespace: str) -> int:
        """kube-scheduler's refusals in ``namespace`` (:func:`scheduling_refusals`)."""
        return scheduling_refusals(self.cp, namespace)


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


def queue_gated(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a pod) with the queue's scheduling gate added, as fluence's webhook adds it."""
    gates = body["spec"].setdefault("schedulingGates", [])
    if {"name": names.QUEUE_GATE} not in gates:
        gates.append({"name": names.QUEUE_GATE})
    return body


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
    client_qps: int = CLIENT_QPS,
    label: str = "",
) -> Iterator[RuleCluster]:
    """A fresh control plane with KWOK nodes and one scheduler ruling by ``rule``.

    ``topology`` turns on kube-scheduler's topology-aware workload scheduling;
    ``max_backoff_s`` is its ``podMaxBackoffSeconds`` (a pod group's is that times the
    square root of its size); ``client_qps`` its client QPS and burst (0: its defaults).
    The extender logs to ``log_dir/extender-<label or rule>.log`` (written afresh).
    """
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not one of {RULES}")
    release = selected_release()
    gates = release.with_topology() if topology else release.feature_gates
    with ControlPlane(feature_gates=gates) as cp:
        cp.start_kwok()
        for s in node_sets:
            cp.add_nodes(s.count, prefix=s.prefix, capacity=s.capacity, labels=s.labels)
        cp.create_namespace(namespace)
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"extender-{label or rule}.log"
        log_path.unlink(missing_ok=True)
        with contextlib.ExitStack() as stack:
            extended = rule in EXTENDER_RULES
            if extended or rule == "queue-only":
                extender = stack.enter_context(
                    Extender(
                        cp.kubeconfig,
                        log_path,
                        env=extender_env,
                        null=rule == "null",
                    )
                )
                # queue-only: the fluence profile calls no extender; the queue alone places.
                config = scheduler_config(extender.url if extended else None)
                scheduler_name = names.SCHEDULER_NAME
            else:
                if rule == "null-queue":
                    stack.enter_context(null_queue(cp.kubeconfig, log_path))
                config = scheduler_config(None, profile="default-scheduler")
                if rule == "native-packed":
                    config["profiles"][0]["pluginConfig"] = [MOST_ALLOCATED]
                scheduler_name = "default-scheduler"
            config["podMaxBackoffSeconds"] = max_backoff_s
            tune_scheduler(config, extender=extended, client_qps=client_qps)
            cp.start_scheduler(config, name=rule)
            groups = (
                f"/apis/scheduling.k8s.io/{release.podgroup_version}"
                "/namespaces/{namespace}/podgroups"
            )
            settings = scheduler_settings(config)
            yield RuleCluster(rule, cp, scheduler_name, groups, settings)
