"""Fake nodes: Node objects with a Ready status and no kubelet behind them.

The scheduler only reads Node objects, so a node created with its status set
(capacity = allocatable, condition Ready) is schedulable. The apiserver keeps
the status given on create; later changes go through the ``/status`` subresource.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from fluence import names
from testbed.rest import KubeRest

DEFAULT_CAPACITY: dict[str, str] = {"cpu": "4", "memory": "16Gi", "pods": "110"}
FAKE_NODE_LABEL = names.LABEL_FAKE_NODE
FAKE_KUBELET_VERSION = "v1.36.3-fake"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_manifest(
    name: str,
    capacity: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A Node body with status (capacity = allocatable, Ready) ready to POST.

    ``capacity`` entries override or extend :data:`DEFAULT_CAPACITY`.
    """
    resources = {**DEFAULT_CAPACITY, **(capacity or {})}
    now = _now()
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        FAKE_NODE_LABEL: "true",
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node managed by the fluence test harness",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "fake",
                "containerRuntimeVersion": "fake://0",
                "kubeletVersion": FAKE_KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def create_node(
    rest: KubeRest,
    name: str,
    capacity: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    created: dict[str, Any] = rest.create(
        "/api/v1/nodes", node_manifest(name, capacity, labels=labels, taints=taints)
    )
    return created


def merge_node_status(
    rest: KubeRest,
    name: str,
    *,
    capacity: Mapping[str, str | None] | None = None,
    allocatable: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """Merge resources into a node's capacity and allocatable; a None value removes one.

    Other resources (cpu, memory, pods, ...) are kept, the way the kubelet adds
    extended resources reported by device plugins.
    """
    status: dict[str, Any] = {}
    if capacity:
        status["capacity"] = dict(capacity)
    if allocatable:
        status["allocatable"] = dict(allocatable)
    if not status:
        raise ValueError(f"nothing to patch on node {name}: pass capacity and/or allocatable")
    patched: dict[str, Any] = rest.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status})
    return patched


def delete_node(rest: KubeRest, name: str) -> None:
    rest.delete(f"/api/v1/nodes/{name}")
