"""Downward-API env resolution as the kubelet does it (testbed.downward)."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.downward import UnsupportedEnvSource, expand, resolve_env


def pod(env: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "x", "b": "2"},
            "annotations": {"fluence.flux-framework.org/backend": "ibm_fez"},
        },
        "spec": {
            "nodeName": "node-0",
            "serviceAccountName": "sa",
            "containers": [{"name": "main", "image": "busybox", "env": env}],
            **extra,
        },
        "status": {"podIP": "10.244.0.5"},
    }


def field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_annotation_and_missing_annotation() -> None:
    env = [
        {"name": "BACKEND", **field("metadata.annotations['fluence.flux-framework.org/backend']")},
        {"name": "MISSING", **field("metadata.annotations['nope']")},
    ]
    assert resolve_env(pod(env)) == {"main": {"BACKEND": "ibm_fez", "MISSING": ""}}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "p"),
        ("metadata.namespace", "ns"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "x"),
        ("metadata.labels['absent']", ""),
        ("metadata.labels", 'app="x"\nb="2"'),
        ("spec.nodeName", "node-0"),
        ("spec.serviceAccountName", "sa"),
        ("status.podIP", "10.244.0.5"),
    ],
)
def test_field_paths(path: str, value: str) -> None:
    assert resolve_env(pod([{"name": "V", **field(path)}]))["main"]["V"] == value


def test_values_expand_earlier_variables_in_order() -> None:
    env = [
        {"name": "A", "value": "one"},
        {"name": "B", "value": "$(A)-two-$(LATER)-$$(A)"},
        {"name": "LATER", "value": "three"},
    ]
    assert resolve_env(pod(env))["main"] == {
        "A": "one",
        "B": "one-two-$(LATER)-$(A)",
        "LATER": "three",
    }


def test_expand_leaves_unterminated_reference() -> None:
    assert expand("$(A", {"A": "x"}) == "$(A"


def test_init_containers_are_resolved_too() -> None:
    init = {"name": "init", "env": [{"name": "N", **field("metadata.name")}]}
    data = pod([], initContainers=[init])
    assert resolve_env(data) == {"init": {"N": "p"}, "main": {}}


def test_unsupported_sources_say_what_is_supported() -> None:
    env = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(UnsupportedEnvSource, match="only fieldRef"):
        resolve_env(pod(env))
    with pytest.raises(UnsupportedEnvSource, match="not supported"):
        resolve_env(pod([{"name": "X", **field("status.phase")}]))


def test_accepts_client_models() -> None:
    from kubernetes.client import (
        V1Container,
        V1EnvVar,
        V1EnvVarSource,
        V1ObjectFieldSelector,
        V1ObjectMeta,
        V1Pod,
        V1PodSpec,
    )

    model = V1Pod(
        metadata=V1ObjectMeta(name="m", annotations={"k": "v"}),
        spec=V1PodSpec(
            containers=[
                V1Container(
                    name="c",
                    env=[
                        V1EnvVar(
                            name="K",
                            value_from=V1EnvVarSource(
                                field_ref=V1ObjectFieldSelector(
                                    field_path="metadata.annotations['k']"
                                )
                            ),
                        )
                    ],
                )
            ]
        ),
    )
    assert resolve_env(model) == {"c": {"K": "v"}}
