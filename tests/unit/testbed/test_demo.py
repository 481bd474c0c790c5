"""What the demo prints about pods and nodes, derived from stored objects alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fluence import names
from testbed.demo import (
    PodView,
    clear_previous_run,
    parse_args,
    pod_view,
    render_pods,
    render_usage,
    settled,
    table,
)

BACKEND_FIELD = names.annotation_fieldpath(names.ANNOTATION_BACKEND)


def quantum_pod(node: str = "node-1", backend: str = "ibm_fez") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "demo",
            "name": "quantum-hello",
            "annotations": {names.ANNOTATION_BACKEND: backend} if backend else {},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "env": [
                        {
                            "name": names.ENV_QRMI_BACKEND,
                            "valueFrom": {"fieldRef": {"fieldPath": BACKEND_FIELD}},
                        },
                        {
                            "name": names.ENV_FLUXION_BACKEND,
                            "valueFrom": {"fieldRef": {"fieldPath": BACKEND_FIELD}},
                        },
                        {"name": "OTHER", "value": "x"},
                    ],
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def pending_pod(message: str | None) -> dict[str, Any]:
    conditions = []
    if message is not None:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        )
    return {
        "metadata": {"namespace": "demo", "name": "gang-0", "labels": {names.LABEL_GROUP: "g"}},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Pending", "conditions": conditions},
    }


def test_a_quantum_pod_not_run_here_shows_the_annotation_each_variable_reads() -> None:
    view = pod_view(quantum_pod())
    assert view.key == "demo/quantum-hello" and view.node == "node-1" and view.bound
    assert view.backend == "ibm_fez"
    read = f"{names.ANNOTATION_BACKEND} = ibm_fez"
    assert view.env == {"QRMI_BACKEND": read, "FLUXION_BACKEND": read}
    text = render_pods([view])
    assert "demo/quantum-hello" in text and "ibm_fez" in text
    assert f"    QRMI_BACKEND <- {read}" in text.splitlines()
    assert f"    FLUXION_BACKEND <- {read}" in text.splitlines()
    assert "OTHER" not in text and "Printed by the container" not in text


def test_a_quantum_pod_that_ran_shows_what_its_container_printed() -> None:
    view = pod_view(quantum_pod(node="real-node"), output="QRMI_BACKEND=ibm_fez")
    text = render_pods([view]).splitlines()
    at = text.index("Printed by the container on the real node (its env set by the kubelet):")
    assert text[at + 1] == "  demo/quantum-hello: QRMI_BACKEND=ibm_fez"
    assert not any("<-" in line for line in text)


def test_an_unset_annotation_reads_as_empty_as_the_kubelet_does() -> None:
    view = pod_view(quantum_pod(backend=""))
    assert view.env["QRMI_BACKEND"] == f"{names.ANNOTATION_BACKEND} = "


def test_pending_pod_reports_the_scheduler_message_and_its_group() -> None:
    view = pod_view(pending_pod("waiting for 1 more pod(s) of group demo/g"))
    assert not view.bound and view.group == "g" and view.env == {}
    text = render_pods([view])
    assert "(pending)" in text
    assert "demo/gang-0: waiting for 1 more pod(s) of group demo/g" in text


def test_group_comes_from_the_scheduling_group_before_the_label() -> None:
    pod = pending_pod(None)
    pod["spec"]["schedulingGroup"] = {"podGroupName": "training"}
    assert pod_view(pod).group == "training"


def test_settled_needs_a_node_or_a_verdict_for_every_pod() -> None:
    bound = pod_view(quantum_pod())
    assert settled([bound])
    assert not settled([bound, pod_view(pending_pod(None))])
    assert settled([bound, pod_view(pending_pod("does not fit now"))])
    assert not settled([])


def test_usage_table_lists_every_node_with_used_over_capacity_and_the_backends() -> None:
    state = {
        "nodes": {
            "node-0": {
                "core": {"capacity": 8000, "allocated": 2000, "free": 6000},
                "memory": {"capacity": 32768, "allocated": 1024, "free": 31744},
            },
            "node-9": {"core": {"capacity": 1, "allocated": 0, "free": 1}},
        },
        "backends": {
            "ibm_fez": {"held": True, "pod": "demo/quantum-hello"},
            "ibm_marrakesh": {"held": False, "pod": None},
        },
    }
    text = render_usage(state, ["node-0", "node-1"])
    lines = text.splitlines()
    assert "core used/cap (millicores)" in lines[0] and "memory used/cap (MiB)" in lines[0]
    assert lines[2].split() == ["node-0", "2000/8000", "1024/32768"]
    assert lines[3].split() == ["node-1", "-", "-"]
    assert "node-9" not in text
    assert "ibm_fez: held by demo/quantum-hello" in text and "ibm_marrakesh: free" in text


def test_table_aligns_columns_to_the_widest_cell() -> None:
    out = table(["A", "BB"], [["xxx", "y"], ["z", "wwww"]]).splitlines()
    assert out == ["A    BB", "---  ----", "xxx  y", "z    wwww"]


def test_pod_view_equality_detects_change() -> None:
    a = PodView("k", "", "Pending", "", "")
    assert a == PodView("k", "", "Pending", "", "")
    assert a != PodView("k", "", "Running", "n", "")


def test_options_parse_and_reject_zero_nodes() -> None:
    options = parse_args(["--nodes", "3", "--keep-running"])
    assert options.nodes == 3 and options.keep_running and options.workdir is None
    assert options.real_node and not parse_args(["--no-real-node"]).real_node
    with pytest.raises(SystemExit) as exc:
        parse_args(["--nodes", "0"])
    assert exc.value.code == 2


def test_clear_previous_run_removes_only_what_a_run_creates(tmp_path: Path) -> None:
    (tmp_path / "etcd" / "member").mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    (tmp_path / "admin.kubeconfig").write_text("x")
    (tmp_path / "notes.txt").write_text("mine")
    assert clear_previous_run(tmp_path) == ["etcd", "logs", "admin.kubeconfig"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert clear_previous_run(tmp_path) == []
