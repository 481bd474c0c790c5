"""Each shipped identity may do exactly what fluence's code does with it, no more.

The ServiceAccounts and roles of ``deploy/fluence.yaml`` and
``deploy/fluence-resources.yaml`` are created on the real API server, and the
real ``kubectl auth can-i --list --as=<ServiceAccount>`` lists what each may
do. Rights every authenticated user has (discovery, self reviews) are taken
out by asking the same for an account bound to nothing. What remains is
compared with the API calls the code makes, written out below per binary.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ControlPlane, KubeApiError

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = [ROOT / "deploy" / "fluence.yaml", ROOT / "deploy" / "fluence-resources.yaml"]
NAMESPACE = "kube-system"
RBAC = "/apis/rbac.authorization.k8s.io/v1"

Right = tuple[str, str]
"""(resource as kubectl prints it, e.g. ``podgroups.scheduling.k8s.io``, verb)."""


def rights(*rows: tuple[str, str]) -> set[Right]:
    return {(resource, verb) for resource, verbs in rows for verb in verbs.split()}


# What each binary's code calls (grep the code for the client calls named in brackets).
EXTENDER = rights(
    ("podgroups.scheduling.k8s.io", "get list watch"),  # fluence.reflectors
    ("podgroups.scheduling.k8s.io", "delete"),  # scheduler_extender.podgroup_cleanup
    ("podgroups.scheduling.x-k8s.io", "get list watch"),  # fluence.reflectors
    ("compositepodgroups.scheduling.k8s.io", "get list watch"),  # fluence.reflectors
    ("pods", "get list watch"),  # fluence.reflectors, binder (read-back)
    ("pods", "patch"),  # scheduler_extender.gated_queue (release, via binder)
    ("nodes", "get list watch"),  # fluence.reflectors
    ("persistentvolumeclaims", "get list watch"),  # fluence.reflectors (fluence.volume_nodes)
    ("persistentvolumes", "get list watch"),  # fluence.reflectors (fluence.volume_nodes)
    ("storageclasses.storage.k8s.io", "get list watch"),  # fluence.reflectors (volume_nodes)
    ("csinodes.storage.k8s.io", "get list watch"),  # fluence.reflectors (volume_limits)
    ("volumeattachments.storage.k8s.io", "get list watch"),  # fluence.reflectors (volume_limits)
    ("resourceclaims.resource.k8s.io", "get list watch"),  # fluence.reflectors (device_claims)
    ("resourceslices.resource.k8s.io", "get list watch"),  # fluence.reflectors (device_claims)
    ("deviceclasses.resource.k8s.io", "get list watch"),  # fluence.reflectors (device_claims)
    ("namespaces", "get list watch"),  # fluence.reflectors (fluence.pod_affinity)
    ("pods/binding", "create"),  # scheduler_extender.binder
    ("pods/eviction", "create"),  # scheduler_extender.eviction
    ("pods/status", "patch"),  # scheduler_extender.requeue
    ("events", "create"),  # fluence.events
    ("tokenreviews.authentication.k8s.io", "create"),  # scheduler_extender.access
    ("subjectaccessreviews.authorization.k8s.io", "create"),  # scheduler_extender.access
)
EXTENDER_LEASE = rights(  # in its namespace only
    ("leases.coordination.k8s.io", "create"),  # scheduler_extender.leadership
    ("leases.coordination.k8s.io/fluence-queue", "get update"),  # scheduler_extender.leadership
    ("secrets/fluence-qrmi", "get"),  # scheduler_extender.qrmi_acquisition (credentials)
)
WEBHOOK = rights(
    ("podgroups.scheduling.k8s.io", "get create"),  # webhook.gang
    ("jobs.batch", "get"),  # webhook.gang (gang size)
    ("subjectaccessreviews.authorization.k8s.io", "create"),  # webhook.gang
)
DEVICEPLUGIN: set[Right] = set()  # it talks to its kubelet only
CERTS = rights(  # the chart's certificate CronJob, without cert-manager
    # No create: the chart makes both Secrets (empty), the job only reads and updates them.
    ("secrets/fluence-webhook-tls", "get update"),  # webhook.certs
    ("secrets/fluence-webhook-tls-ca", "get update"),  # webhook.certs
    (  # webhook.certs (caBundle)
        "mutatingwebhookconfigurations.admissionregistration.k8s.io/fluence-webhook",
        "get patch",
    ),
)


_ROW = re.compile(r"^(\S*)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$")


def can_i_list(control_plane: ControlPlane, account: str) -> set[Right]:
    """``kubectl auth can-i --list`` for a ServiceAccount of kube-system, as (resource, verb)."""
    listed = control_plane.kubectl(
        "auth",
        "can-i",
        "--list",
        "--namespace",
        NAMESPACE,
        f"--as=system:serviceaccount:{NAMESPACE}:{account}",
        timeout_s=60,
    )
    found: set[Right] = set()
    for line in listed.splitlines()[1:]:
        match = _ROW.match(line)
        assert match, f"unexpected kubectl output: {line!r}"
        resource, urls, names, verbs = match.groups()
        if not resource:  # a non-resource URL (discovery), open to everyone
            assert urls, line
            continue
        if names:  # rights on named objects only (none of fluence's)
            found |= {(f"{resource}/{names}", v) for v in verbs.split()}
            continue
        found |= {(resource, v) for v in verbs.split()}
    return found


def shipped_rbac() -> list[dict[str, Any]]:
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return [
        d
        for path in MANIFESTS
        for d in yaml.safe_load_all(path.read_text())
        if d and d["kind"] in kinds
    ]


def collection(doc: dict[str, Any]) -> str:
    kind, ns = doc["kind"], doc["metadata"].get("namespace", NAMESPACE)
    return {
        "ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts",
        "ClusterRole": f"{RBAC}/clusterroles",
        "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
        "Role": f"{RBAC}/namespaces/{ns}/roles",
        "RoleBinding": f"{RBAC}/namespaces/{ns}/rolebindings",
    }[kind]


def reference_accounts() -> list[dict[str, Any]]:
    """Two yardsticks in kube-system: an account bound to nothing (what everyone may do)
    and a kube-scheduler bound as Kubernetes ships it (kubeadm binds the same three roles)."""
    account = "plain-kube-scheduler"
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": NAMESPACE},
        }
        for name in (account, "bound-to-nothing")
    ]
    for role in ("system:kube-scheduler", "system:volume-scheduler"):
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{account}-{role.split(':')[-1]}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": subject,
            }
        )
    docs.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{account}-auth-reader", "namespace": NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": subject,
        }
    )
    return docs


@contextlib.contextmanager
def created(control_plane: ControlPlane, docs: list[dict[str, Any]]) -> Iterator[None]:
    made: list[str] = []
    try:
        for doc in docs:
            path = collection(doc)
            control_plane.rest.create_or_replace(path, doc)
            made.append(f"{path}/{doc['metadata']['name']}")
        yield
    finally:
        for path in reversed(made):
            with contextlib.suppress(KubeApiError):
                control_plane.rest.delete(path)


@pytest.fixture(scope="module")
def applied(control_plane: ControlPlane) -> Iterator[None]:
    with created(control_plane, [*shipped_rbac(), *reference_accounts()]):
        yield


def assert_rights_as_used(control_plane: ControlPlane) -> None:
    """Each fluence identity in kube-system may do what its code does and no more
    (:func:`reference_accounts` must exist)."""
    everyone = can_i_list(control_plane, "bound-to-nothing")
    plain_scheduler = can_i_list(control_plane, "plain-kube-scheduler")
    scheduler = can_i_list(control_plane, "fluence-scheduler")
    # kube-scheduler runs with a stock kube-scheduler's rights plus its leader election
    # lease under fluence's own name...
    lease = {("leases.coordination.k8s.io", "create")} | {
        ("leases.coordination.k8s.io/fluence-scheduler", v) for v in ("get", "update")
    }
    assert scheduler - everyone == (plain_scheduler - everyone) | lease
    # ...and the extender beside it under its own account, with exactly what its code calls.
    assert can_i_list(control_plane, "fluence-extender") - everyone == EXTENDER | EXTENDER_LEASE
    assert can_i_list(control_plane, "fluence-webhook") - everyone == WEBHOOK
    assert can_i_list(control_plane, "fluence-deviceplugin") - everyone == DEVICEPLUGIN


def test_each_identity_has_exactly_the_rights_its_code_uses(
    control_plane: ControlPlane, applied: None
) -> None:
    assert_rights_as_used(control_plane)


def test_the_extenders_own_role_grants_nothing_the_code_does_not_use() -> None:
    docs = shipped_rbac()
    role = next(
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "fluence-extender"
    )
    granted: set[Right] = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name = resource if not group else f"{resource.split('/')[0]}.{group}"
                if "/" in resource and group:
                    name = f"{resource.split('/')[0]}.{group}/{resource.split('/')[1]}"
                granted |= {(name, v) for v in rule["verbs"]}
    assert granted == EXTENDER
