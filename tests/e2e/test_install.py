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
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
from testbed.node import RealNode, missing_requirements, pod_logs
from tests.e2e.test_extender_e2e import wait_for
from tests.e2e.test_rbac_matrix import (
    CERTS,
    assert_rights_as_used,
    can_i_list,
    created,
    reference_accounts,
)
from tests.support.helm import ensure_helm

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
    reason = missing_requirements()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real node: {reason}")
        pytest.skip(reason)
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
    time.sleep(5)  # time for a wrong placement of the other one to show
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
