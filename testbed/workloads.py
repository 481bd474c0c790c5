"""Applying manifests as ``kubectl create`` does, and how many pods their controllers make.

kube-controller-manager runs beside the API server, so a Deployment or a Job
gets its pods from the real controllers; :func:`apply` only creates the
objects, and :func:`expected_pods` says how many pods to wait for.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.rest import KubeApiError, KubeRest

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """What :func:`apply` created for one manifest."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    """Every object as stored, in creation order."""

    @property
    def expected_pods(self) -> int:
        return sum(expected_pods(o) for o in self.objects)


def expected_pods(obj: Mapping[str, Any]) -> int:
    """Pods that exist once the object's controller has acted: 1 for a Pod, the replicas of a
    Deployment, ReplicaSet or StatefulSet, min(parallelism, completions) of a running Job."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return 1
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        return int(spec.get("replicas", 1))
    if kind == "Job":
        if spec.get("suspend"):
            return 0
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        return min(parallelism, int(completions)) if completions is not None else parallelism
    return 0


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
    """Create each object (in order), in ``namespace`` unless it names its own."""
    discovery = discovery or Discovery(rest)
    applied = Applied()
    for document in documents:
        ns = (document.get("metadata") or {}).get("namespace") or namespace
        path = discovery.collection(document["apiVersion"], document["kind"], ns)
        stored: dict[str, Any] = rest.create(path, dict(document))
        applied.objects.append(stored)
    return applied


__all__ = ["Applied", "Discovery", "apply", "expected_pods", "load_documents"]
