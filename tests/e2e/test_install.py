"""fluence installed as users install it, running as pods on the real node.

Once with ``kubectl apply`` of ``deploy/fluence-resources.yaml`` and
``deploy/fluence.yaml`` (without cert-manager, as their header says: the webhook's
certificate from ``fluence-webhook certs``), once with ``helm install`` of the chart
(its certificate Job run from the chart's CronJob). Either way the webhook gets the
client CA of the control plane's API server (the ConfigMap the header asks for), so
only the API server, presenting its webhook client certificate, gets a review
answered. Either way the scheduler pod (the
kube-scheduler image built from the pinned binary, loading the shipped
KubeSchedulerConfiguration, with the extender beside it), the webhook and the device
plugin run from the image built from the Dockerfile, each under its own ServiceAccount;
gangs run on KWOK nodes, the quantum example on the real node.

The machine must allow containers (see ``testbed.node``); elsewhere these tests skip
with the reason, and fail under CI.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fluence import names
from fluence.pods import parse_quantity
from testbed import ControlPlane, images
from testbed.binaries import kubernetes_version
from testbed.kwok import ANNOTATION_EXIT_AFTER, ANNOTATION_EXIT_CODE
from testbed.node import RealNode, pod_logs
from testbed.rest import KubeApiError
from tests.e2e.test_extender_e2e import wait_for
from tests.e2e.test_rbac_matrix import (
    CERTS,
    assert_rights_as_used,
    can_i_list,
    created,
    reference_accounts,
)
from tests.support.helm import ensure_helm
from tests.support.real_node import require_real_node

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLES = ROOT / "examples"
SYSTEM = "kube-system"
NS = "tenant"
NODE = "real-node"
QPU = names.resource_name("qpu")
KWOK_NODES = 3
KWOK_CPU = 2
FULL_CPU = "1500m"
"""More than half a simulated node, less than it all (the device plugin's pod is there too)."""
TIMEOUT_S = 240.0
COMPONENT = "app.kubernetes.io/component"
SERVICE_ACCOUNTS = {
    "scheduler": "fluence-scheduler",
    "webhook": "fluence-webhook",
    "deviceplugin": "fluence-deviceplugin",
}
"""The ServiceAccount each shipped component's pod runs under."""
CONTAINER_ACCOUNTS = {
    ("scheduler", "kube-scheduler"): "fluence-scheduler",
    ("scheduler", "extender"): "fluence-extender",
    ("webhook", "webhook"): "fluence-webhook",
    ("deviceplugin", "deviceplugin"): None,
}
"""Whose token each container holds (None: none; the device plugin talks to its kubelet)."""
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where in-cluster clients read their token."""


@dataclass
class Installed:
    how: str
    cp: ControlPlane
    node: RealNode
    workdir: Path

    def kubectl(self, *args: str) -> str:
        return self.cp.kubectl(*args)

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        got = self.cp.rest.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)
        return list(got["items"])

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.cp.rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def component_pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/name=fluence,{COMPONENT}={component}"
        return self.pods(SYSTEM, selector)


def _manifests_without_cert_manager(workdir: Path) -> Path:
    """deploy/fluence.yaml less its cert-manager Issuers and Certificates (none here)."""
    docs = [
        doc
        for doc in yaml.safe_load_all((DEPLOY / "fluence.yaml").read_text())
        if doc and not str(doc["apiVersion"]).startswith("cert-manager.io/")
    ]
    path = workdir / "fluence.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _install_with_kubectl(cp: ControlPlane, workdir: Path) -> None:
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    cp.kubectl(
        "-n",
        SYSTEM,
        "create",
        "secret",
        "generic",
        "fluence-record-key",
        f"--from-literal=key={key}",
    )
    cp.kubectl(
        "apply",
        "-f",
        str(DEPLOY / "fluence-resources.yaml"),
        "-f",
        str(_manifests_without_cert_manager(workdir)),
    )
    # The command the manifest's header gives for clusters without cert-manager.
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("fluence-webhook")),
            "certs",
            "--namespace",
            SYSTEM,
            "--service",
            "fluence-webhook",
            "--secret",
            "fluence-webhook-tls",
            "--webhook-config",
            "fluence-webhook",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _install_with_helm(cp: ControlPlane) -> None:
    done = subprocess.run(
        [
            str(ensure_helm()),
            "install",
            "fluence",
            str(DEPLOY / "helm" / "fluence"),
            f"--kubeconfig={cp.kubeconfig}",
            "--namespace",
            SYSTEM,
            "--set",
            "certManager.enabled=false",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # What the chart's NOTES ask for without cert-manager, run in the cluster: the first
    # certificate from the chart's own CronJob, under its ServiceAccount.
    cp.kubectl(
        "-n",
        SYSTEM,
        "create",
        "job",
        "fluence-webhook-certs-first",
        "--from=cronjob/fluence-webhook-certs",
    )
    cp.kubectl(
        "-n",
        SYSTEM,
        "wait",
        "--for=condition=Complete",
        "--timeout=240s",
        "job/fluence-webhook-certs-first",
    )


def _uninstall_with_kubectl(cp: ControlPlane, workdir: Path) -> None:
    cp.kubectl(
        "delete",
        "-f",
        str(DEPLOY / "fluence-resources.yaml"),
        "-f",
        str(workdir / "fluence.yaml"),
        "--cascade=foreground",
        "--wait=true",
        f"--timeout={TIMEOUT_S:.0f}s",
    )


def _uninstall_with_helm(cp: ControlPlane) -> None:
    done = subprocess.run(
        [
            str(ensure_helm()),
            "uninstall",
            "fluence",
            f"--kubeconfig={cp.kubeconfig}",
            "--namespace",
            SYSTEM,
            "--cascade=foreground",
            "--wait",
            f"--timeout={TIMEOUT_S:.0f}s",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _allocatable(cp: ControlPlane, node: str, resource: str) -> int:
    value = cp.rest.get(f"/api/v1/nodes/{node}")["status"].get("allocatable", {}).get(resource)
    return int(parse_quantity(value)) if value is not None else 0


@pytest.fixture(scope="module", params=["kubectl", "helm"])
def installed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    require_real_node()
    how = str(request.param)
    workdir = tmp_path_factory.mktemp(f"install-{how}")
    with ControlPlane(pod_network=True) as cp, RealNode(cp, NODE) as node:
        node.load_image(images.ensure_fluence_image())
        node.load_image(
            images.ensure_scheduler_image(cp.binaries.kube_scheduler, kubernetes_version())
        )
        # The cluster's own scheduler places fluence's Deployments and DaemonSet.
        cp.start_scheduler(
            {"profiles": [{"schedulerName": "default-scheduler"}]}, name="default-scheduler"
        )
        # What the cluster admin does for mutual TLS: the API server already presents its
        # certificate (the control plane's AdmissionConfiguration); the webhook gets its CA.
        cp.kubectl(
            "-n",
            SYSTEM,
            "create",
            "configmap",
            names.WEBHOOK_CLIENT_CA_CONFIGMAP,
            f"--from-file={names.WEBHOOK_CLIENT_CA_KEY}={cp.webhook_client.ca_file}",
        )
        if how == "kubectl":
            _install_with_kubectl(cp, workdir)
        else:
            _install_with_helm(cp)
        for workload in (
            "deployment/fluence-webhook",
            "deployment/fluence-scheduler",
            "daemonset/fluence-deviceplugin",
        ):
            cp.kubectl("-n", SYSTEM, "rollout", "status", workload, f"--timeout={TIMEOUT_S:.0f}s")
        wait_for(
            lambda: _allocatable(cp, NODE, QPU) > 0,
            60,
            "the kubelet to report the device plugin's qpu",
        )
        # Gangs run on simulated nodes, added once fluence runs on the real one.
        cp.start_kwok()
        cp.add_nodes(KWOK_NODES, prefix="sim-", capacity={"cpu": str(KWOK_CPU), "memory": "4Gi"})
        cp.create_namespace(NS)
        yield Installed(how, cp, node, workdir)
        # Uninstalled as users do; its controllers would otherwise replace the pods the
        # node's stop deletes.
        if how == "kubectl":
            _uninstall_with_kubectl(cp, workdir)
        else:
            _uninstall_with_helm(cp)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_each_binary_runs_from_the_built_image_under_its_own_service_account(
    installed: Installed,
) -> None:
    fluence_image = f"fluence:{images.fluence_version()}"
    for component, account in SERVICE_ACCOUNTS.items():
        pods = installed.component_pods(component)
        on_node = [p for p in pods if p["spec"].get("nodeName") == NODE]
        assert on_node, f"no {component} pod on the real node: {pods}"
        for pod in on_node:
            assert pod["spec"]["serviceAccountName"] == account
            images_run = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
            if component == "scheduler":
                assert images_run == {
                    "kube-scheduler": f"registry.k8s.io/kube-scheduler:{kubernetes_version()}",
                    "extender": fluence_image,
                }
            else:
                assert set(images_run.values()) == {fluence_image}
    # The scheduler loads the shipped KubeSchedulerConfiguration (the ConfigMap), and
    # once serving, neither it nor any fluence binary was refused anything by the API
    # server. (Before: a pod may start before the apiserver's RBAC cache has the bindings
    # applied with it, and list again once it has.)
    scheduler = installed.component_pods("scheduler")[0]
    volumes = {v["name"]: v for v in scheduler["spec"]["volumes"]}
    assert volumes["scheduler-config"]["configMap"]["name"] == "fluence-scheduler-config"
    for component in SERVICE_ACCOUNTS:
        for pod in installed.component_pods(component):
            if pod["spec"].get("nodeName") != NODE:
                continue
            name = pod["metadata"]["name"]
            ready = functools.partial(_pod_ready, installed, name)
            why = functools.partial(_why_not_ready, installed, name)
            wait_for(ready, 60, f"{name} to be Ready", why)
            ready_at = _ready_since(installed.pod(SYSTEM, name))
            for container in pod["spec"]["containers"]:
                logs = installed.kubectl(
                    "logs", "-n", SYSTEM, name, "-c", container["name"], "--timestamps"
                )
                serving = [line for line in logs.splitlines() if line[:19] > ready_at[:19]]
                refused = [line for line in serving if "forbidden" in line.lower()]
                assert not refused, (name, container["name"], refused[:5])


def test_the_webhook_answers_only_the_api_servers_certificate(installed: Installed) -> None:
    """The mode is mtls (its log line, /readyz on the probe port), and a forged review posted
    to a webhook pod without the API server's client certificate is refused in the TLS
    handshake; the gangs below are wired through the API server all the same."""
    pods = [p for p in installed.component_pods("webhook") if p["spec"].get("nodeName") == NODE]
    assert pods, "no webhook pod on the real node"
    for pod in pods:
        name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
        logs = installed.kubectl("logs", "-n", SYSTEM, name, "-c", "webhook")
        said = [json.loads(line) for line in logs.splitlines() if '"client_auth"' in line]
        assert [line["client_auth"] for line in said] == ["mtls"], logs[-2000:]
        ready = httpx.get(f"http://{ip}:8080/readyz", timeout=10)
        assert ready.status_code == 200 and "client auth: mtls" in ready.text
        forged = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "forged",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": SYSTEM,
                "userInfo": {"username": "admin", "groups": ["system:masters"]},
                "object": {"metadata": {"labels": {names.LABEL_GROUP: "forged"}}, "spec": {}},
            },
        }
        with pytest.raises(httpx.TransportError):
            httpx.post(f"https://{ip}:8443/mutate", json=forged, verify=False, timeout=10)
        plain = httpx.post(f"http://{ip}:8080/mutate", json=forged, timeout=10)
        assert plain.status_code == 403


def _container_identity(installed: Installed, pod: dict[str, Any], container: str) -> str | None:
    """Who the API server takes the token a container reads for: its volume, read from the
    kubelet's directory on the real node, reviewed by the API server."""
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    mounts = [m for m in spec.get("volumeMounts", []) if m["mountPath"] == TOKEN_DIR]
    if not mounts:
        return None
    (mount,) = mounts
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    plugin = "kubernetes.io~projected" if "projected" in volume else "kubernetes.io~secret"
    volumes = installed.node.kubelet_root / "pods" / pod["metadata"]["uid"] / "volumes"
    token = (volumes / plugin / volume["name"] / "token").read_text()
    review = installed.cp.rest.create(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    assert review["status"].get("authenticated"), review["status"]
    return str(review["status"]["user"]["username"])


def test_each_container_holds_only_its_own_accounts_token(installed: Installed) -> None:
    """The extender shares the scheduler's pod, not its identity: each container mounts
    the token of its own account and no other."""
    for (component, container), account in CONTAINER_ACCOUNTS.items():
        pods = [p for p in installed.component_pods(component) if p["spec"].get("nodeName") == NODE]
        assert pods, f"no {component} pod on the real node"
        for pod in pods:
            expected = None if account is None else f"system:serviceaccount:{SYSTEM}:{account}"
            assert _container_identity(installed, pod, container) == expected, (
                pod["metadata"]["name"],
                container,
            )


def _why_not_ready(installed: Installed, name: str) -> str:
    """The pod's conditions, container states and events, for a pod that stays unready."""
    status = installed.pod(SYSTEM, name).get("status", {})
    events = installed.kubectl(
        "get", "events", "-n", SYSTEM, f"--field-selector=involvedObject.name={name}"
    )
    return (
        f"conditions: {status.get('conditions')}\n"
        f"containers: {status.get('containerStatuses')}\nevents:\n{events}"
    )


def _pod_ready(installed: Installed, name: str) -> bool:
    return _ready(installed.pod(SYSTEM, name))


def _ready_since(pod: dict[str, Any]) -> str:
    """When the pod last became Ready (RFC 3339, as log timestamps are)."""
    for c in pod.get("status", {}).get("conditions", []):
        if c["type"] == "Ready" and c["status"] == "True":
            return str(c["lastTransitionTime"])
    raise AssertionError(f"{pod['metadata']['name']} is not Ready")


def test_the_installed_identities_may_do_what_their_code_does_and_no_more(
    installed: Installed,
) -> None:
    with created(installed.cp, reference_accounts()):
        assert_rights_as_used(installed.cp)
        if installed.how == "helm":
            everyone = can_i_list(installed.cp, "bound-to-nothing")
            assert can_i_list(installed.cp, "fluence-webhook-certs") - everyone == CERTS


def test_the_quantum_example_prints_the_backend_fluence_chose_on_the_real_node(
    installed: Installed,
) -> None:
    installed.kubectl("-n", NS, "apply", "-f", str(EXAMPLES / "quantum-pod.yaml"))
    wait_for(
        lambda: installed.pod(NS, "quantum-hello")["status"].get("phase") == "Succeeded",
        TIMEOUT_S,
        "the quantum example to succeed",
        lambda: str(installed.pod(NS, "quantum-hello")["status"]),
    )
    pod = installed.pod(NS, "quantum-hello")
    assert pod["spec"]["nodeName"] == NODE
    backend = pod["metadata"]["annotations"][names.ANNOTATION_BACKEND]
    assert backend in ("ibm_fez", "ibm_marrakesh")
    printed = pod_logs(installed.cp, NS, "quantum-hello").strip()
    assert printed == f"QRMI_BACKEND={backend}"
    installed.kubectl("-n", NS, "delete", "pod", "quantum-hello", "--wait=true")


def _on_simulated_nodes(template: dict[str, Any], exit_after: str = "2s") -> None:
    """Pin a pod template to the KWOK nodes, where it succeeds ``exit_after`` after start."""
    template["spec"]["nodeSelector"] = {names.LABEL_FAKE_NODE: "true"}
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[ANNOTATION_EXIT_CODE] = "0"
    annotations[ANNOTATION_EXIT_AFTER] = exit_after


def _gang_pod(name: str, group: str, cpu: int | str, priority_class: str = "") -> dict[str, Any]:
    """A member of a native gang that succeeds on a KWOK node shortly after it starts."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "fluence",
            "restartPolicy": "Never",
            "schedulingGroup": {"podGroupName": group},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": str(cpu), "memory": "256Mi"}},
                }
            ],
        },
    }
    if priority_class:
        pod["spec"]["priorityClassName"] = priority_class
    _on_simulated_nodes(pod)
    return pod


def _podgroup(name: str, min_count: int, priority_class: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def _apply(installed: Installed, docs: list[dict[str, Any]], name: str) -> None:
    path = installed.workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    installed.kubectl("-n", NS, "apply", "-f", str(path))


def _phase(installed: Installed, name: str) -> str:
    return str(installed.pod(NS, name).get("status", {}).get("phase"))


def _queued(installed: Installed, name: str) -> bool:
    """The queue matched the pod's group and it did not fit (its reason is written)."""
    conds = installed.pod(NS, name).get("status", {}).get("conditions") or []
    return any(c.get("type") == names.CONDITION_QUEUED and c.get("status") == "True" for c in conds)


def test_a_job_gang_and_a_native_podgroup_gang_run_to_completion_and_are_released(
    installed: Installed,
) -> None:
    job = yaml.safe_load((EXAMPLES / "job-gang.yaml").read_text())
    _on_simulated_nodes(job["spec"]["template"])
    # Of a PriorityClass: kube-scheduler places the Job's group only if the PodGroup the
    # webhook makes has the pods' priority. The native gang shares it: the three simulated
    # nodes hold three of the four pods at once, and a gang of higher priority would
    # rightly preempt the other.
    batch = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "fluence-e2e-batch"},
        "value": 100,
    }
    job["spec"]["template"]["spec"]["priorityClassName"] = "fluence-e2e-batch"
    gang = [_podgroup("native", 2, "fluence-e2e-batch")] + [
        _gang_pod(f"native-{i}", "native", 1, "fluence-e2e-batch") for i in range(2)
    ]
    _apply(installed, [batch, job, *gang], "gangs")
    installed.kubectl(
        "-n", NS, "wait", "--for=condition=Complete", f"--timeout={TIMEOUT_S:.0f}s", "job/job-gang"
    )
    wait_for(
        lambda: all(_phase(installed, f"native-{i}") == "Succeeded" for i in range(2)),
        TIMEOUT_S,
        "the native gang to succeed",
    )
    # The webhook made the Job's PodGroup and linked its pods; fluence placed both groups.
    made = installed.cp.rest.get(
        f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NS}/podgroups/job-gang"
    )
    assert (made["spec"]["priorityClassName"], made["spec"]["priority"]) == (
        "fluence-e2e-batch",
        100,
    )
    for pod in installed.pods(NS, "fluence.flux-framework.org/group=job-gang"):
        assert pod["spec"]["schedulingGroup"]["podGroupName"] == "job-gang"
        assert pod["status"]["phase"] == "Succeeded"
    # Released: a gang needing every simulated node whole is placed at once.
    full = [_podgroup("full", KWOK_NODES)] + [
        _gang_pod(f"full-{i}", "full", FULL_CPU) for i in range(KWOK_NODES)
    ]
    _apply(installed, full, "full")
    wait_for(
        lambda: all(_phase(installed, f"full-{i}") == "Succeeded" for i in range(KWOK_NODES)),
        TIMEOUT_S,
        "the gang filling every simulated node to succeed",
        lambda: str([installed.pod(NS, f"full-{i}")["status"] for i in range(KWOK_NODES)]),
    )
    placed = {installed.pod(NS, f"full-{i}")["spec"]["nodeName"] for i in range(KWOK_NODES)}
    assert len(placed) == KWOK_NODES
    installed.kubectl("-n", NS, "delete", "job", "job-gang", "--wait=true")
    installed.kubectl("-n", NS, "delete", "pods", "--all", "--wait=true")
    installed.kubectl("delete", "priorityclass", "fluence-e2e-batch")


def _quantum(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((EXAMPLES / "quantum-pod.yaml").read_text())
    pod["metadata"]["name"] = name
    pod["spec"]["containers"][0]["command"] = ["sleep", "3600"]
    return pod


def test_a_killed_extender_is_restarted_by_the_kubelet_and_books_nothing_twice(
    installed: Installed,
) -> None:
    """Each backend has one qpu. kube-scheduler counts a thousand qpu on the node and
    cannot tell backends apart: only the extender's recovery keeps a backend single."""
    _apply(installed, [_quantum("first")], "first")
    wait_for(lambda: _phase(installed, "first") == "Running", TIMEOUT_S, "the first pod to run")
    first = installed.pod(NS, "first")["metadata"]["annotations"][names.ANNOTATION_BACKEND]

    restarts_before: dict[str, int] = {}
    for pod in installed.component_pods("scheduler"):
        status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "extender")
        restarts_before[pod["metadata"]["name"]] = int(status["restartCount"])
        installed.node.kill_container(status["containerID"])

    def restarted() -> bool:
        for pod in installed.component_pods("scheduler"):
            statuses = pod["status"]["containerStatuses"]
            extender = next(s for s in statuses if s["name"] == "extender")
            if extender["restartCount"] <= restarts_before[pod["metadata"]["name"]]:
                return False
            if not extender.get("ready"):
                return False
        return True

    wait_for(restarted, TIMEOUT_S, "the kubelet to restart every extender and it to be ready")

    _apply(installed, [_quantum("second"), _quantum("third")], "more")
    wait_for(
        lambda: _phase(installed, "second") == "Running" or _phase(installed, "third") == "Running",
        TIMEOUT_S,
        "one more quantum pod to run",
    )
    # The other was matched and refused by the queue (its Queued condition says why):
    # a decision, not a pause, before the checks.
    wait_for(
        lambda: _queued(installed, "second") or _queued(installed, "third"),
        TIMEOUT_S,
        "the queue to refuse the other quantum pod",
    )
    running = [n for n in ("second", "third") if _phase(installed, n) == "Running"]
    waiting = [n for n in ("second", "third") if n not in running]
    assert len(running) == 1 and len(waiting) == 1, (running, waiting)
    second = installed.pod(NS, running[0])["metadata"]["annotations"][names.ANNOTATION_BACKEND]
    assert {first, second} == {"ibm_fez", "ibm_marrakesh"}
    assert not installed.pod(NS, waiting[0])["spec"].get("nodeName")
    # Freeing the first backend lets the waiting pod have it.
    # `sleep` as PID 1 ignores SIGTERM: --now spares the 30 s grace period.
    installed.kubectl("-n", NS, "delete", "pod", "first", "--now", "--wait=true")
    wait_for(
        lambda: _phase(installed, waiting[0]) == "Running",
        TIMEOUT_S,
        "the waiting quantum pod to get the freed backend",
    )
    third = installed.pod(NS, waiting[0])["metadata"]["annotations"][names.ANNOTATION_BACKEND]
    assert third == first
    installed.kubectl("-n", NS, "delete", "pods", "--all", "--now", "--wait=true")


WEBHOOK = "pods.fluence.flux-framework.org"
"""The webhook's name in the MutatingWebhookConfiguration, as the API server's errors give it."""
WEBHOOK_SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{SYSTEM}/endpointslices"
BURST_PODS = 360
BURST_S = 30.0
BURST_THREADS = 4
KILL_AT_S = 5.0
"""Into the burst: creations before the kill show the steady state, the rest what follows it."""
BURST_LABEL = "fluence-e2e-burst"
HOLD_GATE = "testbed.fluence.flux-framework.org/hold"
"""A scheduling gate no one lifts: the burst's pods cost the schedulers and nodes nothing."""
POLL_S = 0.1
AFTER_WINDOW_MIN = 50
"""Creations the burst must still make once the failure window has closed."""


def _burst_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"burst-{i}", "namespace": NS, "labels": {BURST_LABEL: "true"}},
        "spec": {
            "schedulerName": "fluence",
            "schedulingGates": [{"name": HOLD_GATE}],
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
        },
    }


@dataclass
class _Creation:
    start: float
    end: float
    status: int
    """201, the API server's error status, or 0 when it gave no answer."""
    message: str = ""

    @property
    def webhook_failed(self) -> bool:
        """Refused because the API server could not call the webhook (failurePolicy Fail)."""
        return (
            self.status == 500
            and "failed calling webhook" in self.message
            and WEBHOOK in self.message
        )


@dataclass
class _Burst:
    """Pods created on a fixed schedule from a few threads: when each creation started and
    ended and what the API server answered."""

    installed: Installed
    created: list[_Creation] = field(default_factory=list)
    t0: float = 0.0
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._threads = [
            threading.Thread(target=self._run, daemon=True) for _ in range(BURST_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "the burst did not end in time"

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= BURST_PODS:
                return None
            self._next += 1
            return self._next - 1

    def _run(self) -> None:
        rest = self.installed.cp.rest
        while (i := self._take()) is not None:
            delay = self.t0 + i * BURST_S / BURST_PODS - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            start = time.monotonic()
            try:
                rest.create(f"/api/v1/namespaces/{NS}/pods", _burst_pod(i))
                status, message = 201, ""
            except KubeApiError as e:
                status, message = e.status, str(e)
            except OSError as e:
                status, message = 0, repr(e)
            with self._lock:
                self.created.append(_Creation(start, time.monotonic(), status, message))


@dataclass
class _EndpointPoll:
    """The webhook Service's EndpointSlices, read every POLL_S: which replica's endpoint the
    API server would pick (ready) when; and whether the watched replica's process answers
    its probe port, to tell the restart apart from the kubelet's probe."""

    installed: Installed
    readyz: str
    """The watched replica's /readyz on its plain probe port."""
    samples: list[tuple[float, dict[str, bool], bool]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, limit_s: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(limit_s,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self, limit_s: float) -> None:
        rest = self.installed.cp.rest
        deadline = time.monotonic() + limit_s
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                got = rest.get(
                    WEBHOOK_SLICES, labelSelector="kubernetes.io/service-name=fluence-webhook"
                )
            except (KubeApiError, OSError):
                self._stop.wait(POLL_S)
                continue
            ready = {
                str((endpoint.get("targetRef") or {}).get("name", "")): (
                    (endpoint.get("conditions") or {}).get("ready") is not False
                )
                for item in got["items"]
                for endpoint in item.get("endpoints") or []
            }
            try:
                serving = httpx.get(self.readyz, timeout=1).status_code == 200
            except httpx.TransportError:
                serving = False
            self.samples.append((time.monotonic(), ready, serving))
            self._stop.wait(POLL_S)

    def first(self, after: float, pod: str, ready: bool) -> float | None:
        """When the poll first saw ``pod``'s endpoint (not) ready at or after ``after``."""
        return next(
            (t for t, seen, _ in self.samples if t >= after and seen.get(pod, False) == ready),
            None,
        )

    def first_serving(self, after: float) -> float | None:
        """When the watched replica first answered its probe port at or after ``after``."""
        return next((t for t, _, serving in self.samples if t >= after and serving), None)


def _webhook_pods_ready(installed: Installed) -> list[dict[str, Any]]:
    pods = installed.component_pods("webhook")
    return pods if len(pods) == 2 and all(_ready(p) for p in pods) else []


def _webhook_pdb(installed: Installed) -> dict[str, Any]:
    return dict(
        installed.cp.rest.get(
            f"/apis/policy/v1/namespaces/{SYSTEM}/poddisruptionbudgets/fluence-webhook"
        )
    )


def _dry_run_eviction(installed: Installed, name: str) -> KubeApiError | None:
    """The API server's answer to evicting the pod: None when allowed, else its refusal.
    Dry run: the PDB is checked all the same, and nothing is deleted either way."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": SYSTEM},
        "deleteOptions": {"dryRun": ["All"]},
    }
    try:
        installed.cp.rest.create(f"/api/v1/namespaces/{SYSTEM}/pods/{name}/eviction", body)
    except KubeApiError as e:
        return e
    return None


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(s["restartCount"]) for s in pod["status"].get("containerStatuses", []))


@pytest.mark.parametrize("installed", ["kubectl"], indirect=True)
def test_a_webhook_replica_killed_mid_burst_fails_creations_only_until_its_endpoint_drops(
    installed: Installed,
) -> None:
    """Two replicas; one is SIGKILLed while pods are being created. Creations fail (webhook
    call refused, failurePolicy Fail) only until the API server stops picking the dead
    replica's endpoint, and the PDB refuses to evict the last ready replica meanwhile.

    Under the kubectl install only: the chart renders the same Deployment, Service, probes
    and PDB, and what follows the kill is the kubelet's, the endpoint controller's and the
    API server's doing, the same either way."""
    rest = installed.cp.rest
    deployment = rest.get(f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/fluence-webhook")
    if int(deployment["spec"]["replicas"]) < 2:
        installed.kubectl("-n", SYSTEM, "scale", "deployment/fluence-webhook", "--replicas=2")
    installed.kubectl(
        "-n",
        SYSTEM,
        "rollout",
        "status",
        "deployment/fluence-webhook",
        f"--timeout={TIMEOUT_S:.0f}s",
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    period_s = float(container["readinessProbe"].get("periodSeconds", 10))
    pods = wait_for(lambda: _webhook_pods_ready(installed), TIMEOUT_S, "two ready webhook replicas")
    assert all(p["spec"]["nodeName"] == NODE for p in pods), "both replicas run on the real node"
    victim, survivor = sorted(pods, key=lambda p: str(p["metadata"]["name"]))
    victim_name, survivor_name = victim["metadata"]["name"], survivor["metadata"]["name"]
    wait_for(
        lambda: _webhook_pdb(installed)["status"].get("disruptionsAllowed") == 1,
        60,
        "the PDB to allow one disruption of two ready replicas",
    )
    # With both ready the PDB lets one go, as a drain of one node would.
    assert _dry_run_eviction(installed, survivor_name) is None

    def dropped() -> float | None:
        return poll.first(kill_called, victim_name, ready=False)

    def ready_again() -> float | None:
        at = dropped()
        return None if at is None else poll.first(at, victim_name, ready=True)

    poll = _EndpointPoll(installed, f"http://{victim['status']['podIP']}:8080/readyz")
    poll.start(BURST_S + TIMEOUT_S)
    burst = _Burst(installed)
    try:
        burst.start()
        time.sleep(max(0.0, burst.t0 + KILL_AT_S - time.monotonic()))
        (status,) = [s for s in victim["status"]["containerStatuses"] if s["name"] == "webhook"]
        kill_called = time.monotonic()
        installed.node.kill_container(status["containerID"])
        killed_at = time.monotonic()
        # With the victim unready the PDB keeps the survivor: an eviction is refused.
        wait_for(
            lambda: _webhook_pdb(installed)["status"].get("disruptionsAllowed") == 0,
            30,
            "the PDB to see one ready replica",
        )
        refused = _dry_run_eviction(installed, survivor_name)
        burst.join(BURST_S + 120)
        wait_for(ready_again, TIMEOUT_S, "the killed replica's endpoint to be ready again")
    finally:
        poll.stop()
        rest.delete(
            f"/api/v1/namespaces/{NS}/pods",
            labelSelector=f"{BURST_LABEL}=true",
            gracePeriodSeconds=0,
        )

    assert refused is not None and refused.status == 429, refused
    dropped_at, ready_again_at = dropped(), ready_again()
    assert dropped_at is not None and ready_again_at is not None
    serving_again_at = poll.first_serving(dropped_at)
    assert serving_again_at is not None and serving_again_at <= ready_again_at
    window_end = dropped_at + period_s
    created = sorted(burst.created, key=lambda c: c.start)
    assert len(created) == BURST_PODS
    failed = [c for c in created if c.status != 201]
    other = [c for c in failed if not c.webhook_failed]
    assert not other, [(c.status, c.message) for c in other[:5]]
    # Failures only between the kill and the window's end; every creation after it succeeds.
    outside = [c for c in failed if c.end < kill_called or c.start > window_end]
    assert not outside, [(c.start - killed_at, c.end - killed_at, c.message) for c in outside[:5]]
    after = [c for c in created if c.start > window_end]
    assert len(after) >= AFTER_WINDOW_MIN, f"only {len(after)} creations after the window"

    # The kubelet restarted the killed container in place; both replicas are ready again.
    wait_for(lambda: _webhook_pods_ready(installed), TIMEOUT_S, "both replicas ready again")
    now = {p["metadata"]["name"]: p for p in installed.component_pods("webhook")}
    assert set(now) == {victim_name, survivor_name}
    assert _restarts(now[victim_name]) == _restarts(victim) + 1
    assert _restarts(now[survivor_name]) == _restarts(survivor)
    durations = [c.end - c.start for c in created]
    numbers = {
        "how": installed.how,
        "creations": len(created),
        "failures": len(failed),
        "first_failure_s": min(c.end for c in failed) - killed_at if failed else None,
        "last_failure_s": max(c.end for c in failed) - killed_at if failed else None,
        "endpoint_drop_s": dropped_at - killed_at,
        "window_bound_s": window_end - killed_at,
        "serving_again_s": serving_again_at - killed_at,
        "ready_again_s": ready_again_at - killed_at,
        "restart_to_ready_s": ready_again_at - serving_again_at,
        "probe_period_s": period_s,
        "eviction_with_one_ready": refused.status,
        "creation_ms_median": statistics.median(durations) * 1000,
        "creation_ms_max": max(durations) * 1000,
    }
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in numbers.items()}))
