"""Applying manifests, and the pods Deployments and Jobs would get from their controllers.

The local control plane runs no kube-controller-manager, so a Deployment or a
Job stored in the apiserver never gets pods. :func:`apply` creates every object
of a manifest and then creates, once, the pods their controllers would create:
a ReplicaSet plus ``replicas`` pods for a Deployment, and for an Indexed Job
one pod per index up to its parallelism, labelled, annotated and owned the way
the Job controller does it. That is what admission (the webhook reads the
owning Job) and the scheduler see on a real cluster; later reconciliation
(scaling, replacing failed pods, Job completion) is out of scope.

The body builders are pure functions of the stored object, tested without a server.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.rest import KubeApiError, KubeRest

log = logging.getLogger(__name__)

# Names the Deployment and Job controllers put on what they create.
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"
LABEL_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
ANNOTATION_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
ENV_JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class Applied:
    """What :func:`apply` created for one manifest."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    """Every object as stored, in creation order (owned ReplicaSets and pods included)."""

    @property
    def pods(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == "Pod"]


def _suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def _owner(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable short hash of a pod template (what pod-template-hash is to Deployments)."""
    digest = hashlib.sha256(yaml.safe_dump(dict(template), sort_keys=True).encode()).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:10])


def _pod_from_template(
    template: Mapping[str, Any], name: str, owner: Mapping[str, Any]
) -> dict[str, Any]:
    tmpl = copy.deepcopy(dict(template))
    meta = dict(tmpl.get("metadata") or {})
    meta.pop("name", None)
    meta["name"] = name
    meta["namespace"] = owner["metadata"]["namespace"]
    meta["ownerReferences"] = [_owner(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl.get("spec") or {}}


def replicaset_for(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The ReplicaSet a Deployment's controller creates for its current template."""
    spec = deployment["spec"]
    template = copy.deepcopy(spec["template"])
    pth = template_hash(template)
    template.setdefault("metadata", {}).setdefault("labels", {})[LABEL_POD_TEMPLATE_HASH] = pth
    selector = copy.deepcopy(spec["selector"])
    selector.setdefault("matchLabels", {})[LABEL_POD_TEMPLATE_HASH] = pth
    meta = deployment["metadata"]
    labels = dict((spec["template"].get("metadata") or {}).get("labels") or {})
    labels[LABEL_POD_TEMPLATE_HASH] = pth
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{pth}",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [_owner(deployment)],
        },
        "spec": {
            "replicas": spec.get("replicas", 1),
            "selector": selector,
            "template": template,
        },
    }


def pods_for_replicaset(replicaset: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``replicas`` pods named ``<replicaset>-<random>``, owned by the (stored) ReplicaSet."""
    spec = replicaset["spec"]
    name = replicaset["metadata"]["name"]
    return [
        _pod_from_template(spec["template"], f"{name}-{_suffix()}", replicaset)
        for _ in range(int(spec.get("replicas", 1)))
    ]


def pods_for_job(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods the Job controller starts first: one per index up to parallelism.

    Indexed Jobs get the completion index as label, annotation, hostname suffix
    and ``JOB_COMPLETION_INDEX`` env (read from the annotation), like upstream.
    """
    spec = job["spec"]
    name = job["metadata"]["name"]
    completions = spec.get("completions")
    parallelism = int(spec.get("parallelism", 1))
    count = min(parallelism, int(completions)) if completions is not None else parallelism
    indexed = spec.get("completionMode") == "Indexed"
    pods = []
    for index in range(count):
        pod_name = f"{name}-{index}-{_suffix()}" if indexed else f"{name}-{_suffix()}"
        pod = _pod_from_template(spec["template"], pod_name, job)
        if indexed:
            meta = pod["metadata"]
            meta.setdefault("labels", {})[LABEL_JOB_COMPLETION_INDEX] = str(index)
            meta.setdefault("annotations", {})[ANNOTATION_JOB_COMPLETION_INDEX] = str(index)
            pod["spec"].setdefault("hostname", f"{name}-{index}")
            field_path = f"metadata.annotations['{ANNOTATION_JOB_COMPLETION_INDEX}']"
            for container in [
                *(pod["spec"].get("initContainers") or []),
                *pod["spec"]["containers"],
            ]:
                env = container.setdefault("env", [])
                if not any(e.get("name") == ENV_JOB_COMPLETION_INDEX for e in env):
                    env.append(
                        {
                            "name": ENV_JOB_COMPLETION_INDEX,
                            "valueFrom": {"fieldRef": {"fieldPath": field_path}},
                        }
                    )
        pods.append(pod)
    return pods


class Discovery:
    """(apiVersion, kind) -> (resource plural, namespaced), read from the apiserver once."""

    def __init__(self, rest: KubeRest) -> None:
        self._rest = rest
        self._cache: dict[str, dict[str, tuple[str, bool]]] = {}

    @staticmethod
    def _base(api_version: str) -> str:
        return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"

    def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """``(plural, namespaced)`` or None when the apiserver does not serve the kind."""
        if api_version not in self._cache:
            try:
                listing = self._rest.get(self._base(api_version))
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                listing = {"resources": []}
            self._cache[api_version] = {
                r["kind"]: (r["name"], bool(r["namespaced"]))
                for r in listing.get("resources", [])
                if "/" not in r["name"]
            }
        return self._cache[api_version].get(kind)

    @classmethod
    def collection_path(cls, api_version: str, plural: str, namespace: str | None) -> str:
        """The path of a resource collection (cluster-wide when ``namespace`` is None)."""
        if namespace is None:
            return f"{cls._base(api_version)}/{plural}"
        return f"{cls._base(api_version)}/namespaces/{namespace}/{plural}"

    def collection(self, api_version: str, kind: str, namespace: str) -> str:
        """The collection path to POST ``kind`` to; raises when the server does not serve it."""
        found = self.resource(api_version, kind)
        if found is None:
            raise KubeApiError(
                "GET",
                self._base(api_version),
                404,
                f"the apiserver does not serve {api_version} {kind}; enable its API group",
            )
        plural, namespaced = found
        return self.collection_path(api_version, plural, namespace if namespaced else None)


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The Kubernetes objects (mappings with apiVersion and kind) in a YAML file."""
    return [
        d
        for d in yaml.safe_load_all(path.read_text())
        if isinstance(d, dict) and "apiVersion" in d and "kind" in d
    ]


def apply(
    rest: KubeRest,
    documents: Iterable[Mapping[str, Any]],
    namespace: str = "default",
    *,
    discovery: Discovery | None = None,
) -> Applied:
    """Create each object (in order), then the pods a Deployment or Job controller would."""
    discovery = discovery or Discovery(rest)
    applied = Applied()

    def create(body: Mapping[str, Any]) -> dict[str, Any]:
        ns = (body.get("metadata") or {}).get("namespace") or namespace
        path = discovery.collection(body["apiVersion"], body["kind"], ns)
        stored: dict[str, Any] = rest.create(path, dict(body))
        applied.objects.append(stored)
        return stored

    for document in documents:
        stored = create(document)
        if stored["kind"] == "Deployment":
            replicaset = create(replicaset_for(stored))
            for pod in pods_for_replicaset(replicaset):
                create(pod)
        elif stored["kind"] == "Job":
            for pod in pods_for_job(stored):
                create(pod)
    return applied


__all__ = [
    "Applied",
    "Discovery",
    "apply",
    "load_documents",
    "pods_for_job",
    "pods_for_replicaset",
    "replicaset_for",
    "template_hash",
]
