"""The pods a manifest would make, for ``kubectl fluence plan -f``: nothing is submitted.

A Pod is itself; a Job makes ``parallelism`` pods of its template; a Deployment,
ReplicaSet or StatefulSet ``replicas``. Every pod of the file is planned as one
group, all or nothing, as a gang of them would be placed.
"""

from __future__ import annotations

from typing import Any

import yaml

COUNT_FIELD = {
    "Job": "parallelism",
    "Deployment": "replicas",
    "ReplicaSet": "replicas",
    "StatefulSet": "replicas",
}
MAX_PODS = 10_000


class ManifestError(ValueError):
    """The file holds nothing that makes pods, or something unreadable."""


def pods_from_manifests(text: str) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise ManifestError(f"not YAML: {exc}") from exc
    pods: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            raise ManifestError("every document must be a Kubernetes object (a mapping)")
        kind = doc.get("kind", "")
        name = (doc.get("metadata") or {}).get("name", "planned")
        if kind == "Pod":
            pods.append(doc)
            continue
        if kind not in COUNT_FIELD:
            continue  # PodGroups, Services, ConfigMaps...: they make no pods
        spec = doc.get("spec") or {}
        count = spec.get(COUNT_FIELD[kind], 1)
        if not isinstance(count, int) or count < 0:
            raise ManifestError(f"{kind} {name}: {COUNT_FIELD[kind]} must be a whole number")
        template = spec.get("template") or {}
        for i in range(count):
            meta = dict(template.get("metadata") or {})
            meta["name"] = f"{name}-{i}"
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": meta,
                    "spec": template.get("spec") or {},
                }
            )
        if len(pods) > MAX_PODS:
            raise ManifestError(f"more than {MAX_PODS} pods: plan a smaller part")
    if not pods:
        raise ManifestError("no Pod, Job, Deployment, ReplicaSet or StatefulSet in the file")
    return pods
