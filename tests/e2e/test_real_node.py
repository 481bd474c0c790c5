"""A real node: containerd, runc and the kubelet run fluence's pods on this machine.

What only a real kubelet shows: the container prints the ``QRMI_BACKEND`` the
kubelet resolved through the downward API from the annotation fluence wrote at
bind, the qpu comes from the kubelet's device manager (which asked our device
plugin to allocate it), and the device plugin re-registers when the kubelet
restarts while the pod's accounting stays as it was.

The machine must allow containers (root, cgroups, the Debian packages named in
``testbed.node``); elsewhere these tests skip with the reason, and fail under CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deviceplugin.manager import file_identity
from fluence import names
from fluence.pods import parse_quantity
from testbed import ControlPlane, images
from testbed.binaries import kubernetes_version
from testbed.node import DEVICE_PLUGIN_DIR, RealNode, pod_logs
from tests.e2e.test_extender_e2e import Extender, wait_for
from tests.e2e.test_webhook_admission import registered_webhook
from tests.support.deviceplugin_process import DevicePluginProcess
from tests.support.extender import fluence_scheduler
from tests.support.real_node import require_real_node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QPU = names.resource_name("qpu")
CAPACITY = 1000
"""Devices the device plugin advertises per type (its default)."""
NODE = "real-node"
SAID = "metadata.annotations['example.com/said']"
POD_TIMEOUT_S = 120.0


def registrations(plugin: DevicePluginProcess, resource: str) -> int:
    """How often the plugin of ``resource`` registered with a kubelet (its log says each time)."""
    count = 0
    for line in plugin.logs().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            count += record.get("msg") == "registered with the kubelet" and (
                record.get("resource") == resource
            )
    return count


@pytest.fixture(scope="module")
def real_node(control_plane: ControlPlane) -> Iterator[RealNode]:
    require_real_node()
    with RealNode(control_plane, NODE) as node:
        yield node


@pytest.fixture(scope="module")
def device_plugin(
    real_node: RealNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevicePluginProcess]:
    """fluence-deviceplugin registered with the real kubelet, as the DaemonSet runs it."""
    log_path = tmp_path_factory.mktemp("deviceplugin") / "deviceplugin.log"
    with DevicePluginProcess(
        DEVICE_PLUGIN_DIR, EXAMPLES / "resources.yaml", log_path=log_path
    ) as plugin:
        wait_for(
            lambda: registrations(plugin, QPU) >= 1,
            60,
            "the device plugin to register with the kubelet",
            plugin.logs,
        )
        wait_for(
            lambda: allocatable(real_node, QPU) == CAPACITY,
            60,
            "the kubelet to report the device plugin's qpu devices",
            plugin.logs,
        )
        yield plugin


@pytest.fixture(scope="module")
def fluence(
    control_plane: ControlPlane, real_node: RealNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Extender]:
    """The webhook, the extender and a kube-scheduler with the fluence profile."""
    workdir = tmp_path_factory.mktemp("real-node")
    with registered_webhook(control_plane, workdir, "fluence-webhook-real"):
        extender = Extender(workdir, control_plane.kubeconfig)
        with fluence_scheduler(control_plane, extender):
            yield extender


def allocatable(node: RealNode, resource: str) -> int:
    """What the node's status offers of ``resource`` (the API writes 1000 as "1k")."""
    got = node.control_plane.rest.get(f"/api/v1/nodes/{node.name}")
    value = got["status"].get("allocatable", {}).get(resource)
    return int(parse_quantity(value)) if value is not None else 0


def wait_phase(cp: ControlPlane, namespace: str, name: str, phase: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def reached() -> bool:
        found.clear()
        found.update(cp.rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))
        return bool(found.get("status", {}).get("phase") == phase)

    wait_for(reached, POD_TIMEOUT_S, f"pod {namespace}/{name} to be {phase}", lambda: str(found))
    return found


def test_the_node_registers_ready_with_the_machine_as_its_capacity(real_node: RealNode) -> None:
    node = real_node.wait_ready()
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2"
    assert info["containerRuntimeVersion"].startswith("containerd://1.")
    assert node["status"]["capacity"]["cpu"] == str(os.cpu_count())
    assert {"type": "InternalIP", "address": real_node.address} in node["status"]["addresses"]
    assert names.LABEL_FAKE_NODE not in node["metadata"].get("labels", {})


def test_a_container_reads_an_annotation_through_the_real_downward_api(
    control_plane: ControlPlane, real_node: RealNode, namespace: str
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "downward", "annotations": {"example.com/said": "hello"}},
        "spec": {
            "nodeName": real_node.name,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", 'echo "SAID=$SAID NODE=$NODE"'],
                    "env": [
                        {
                            "name": "SAID",
                            "valueFrom": {
                                "fieldRef": {
                                    "fieldPath": "metadata.annotations['example.com/said']"
                                }
                            },
                        },
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    ],
                }
            ],
        },
    }
    control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", body)
    wait_phase(control_plane, namespace, "downward", "Succeeded")
    assert pod_logs(control_plane, namespace, "downward").strip() == f"SAID=hello NODE={NODE}"


def quantum_pod(name: str) -> dict[str, Any]:
    """``examples/quantum-pod.yaml`` as shipped, kept to the real node."""
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / "quantum-pod.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return body


def test_the_kube_scheduler_image_runs_the_pinned_binary(
    control_plane: ControlPlane, real_node: RealNode, namespace: str
) -> None:
    """The image the shipped scheduler Deployment names, built here from the pinned binary."""
    version = kubernetes_version()
    real_node.load_image(
        images.ensure_scheduler_image(control_plane.binaries.kube_scheduler, version)
    )
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-scheduler-version"},
        "spec": {
            "nodeName": real_node.name,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "kube-scheduler",
                    "image": f"registry.k8s.io/kube-scheduler:{version}",
                    "command": ["kube-scheduler", "--version"],
                }
            ],
        },
    }
    control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", body)
    wait_phase(control_plane, namespace, "kube-scheduler-version", "Succeeded")
    printed = pod_logs(control_plane, namespace, "kube-scheduler-version").strip()
    assert printed == f"Kubernetes {version}"


DEVICE_PLUGIN_MANIFEST = ROOT / "deploy" / "fluence-resources.yaml"
DEVICE_PLUGIN_LABELS = "app.kubernetes.io/name=fluence,app.kubernetes.io/component=deviceplugin"


def test_the_shipped_device_plugin_daemonset_serves_the_real_kubelet(
    control_plane: ControlPlane, real_node: RealNode, fluence: Extender, namespace: str
) -> None:
    """deploy/fluence-resources.yaml applied with kubectl: the image built from the
    Dockerfile runs the device plugin on the real node, whose kubelet then hands a qpu
    to the quantum example."""
    real_node.load_image(images.ensure_fluence_image())
    assert real_node.has_image(images.fluence_image_name())
    # DaemonSet pods are placed by the default scheduler.
    scheduler = control_plane.start_scheduler(
        {"profiles": [{"schedulerName": "default-scheduler"}]}, name="default-scheduler"
    )

    def plugin_pod() -> dict[str, Any] | None:
        listed = control_plane.rest.get(
            "/api/v1/namespaces/kube-system/pods",
            labelSelector=DEVICE_PLUGIN_LABELS,
            fieldSelector=f"spec.nodeName={NODE}",
        )
        return listed["items"][0] if listed["items"] else None

    try:
        control_plane.kubectl("apply", "-f", str(DEVICE_PLUGIN_MANIFEST))
        pod = wait_for(
            lambda: (
                (p := plugin_pod()) is not None
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions", [])
                )
                and p
            ),
            POD_TIMEOUT_S,
            "the device plugin's pod to be Ready on the real node",
            lambda: str(plugin_pod()),
        )
        assert pod["spec"]["containers"][0]["image"] == f"fluence:{images.fluence_version()}"
        wait_for(
            lambda: allocatable(real_node, QPU) == CAPACITY,
            60,
            "the kubelet to report the DaemonSet's qpu devices",
        )
        body = quantum_pod("quantum-ds")
        body["spec"]["containers"][0]["command"] = [
            "sh",
            "-c",
            f'echo "QRMI_BACKEND=$QRMI_BACKEND"; echo "DEVICES=${names.devices_env("qpu")}"',
        ]
        control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", body)
        done = wait_phase(control_plane, namespace, "quantum-ds", "Succeeded")
        backend = done["metadata"]["annotations"][names.ANNOTATION_BACKEND]
        lines = pod_logs(control_plane, namespace, "quantum-ds").splitlines()
        assert lines[0] == f"QRMI_BACKEND={backend}"
        assert lines[1].startswith("DEVICES=qpu"), lines
        served = pod_logs(control_plane, "kube-system", pod["metadata"]["name"])
        assert "registered with the kubelet" in served
    finally:
        control_plane.kubectl("delete", "-f", str(DEVICE_PLUGIN_MANIFEST), "--wait=true")
        wait_for(lambda: plugin_pod() is None, 60, "the device plugin's pod to go")
        # Stopped by SIGTERM, the plugin removed its sockets: the next plugin starts clean.
        wait_for(
            lambda: not list(DEVICE_PLUGIN_DIR.glob("fluence-*.sock")),
            30,
            "the DaemonSet plugin's sockets to go",
        )
        control_plane.stop_scheduler(scheduler)


def test_the_quantum_example_prints_the_backend_fluence_chose(
    control_plane: ControlPlane,
    real_node: RealNode,
    device_plugin: DevicePluginProcess,
    fluence: Extender,
    namespace: str,
) -> None:
    body = quantum_pod("quantum-hello")
    command = body["spec"]["containers"][0]["command"]
    # The example's command, then the backend's attributes (the webhook's other downward-API
    # variables) and the variable the kubelet's device manager sets from our plugin's
    # Allocate answer.
    shown = ["FLUXION_BACKEND", "FLUXION_VENDOR", "FLUXION_QRMI_TYPE", names.devices_env("qpu")]
    body["spec"]["containers"][0]["command"] = [
        *command[:-1],
        command[-1] + "".join(f'; echo "{var}=${var}"' for var in shown),
    ]
    control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", body)
    pod = wait_phase(control_plane, namespace, "quantum-hello", "Succeeded")
    backend = pod["metadata"]["annotations"][names.ANNOTATION_BACKEND]
    assert backend in {"ibm_fez", "ibm_marrakesh"}
    assert pod["spec"]["nodeName"] == NODE
    lines = pod_logs(control_plane, namespace, "quantum-hello").splitlines()
    printed = dict(line.split("=", 1) for line in lines)
    assert lines[0] == f"QRMI_BACKEND={backend}"
    assert printed["FLUXION_BACKEND"] == backend
    assert printed["FLUXION_VENDOR"] == "ibm"
    assert printed["FLUXION_QRMI_TYPE"] == "qiskit-runtime-service"
    granted = printed[names.devices_env("qpu")].split(",")
    assert len(granted) == 1 and granted[0].startswith("qpu"), lines
    # The pod is done: fluence released its qpu.
    wait_for(
        lambda: f"{namespace}/quantum-hello" not in fluence.state()["pods"],
        30,
        "fluence to release the finished pod",
        lambda: str(fluence.state()),
    )


def test_a_kubelet_restart_keeps_pods_and_the_plugin_re_registers(
    control_plane: ControlPlane,
    real_node: RealNode,
    device_plugin: DevicePluginProcess,
    fluence: Extender,
    namespace: str,
) -> None:
    body = quantum_pod("long")
    body["spec"]["containers"][0]["command"] = ["sh", "-c", "echo started; sleep 3600"]
    control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", body)
    pod = wait_phase(control_plane, namespace, "long", "Running")
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    before = fluence.state()["pods"][f"{namespace}/long"]
    socket = DEVICE_PLUGIN_DIR / "kubelet.sock"
    old_socket = file_identity(socket)
    registered = registrations(device_plugin, QPU)

    real_node.restart_kubelet()
    new_socket_at = wait_for(
        lambda: file_identity(socket) not in (None, old_socket) and time.monotonic(),
        60,
        "the restarted kubelet's socket",
    )
    registered_at = wait_for(
        lambda: registrations(device_plugin, QPU) > registered and time.monotonic(),
        30,
        "the device plugin to register with the restarted kubelet",
        device_plugin.logs,
    )
    # Measured from the new socket, polled every 0.2 s: at most 5 s, as the plugin promises.
    assert registered_at - new_socket_at <= 5.0
    wait_for(lambda: allocatable(real_node, QPU) == CAPACITY, 30, "qpu capacity back on the node")
    pod = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/long")
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["running"]["startedAt"] == started
    assert status["restartCount"] == 0
    assert fluence.state()["pods"][f"{namespace}/long"] == before


def test_a_drained_node_is_released_and_its_pod_placed_elsewhere(
    control_plane: ControlPlane,
    real_node: RealNode,
    fluence: Extender,
    namespace: str,
) -> None:
    label = f"fluence-e2e/drain={namespace}"
    control_plane.kubectl("label", "node", NODE, label)
    spare: list[str] = []
    try:
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "schedulerName": names.SCHEDULER_NAME,
                        "nodeSelector": {"fluence-e2e/drain": namespace},
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox:1.36",
                                "command": ["sh", "-c", "sleep 3600"],
                                "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                            }
                        ],
                    },
                },
            },
        }
        control_plane.rest.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)

        def pods() -> list[dict[str, Any]]:
            listed = control_plane.rest.get(
                f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=web"
            )
            return [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]

        first = wait_for(
            lambda: [p for p in pods() if p.get("status", {}).get("phase") == "Running"],
            POD_TIMEOUT_S,
            "the Deployment's pod to run on the real node",
            lambda: str(pods()),
        )[0]
        assert first["spec"]["nodeName"] == NODE
        old = f"{namespace}/{first['metadata']['name']}"
        assert fluence.state()["pods"][old]["node"] == NODE
        # Somewhere to go: a simulated node with the same label.
        spare = control_plane.add_nodes(
            1, prefix=f"{namespace}-spare-", labels={"fluence-e2e/drain": namespace}
        )

        control_plane.kubectl("drain", NODE, "--ignore-daemonsets", "--force", "--timeout=90s")
        moved = wait_for(
            lambda: [
                p
                for p in pods()
                if p["metadata"]["name"] != first["metadata"]["name"]
                and p.get("status", {}).get("phase") == "Running"
            ],
            POD_TIMEOUT_S,
            "the Deployment's new pod to run on the spare node",
            lambda: str(pods()),
        )[0]
        assert moved["spec"]["nodeName"] == spare[0]
        new = f"{namespace}/{moved['metadata']['name']}"
        wait_for(
            lambda: old not in fluence.state()["pods"],
            30,
            "fluence to release the evicted pod",
            lambda: str(fluence.state()["pods"]),
        )
        assert fluence.state()["pods"][new]["node"] == spare[0]
        node = control_plane.rest.get(f"/api/v1/nodes/{NODE}")
        assert node["spec"].get("unschedulable") is True
    finally:
        control_plane.kubectl("uncordon", NODE)
        control_plane.kubectl("label", "node", NODE, "fluence-e2e/drain-")
        for name in spare:
            control_plane.delete_node(name)
