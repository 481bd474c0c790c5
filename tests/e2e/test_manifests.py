"""Every manifest in deploy/ and examples/ is accepted by a real apiserver (server-side dry run).

Each Kubernetes object is created with ``dryRun=All``: the apiserver decodes,
defaults, validates and runs admission on it without storing it. The
namespaces the objects live in are created for real first. Documents that are
not Kubernetes objects (the resources config, the kind cluster config) are left
out by name of their API group or by lacking apiVersion/kind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ControlPlane, KubeApiError
from testbed.cluster import RELEASES
from testbed.workloads import Discovery

REPO = Path(__file__).resolve().parents[2]
MANIFEST_FILES = sorted([*REPO.glob("deploy/*.yaml"), *REPO.glob("examples/*.yaml")])
# API groups of configuration files that are YAML but not objects for an apiserver.
NOT_KUBERNETES_GROUPS = {"kind.x-k8s.io"}

# cert-manager is not part of the test control plane. Its Issuer and Certificate are
# served here through minimal CRDs whose schema preserves unknown fields: the dry run
# then checks apiVersion/kind/metadata and the namespace, not cert-manager's own schema.
CERT_MANAGER_KINDS = {"Issuer": "issuers", "Certificate": "certificates"}


@dataclass(frozen=True)
class Document:
    path: Path
    index: int
    body: dict[str, Any]

    @property
    def label(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{self.path.relative_to(REPO)}#{self.index} {self.body['kind']}/{meta.get('name')}"


def kubernetes_documents(path: Path) -> list[Document]:
    docs = []
    for index, body in enumerate(yaml.safe_load_all(path.read_text())):
        if not isinstance(body, dict) or "apiVersion" not in body or "kind" not in body:
            continue
        group = body["apiVersion"].rpartition("/")[0]
        if group in NOT_KUBERNETES_GROUPS:
            continue
        docs.append(Document(path, index, body))
    return docs


def cert_manager_crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def served_cert_manager(control_plane: ControlPlane) -> None:
    for kind, plural in CERT_MANAGER_KINDS.items():
        name = f"{plural}.cert-manager.io"
        try:
            control_plane.rest.get(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
        except KubeApiError:
            control_plane.rest.create(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                cert_manager_crd(kind, plural),
            )
    # Discovery lags CRD creation by a moment; wait until both kinds are served.
    deadline = time.monotonic() + 30
    while True:
        discovery = Discovery(control_plane.rest)
        if all(discovery.resource("cert-manager.io/v1", k) for k in CERT_MANAGER_KINDS):
            return
        assert time.monotonic() < deadline, "cert-manager CRDs not served after 30s"
        time.sleep(0.2)


def ensure_namespace(control_plane: ControlPlane, name: str) -> None:
    try:
        control_plane.rest.get(f"/api/v1/namespaces/{name}")
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        control_plane.create_namespace(name)


def test_manifest_files_exist() -> None:
    assert (REPO / "deploy" / "kind-config.yaml") in MANIFEST_FILES
    assert any(kubernetes_documents(path) for path in MANIFEST_FILES)


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_server_side_dry_run_accepts_every_object(
    control_plane: ControlPlane, served_cert_manager: None, path: Path
) -> None:
    documents = kubernetes_documents(path)
    discovery = Discovery(control_plane.rest)
    # Namespace objects in the file are checked before their namespaces are created for real.
    ordered = sorted(documents, key=lambda d: d.body["kind"] != "Namespace")
    failures: list[str] = []
    for doc in ordered:
        api_version, kind = doc.body["apiVersion"], doc.body["kind"]
        resource = discovery.resource(api_version, kind)
        if resource is None:
            failures.append(f"{doc.label}: {api_version} {kind} is not served by the apiserver")
            continue
        plural, namespaced = resource
        namespace = None
        if namespaced:
            namespace = (doc.body.get("metadata") or {}).get("namespace") or "default"
            ensure_namespace(control_plane, namespace)
        try:
            control_plane.rest.create(
                discovery.collection_path(api_version, plural, namespace),
                doc.body,
                dryRun="All",
                fieldValidation="Strict",
            )
        except KubeApiError as exc:
            failures.append(f"{doc.label}: {exc}")
    assert not failures, "server-side dry run rejected:\n" + "\n".join(failures)


def test_kind_config_enables_what_the_test_control_plane_enables() -> None:
    config = yaml.safe_load((REPO / "deploy" / "kind-config.yaml").read_text())
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    release = RELEASES["1.36"]  # kind's node image is the 1.36 one
    gates = dict(item.split("=") for item in release.feature_gates.split(","))
    assert {k: str(v).lower() for k, v in config["featureGates"].items()} == gates
    group_version, value = release.runtime_config.split("=")
    assert config["runtimeConfig"] == {group_version: value}
    images = {node["image"] for node in config["nodes"]}
    assert len(images) == 1
    (image,) = images
    assert image.startswith("kindest/node:v1.36.") and "@sha256:" in image
    assert [n["role"] for n in config["nodes"]].count("control-plane") == 1


def test_scheduler_and_webhook_survive_a_drain_and_spread_over_nodes() -> None:
    docs = [d.body for p in MANIFEST_FILES for d in kubernetes_documents(p)]
    budgets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodDisruptionBudget"}
    for name in ("fluence-scheduler", "fluence-webhook"):
        deployment = next(
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name
        )
        assert deployment["spec"]["replicas"] >= 2
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        budget = budgets[name]["spec"]
        assert budget["minAvailable"] == 1
        assert budget["selector"]["matchLabels"].items() <= pod_labels.items()
        (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
        assert spread["labelSelector"]["matchLabels"].items() <= pod_labels.items()
