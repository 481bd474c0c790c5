"""The webhook registered with a real kube-apiserver: what ends up stored in etcd.

One ``fluence-webhook`` process per module, registered by URL with its CA in
``caBundle`` (the same configuration the manifest recommends, but with a
``url`` client config instead of a Service). It runs with mutual TLS: it trusts
only the CA of the client certificate the apiserver presents to webhooks (its
AdmissionConfiguration), so every pod below went through the apiserver's own
authentication, and a review posted to it by anyone else is refused.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api

from fluence import names
from testbed import ControlPlane, KubeApiError
from tests.integration.test_webhook_process import WebhookProcess
from tests.support.admission import review
from webhook.manifest import webhook_configuration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
BACKEND_FIELD = names.annotation_fieldpath(names.ANNOTATION_BACKEND)


def register(control_plane: ControlPlane, proc: WebhookProcess, name: str) -> None:
    config = webhook_configuration(
        url=f"{proc.url}{names.WEBHOOK_PATH}", ca_bundle=proc.bundle.ca_pem, certificate=None
    )
    config["metadata"]["name"] = name
    control_plane.rest.create(CONFIGS, config)


def wait_effective(control_plane: ControlPlane, timeout: float = 30.0) -> None:
    """The API server picks up new configurations asynchronously; wait until ours is called."""
    probe = quantum_pod(f"probe-{uuid.uuid4().hex[:6]}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = control_plane.rest.create("/api/v1/namespaces/default/pods", probe, dryRun="All")
        if any(e["name"] == "QRMI_BACKEND" for e in out["spec"]["containers"][0].get("env", [])):
            return
        time.sleep(0.2)
    raise AssertionError("the API server never called the webhook")


@contextlib.contextmanager
def registered_webhook(
    control_plane: ControlPlane, workdir: Path, prefix: str = "fluence-webhook-e2e"
) -> Iterator[WebhookProcess]:
    """A fluence-webhook process the apiserver calls for pods (until the block ends)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with WebhookProcess(
        workdir,
        resources=EXAMPLES / "resources.yaml",
        kubeconfig=control_plane.kubeconfig,
        client=control_plane.webhook_client,
    ) as proc:
        register(control_plane, proc, name)
        try:
            wait_effective(control_plane)
            yield proc
        finally:
            control_plane.rest.delete(f"{CONFIGS}/{name}")


@pytest.fixture(scope="module")
def webhook(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    with registered_webhook(control_plane, tmp_path_factory.mktemp("webhook")) as proc:
        yield proc


def quantum_pod(name: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / "quantum-pod.yaml").read_text())
    body["metadata"]["name"] = name
    return body


def classical_pod(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **meta},
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}},
                }
            ],
        },
    }


def create(control_plane: ControlPlane, namespace: str, body: dict[str, Any], **q: Any) -> Any:
    return control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", body, **q)


def env_by_name(pod: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {e["name"]: e for e in pod["spec"]["containers"][index].get("env", [])}


def test_quantum_example_pod_is_stored_with_backend_fieldrefs(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    create(control_plane, namespace, quantum_pod("quantum-hello"))
    stored = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/quantum-hello")
    env = env_by_name(stored)
    for var in ("QRMI_BACKEND", "FLUXION_BACKEND"):
        assert env[var]["valueFrom"]["fieldRef"]["fieldPath"] == BACKEND_FIELD
    assert env["FLUXION_VENDOR"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        names.annotation_fieldpath(names.attr_annotation("vendor"))
    )


def test_user_value_of_qrmi_backend_is_kept(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    body = quantum_pod("mine")
    body["spec"]["containers"][0]["env"] = [{"name": "QRMI_BACKEND", "value": "ibm_torino"}]
    stored = create(control_plane, namespace, body)
    env = env_by_name(stored)
    assert env["QRMI_BACKEND"] == {"name": "QRMI_BACKEND", "value": "ibm_torino"}
    assert "FLUXION_BACKEND" in env
    assert [e["name"] for e in stored["spec"]["containers"][0]["env"]].count("QRMI_BACKEND") == 1


def test_classical_pod_is_untouched(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    body = classical_pod("plain")
    stored = create(control_plane, namespace, body)
    assert "env" not in stored["spec"]["containers"][0]
    assert "schedulingGroup" not in stored["spec"]
    assert stored["metadata"].get("annotations") is None


def podgroup(control_plane: ControlPlane, namespace: str, name: str) -> Any:
    return control_plane.rest.get(
        f"/apis/{names.PODGROUP_GROUP}/{control_plane.release.podgroup_version}"
        f"/namespaces/{namespace}"
        f"/{names.PODGROUP_PLURAL}/{name}"
    )


def test_label_gang_pod_gets_its_podgroup_and_link(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    template = yaml.safe_load((EXAMPLES / "label-gang.yaml").read_text())["spec"]["template"]
    for i in range(2):
        body = {"apiVersion": "v1", "kind": "Pod", **template}
        body["metadata"] = {**template["metadata"], "generateName": "label-gang-"}
        stored = create(control_plane, namespace, body)
        assert stored["spec"]["schedulingGroup"] == {"podGroupName": "label-gang"}, i
    group = podgroup(control_plane, namespace, "label-gang")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    # Preempted whole, never one pod at a time (v1beta1 would default to single).
    if control_plane.release.minor != "1.36":
        assert group["spec"]["disruptionMode"] == {"all": {}}
    else:  # v1alpha2 stores "Pod" while its alpha gate is off; fluence keeps it whole
        assert group["spec"]["disruptionMode"] == "Pod"
    assert group["metadata"]["annotations"][names.ANNOTATION_CREATED_BY] == (
        names.CREATED_BY_WEBHOOK
    )
    assert group["metadata"]["labels"][names.LABEL_GROUP] == "label-gang"


def test_a_gang_of_a_priority_class_gets_a_podgroup_of_that_priority(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    """kube-scheduler places a group only when every pod has the PodGroup's priority."""
    name = f"urgent-{uuid.uuid4().hex[:6]}"
    classes = "/apis/scheduling.k8s.io/v1/priorityclasses"
    control_plane.rest.create(
        classes,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 5000,
        },
    )
    try:
        body = classical_pod("urgent-0", labels={names.LABEL_GROUP: "urgent"})
        body["spec"]["priorityClassName"] = name
        stored = create(control_plane, namespace, body)
        assert stored["spec"]["schedulingGroup"] == {"podGroupName": "urgent"}
        assert stored["spec"]["priority"] == 5000
        group = podgroup(control_plane, namespace, "urgent")
        if control_plane.release.minor == "1.36":
            # Dropped without WorkloadAwarePreemption; 1.36 compares no priorities.
            assert "priorityClassName" not in group["spec"]
            return
        # Resolved by the API server's Priority admission, as the pod's was.
        assert (group["spec"]["priorityClassName"], group["spec"]["priority"]) == (name, 5000)
        # A member of another priority would hold the group back: admitted, not linked.
        other = create(
            control_plane,
            namespace,
            classical_pod("urgent-1", labels={names.LABEL_GROUP: "urgent"}),
        )
        assert "schedulingGroup" not in other["spec"]
    finally:
        control_plane.rest.delete(f"{classes}/{name}")


def test_job_owned_gang_takes_the_job_parallelism(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    job = control_plane.rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                },
            },
        },
    )
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    body = classical_pod("train-0", labels={names.LABEL_GROUP: "train"}, ownerReferences=[owner])
    stored = create(control_plane, namespace, body)
    assert stored["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    assert podgroup(control_plane, namespace, "train")["spec"]["schedulingPolicy"] == {
        "gang": {"minCount": 3}
    }


def test_the_job_controllers_pods_carry_the_jobs_deadline(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    """kube-controller-manager creates the pods; the webhook gives each the Job's deadline."""
    template = classical_pod("unused")
    del template["metadata"]
    control_plane.rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "bounded"},
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "activeDeadlineSeconds": 600,
                "template": {**template, "spec": {**template["spec"], "restartPolicy": "Never"}},
            },
        },
    )
    deadline = time.monotonic() + 60
    pods: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(pods) < 2:
        pods = control_plane.rest.get(
            f"/api/v1/namespaces/{namespace}/pods", labelSelector="job-name=bounded"
        )["items"]
        time.sleep(0.5)
    assert len(pods) == 2, "the Job controller did not create the pods"
    for p in pods:
        assert p["spec"]["activeDeadlineSeconds"] == 600


def fluence_job(name: str, restart: str, rules: list[dict[str, Any]] | None = None) -> Any:
    """A suspended Job of the fluence scheduler: admitted, but no pods are made."""
    pod = classical_pod("unused")["spec"]
    spec: dict[str, Any] = {
        "suspend": True,
        "backoffLimit": 2,
        "template": {"spec": {**pod, "restartPolicy": restart}},
    }
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": rules}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def test_a_fluence_jobs_evicted_pods_do_not_count_toward_its_backoff_limit(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    """The API server sends the Job to the Jobs entry; the rule it stores is the one the Job
    controller reads, after the user's own, with the replacement policy Kubernetes requires."""
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    evicted = {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    control_plane.rest.create(jobs, fluence_job("plain", "Never"))
    stored = control_plane.rest.get(f"{jobs}/plain")["spec"]
    assert stored["podFailurePolicy"] == {"rules": [evicted]}
    assert stored["podReplacementPolicy"] == "Failed"
    theirs = {
        "action": "FailJob",
        "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
    }
    control_plane.rest.create(jobs, fluence_job("mine", "Never", [theirs]))
    stored = control_plane.rest.get(f"{jobs}/mine")["spec"]
    assert stored["podFailurePolicy"] == {"rules": [theirs, evicted]}
    # Jobs of other schedulers never reach the webhook.
    other = fluence_job("other", "Never")
    other["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    control_plane.rest.create(jobs, other)
    assert "podFailurePolicy" not in control_plane.rest.get(f"{jobs}/other")["spec"]


def test_a_fluence_job_restarting_on_failure_is_told_why_evictions_count(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str, kube: ApiClient
) -> None:
    batch: Any = BatchV1Api(kube)  # the raw response, to read the Warning headers
    response = batch.create_namespaced_job(
        namespace, fluence_job("restarts", "OnFailure"), _preload_content=False
    )
    assert "restartPolicy OnFailure" in response.headers.get("Warning", "")
    assert "podFailurePolicy" not in json.loads(response.data)["spec"]


def test_server_side_dry_run_creates_no_podgroup(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    body = classical_pod("dry", labels={names.LABEL_GROUP: "dry-gang"})
    out = create(control_plane, namespace, body, dryRun="All")
    assert out["spec"]["schedulingGroup"] == {"podGroupName": "dry-gang"}
    with pytest.raises(KubeApiError) as missing:
        podgroup(control_plane, namespace, "dry-gang")
    assert missing.value.status == 404
    with pytest.raises(KubeApiError):
        control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/dry")


def test_fluxion_request_under_another_scheduler_is_warned(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str, kube: ApiClient
) -> None:
    body = quantum_pod("elsewhere")
    body["spec"]["schedulerName"] = "default-scheduler"
    core: Any = CoreV1Api(kube)  # the raw response, to read the Warning headers
    response = core.create_namespaced_pod(namespace, body, _preload_content=False)
    warnings = response.headers.get("Warning", "")
    assert "only schedulerName 'fluence' assigns a backend" in warnings
    stored = json.loads(response.data)
    assert "env" not in stored["spec"]["containers"][0]


def test_the_apiservers_certificate_gets_through_and_a_forged_review_does_not(
    control_plane: ControlPlane, webhook: WebhookProcess, namespace: str
) -> None:
    """The confused deputy: a review claiming the job controller, for a Job in this namespace,
    posted straight to the webhook, would make it create a PodGroup with its own rights."""
    with webhook.probes() as probes:
        assert "client auth: mtls" in probes.get("/readyz").text
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "forged", "uid": "u1"}
    body = classical_pod("forged-0", labels={names.LABEL_GROUP: "forged"})
    body["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    forged = review(body, namespace=namespace)
    forged["request"]["userInfo"] = {
        "username": "system:serviceaccount:kube-system:job-controller",
        "groups": ["system:masters"],
    }
    no_cert = webhook.ssl_context(client_cert=False)
    with (
        httpx.Client(base_url=webhook.url, verify=no_cert, timeout=5) as c,
        pytest.raises(httpx.TransportError),
    ):
        c.post(names.WEBHOOK_PATH, json=forged)
    with pytest.raises(KubeApiError) as missing:
        podgroup(control_plane, namespace, "forged")
    assert missing.value.status == 404
    # The same gang created through the apiserver, which presents its certificate, is wired.
    stored = create(
        control_plane, namespace, classical_pod("real-0", labels={names.LABEL_GROUP: "real"})
    )
    assert stored["spec"]["schedulingGroup"] == {"podGroupName": "real"}
    assert podgroup(control_plane, namespace, "real")["metadata"]["labels"] == {
        names.LABEL_GROUP: "real"
    }
