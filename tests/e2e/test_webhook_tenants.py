"""The webhook under its shipped RBAC, with tenants who are not admins.

The webhook runs with a token of its own ServiceAccount, bound by the roles in
``deploy/fluence.yaml`` and nothing more; pods are created by impersonated
users and by the job controller's identity, as they are in a cluster. What a
tenant writes must not borrow the webhook's right to create PodGroups, and no
workload may take over a PodGroup made for another.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fluence import names
from testbed import ControlPlane, KubeApiError
from testbed.processes import wait_until
from testbed.rest import KubeRest
from tests.e2e.test_webhook_admission import (
    CONFIGS,
    EXAMPLES,
    classical_pod,
    podgroup,
    register,
    wait_effective,
)
from tests.integration.test_webhook_process import WebhookProcess

ROOT = Path(__file__).resolve().parents[2]
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def shipped_webhook_rbac() -> list[dict[str, Any]]:
    """The webhook's ServiceAccount, ClusterRole and binding from the plain manifests."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "fluence.yaml").read_text()) if d]
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    found = [d for d in docs if d["kind"] in wanted and d["metadata"]["name"] == "fluence-webhook"]
    assert sorted(d["kind"] for d in found) == sorted(wanted)
    return found


def apply(control_plane: ControlPlane, doc: dict[str, Any]) -> None:
    kind = doc["kind"]
    path = {
        "ServiceAccount": f"/api/v1/namespaces/{doc['metadata'].get('namespace')}/serviceaccounts",
        "ClusterRole": f"{RBAC}/clusterroles",
        "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
    }[kind]
    control_plane.rest.create_or_replace(path, doc)


@pytest.fixture(scope="module")
def webhook_as_its_service_account(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    for doc in shipped_webhook_rbac():
        apply(control_plane, doc)
    workdir = tmp_path_factory.mktemp("webhook-sa")
    kubeconfig = control_plane.service_account_kubeconfig(
        "kube-system", "fluence-webhook", workdir / "webhook.kubeconfig"
    )
    name = f"fluence-webhook-tenants-{uuid.uuid4().hex[:6]}"
    with WebhookProcess(
        workdir,
        resources=EXAMPLES / "resources.yaml",
        kubeconfig=kubeconfig,
        extra_env={"FLUENCE_PODGROUP_CACHE_SECONDS": "0"},
        client=control_plane.webhook_client,
    ) as proc:
        register(control_plane, proc, name)
        try:
            wait_effective(control_plane)
            yield proc
        finally:
            control_plane.rest.delete(f"{CONFIGS}/{name}")


def grant(control_plane: ControlPlane, namespace: str, user: str, role: dict[str, Any]) -> None:
    """A Role in ``namespace`` and its binding to ``user``."""
    role_name = role["metadata"]["name"]
    control_plane.rest.create(f"{RBAC}/namespaces/{namespace}/roles", role)
    control_plane.rest.create(
        f"{RBAC}/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{role_name}-{user}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name},
        "rules": list(rules),
    }


PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}
PODGROUPS = {
    "apiGroups": [names.PODGROUP_GROUP],
    "resources": [names.PODGROUP_PLURAL],
    "verbs": ["create", "get"],
}


def create_pod(rest: KubeRest, namespace: str, body: dict[str, Any]) -> Any:
    return rest.create(f"/api/v1/namespaces/{namespace}/pods", body)


def gang_pod(name: str, group: str, size: int = 2, **meta: Any) -> dict[str, Any]:
    return classical_pod(
        name,
        labels={names.LABEL_GROUP: group},
        annotations={names.ANNOTATION_GROUP_SIZE: str(size)},
        **meta,
    )


def suspended_job(control_plane: ControlPlane, namespace: str, name: str) -> str:
    """A real Job that makes no pods of its own (the garbage collector sees a live owner)."""
    job = control_plane.rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                },
            },
        },
    )
    uid: str = job["metadata"]["uid"]
    return uid


def no_podgroup(control_plane: ControlPlane, namespace: str, group: str) -> bool:
    with contextlib.suppress(KubeApiError):
        podgroup(control_plane, namespace, group)
        return False
    return True


def test_a_tenant_without_podgroup_rights_gets_no_podgroup_from_the_webhook(
    control_plane: ControlPlane, webhook_as_its_service_account: WebhookProcess, namespace: str
) -> None:
    grant(control_plane, namespace, "alice", role("pods", PODS))
    alice = control_plane.rest.impersonating("alice")
    with pytest.raises(KubeApiError) as denied:  # what alice may do herself
        alice.create(
            f"/apis/{names.PODGROUP_GROUP}/{control_plane.release.podgroup_version}"
            f"/namespaces/{namespace}"
            f"/{names.PODGROUP_PLURAL}",
            {
                "apiVersion": f"{names.PODGROUP_GROUP}/{control_plane.release.podgroup_version}",
                "kind": "PodGroup",
            },
        )
    assert denied.value.status == 403
    stored = create_pod(alice, namespace, gang_pod("a-0", "squat", size=64))
    assert "schedulingGroup" not in stored["spec"]
    assert no_podgroup(control_plane, namespace, "squat")

    grant(control_plane, namespace, "alice", role("podgroups", PODGROUPS))
    stored = create_pod(alice, namespace, gang_pod("a-1", "squat", size=2))
    assert stored["spec"]["schedulingGroup"] == {"podGroupName": "squat"}
    made = podgroup(control_plane, namespace, "squat")
    assert made["metadata"]["annotations"][names.ANNOTATION_CREATED_FOR] == "user/alice"
    assert made["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}


def test_controller_pods_get_an_owned_podgroup_that_no_other_workload_adopts(
    control_plane: ControlPlane, webhook_as_its_service_account: WebhookProcess, namespace: str
) -> None:
    job_uid = suspended_job(control_plane, namespace, "train")
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": job_uid,
        "controller": True,
    }
    controller = control_plane.rest.impersonating(JOB_CONTROLLER)
    stored = create_pod(
        controller, namespace, gang_pod("train-0", "train", size=3, ownerReferences=[owner])
    )
    assert stored["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    made = podgroup(control_plane, namespace, "train")
    assert made["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job_uid}
    ]
    assert made["metadata"]["annotations"][names.ANNOTATION_CREATED_FOR] == (f"Job/train/{job_uid}")

    # Bob may create PodGroups in the namespace, but not join (or resize) the Job's gang.
    grant(control_plane, namespace, "bob", role("tenant", PODS, PODGROUPS))
    bob = control_plane.rest.impersonating("bob")
    stored = create_pod(bob, namespace, gang_pod("bob-0", "train", size=64))
    assert "schedulingGroup" not in stored["spec"]
    assert podgroup(control_plane, namespace, "train")["spec"]["schedulingPolicy"] == {
        "gang": {"minCount": 3}
    }

    # Squatting first does not capture the Job's pods either.
    create_pod(bob, namespace, gang_pod("bob-1", "eval", size=64))
    eval_uid = suspended_job(control_plane, namespace, "eval")
    eval_owner = {**owner, "name": "eval", "uid": eval_uid}
    stored = create_pod(
        controller, namespace, gang_pod("eval-0", "eval", size=2, ownerReferences=[eval_owner])
    )
    assert "schedulingGroup" not in stored["spec"]
    squatted = podgroup(control_plane, namespace, "eval")
    assert squatted["metadata"]["annotations"][names.ANNOTATION_CREATED_FOR] == "user/bob"

    # The Job's next member joins its own gang.
    stored = create_pod(
        controller, namespace, gang_pod("train-1", "train", size=3, ownerReferences=[owner])
    )
    assert stored["spec"]["schedulingGroup"] == {"podGroupName": "train"}


def test_a_jobs_podgroup_comes_from_the_real_job_controller_and_goes_with_the_job(
    control_plane: ControlPlane, webhook_as_its_service_account: WebhookProcess, namespace: str
) -> None:
    """kube-controller-manager creates the pods under its job-controller ServiceAccount."""
    template = classical_pod("unused", labels={names.LABEL_GROUP: "sweep"})
    job = control_plane.rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "sweep"},
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "template": {
                    "metadata": {"labels": template["metadata"]["labels"]},
                    "spec": {**template["spec"], "restartPolicy": "Never"},
                },
            },
        },
    )
    uid = job["metadata"]["uid"]

    def members() -> list[Any]:
        items = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        return [p for p in items if p["metadata"].get("labels", {}).get(names.LABEL_GROUP)]

    wait_until(lambda: len(members()) == 2, timeout_s=30, what="given its pods")
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "sweep"} for p in members())
    made = podgroup(control_plane, namespace, "sweep")
    assert made["metadata"]["ownerReferences"][0]["uid"] == uid
    assert made["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    control_plane.rest.delete(
        f"/apis/batch/v1/namespaces/{namespace}/jobs/sweep", propagationPolicy="Background"
    )
    wait_until(
        lambda: no_podgroup(control_plane, namespace, "sweep") and not members(),
        timeout_s=60,
        what="collected with its Job (pods and PodGroup)",
    )
