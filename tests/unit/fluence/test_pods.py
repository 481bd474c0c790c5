"""Quantities and per-pod requests, counted the way the kubelet counts them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluence.pods import (
    Node,
    Pod,
    QuantityError,
    cpu_millicores,
    decode_node,
    decode_pod,
    memory_mib,
    node_capacity,
    parse_quantity,
    pod_requests,
)


def make_pod(
    name: str,
    *,
    ns: str = "default",
    cpu: str | None = "1",
    memory: str | None = None,
    extra: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    group: str | None = None,
    node: str = "",
    phase: str = "Pending",
    scheduler: str = "fluence",
    uid: str | None = None,
    tolerations: list[dict[str, str]] | None = None,
    raw: bool = False,
) -> Any:
    """A pod as the API server would send it (JSON), decoded unless ``raw``."""
    req: dict[str, str] = {}
    if cpu:
        req["cpu"] = cpu
    if memory:
        req["memory"] = memory
    req.update(extra or {})
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "app", "image": "busybox", "resources": {"requests": req}}],
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeName"] = node
    if tolerations:
        spec["tolerations"] = tolerations
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid or f"uid-{ns}-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }
    return doc if raw else decode_pod(json.dumps(doc))


def make_node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    gpu: str | None = None,
    extra: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
    raw: bool = False,
) -> Any:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpu:
        alloc["nvidia.com/gpu"] = gpu
    alloc.update(extra or {})
    doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"capacity": dict(alloc), "allocatable": alloc},
    }
    return doc if raw else decode_node(json.dumps(doc))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("2", "2"),
        ("1.5", "1.5"),
        ("8Gi", str(8 * 2**30)),
        ("100M", "100000000"),
        ("1e3", "1000"),
        ("1k", "1000"),
        ("2Ki", "2048"),
        ("3E", str(3 * 10**18)),
        ("250u", "0.00025"),
    ],
)
def test_quantities_parse_to_exact_values(text: str, value: str) -> None:
    assert parse_quantity(text) == parse_quantity(value)


@pytest.mark.parametrize("bad", ["", "abc", "1Xi", "--1"])
def test_bad_quantities_say_what_is_wrong(bad: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(bad)


def test_cpu_is_millicores_rounded_up_and_memory_rounds_by_side() -> None:
    assert cpu_millicores("250m") == 250
    assert cpu_millicores("1n") == 1
    assert cpu_millicores("3") == 3000
    assert memory_mib("100M", round_up=True) == 96
    assert memory_mib("100M", round_up=False) == 95
    assert memory_mib("8Gi", round_up=True) == 8192


def test_pod_requests_sum_containers_take_max_with_init_and_add_overhead() -> None:
    doc = make_pod("p", raw=True)
    doc["spec"]["containers"] = [
        {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "250m", "nvidia.com/gpu": "1"}}},
        {"name": "c", "resources": {"limits": {"fluxion.flux-framework.org/qpu": "1"}}},
    ]
    doc["spec"]["initContainers"] = [
        {"name": "i1", "resources": {"requests": {"cpu": "2", "memory": "10Mi"}}},
    ]
    doc["spec"]["overhead"] = {"cpu": "100m", "memory": "1Mi"}
    pod = decode_pod(json.dumps(doc))
    assert pod_requests(pod) == {"core": 2100, "gpu": 1, "memory": 1025, "qpu": 1}


def test_unrelated_extended_resources_are_ignored() -> None:
    pod = make_pod("p", cpu="1", extra={"example.com/foo": "3"})
    assert pod_requests(pod) == {"core": 1000}


def test_node_capacity_rounds_down_and_keeps_only_node_types() -> None:
    node = make_node(
        "n", cpu="3800m", memory="7900Mi", gpu="2", extra={"fluxion.flux-framework.org/qpu": "1000"}
    )
    assert isinstance(node, Node)
    assert node_capacity(node) == {"core": 3800, "memory": 7900, "gpu": 2}


def test_decoding_ignores_fields_it_does_not_model() -> None:
    doc = make_pod("p", raw=True)
    doc["metadata"]["managedFields"] = [{"manager": "x"}]
    doc["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    pod = decode_pod(json.dumps(doc))
    assert isinstance(pod, Pod)
    assert pod.key == "default/p"
    assert not pod.bound and not pod.terminal
