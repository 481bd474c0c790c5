"""Removing the PodGroups the webhook made for bare pods once their pods are gone.

A PodGroup the webhook made for a workload (a Job, a JobSet) is owned by it and
garbage-collected with it. One made for bare pods has no owner to go with: the
webhook cannot name the pods as owners (they do not exist yet when it runs), so
the queue's leader deletes it once no pod has named it for ``grace`` seconds,
with its UID as precondition, so a PodGroup made again under that name is kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kubernetes.client import CustomObjectsApi, V1DeleteOptions, V1Preconditions
from kubernetes.client.exceptions import ApiException

from fluence import names, telemetry
from fluence.pods import Pod, PodGroup

log = logging.getLogger(__name__)

_removed = telemetry.meter("fluence.queue").create_counter(
    "fluence_podgroups_removed",
    description="PodGroups the webhook made for bare pods, deleted after their pods went",
)

DEFAULT_GRACE = 60.0
"""Seconds a bare pods' PodGroup stays without pods before it is deleted: more than the
moment between a pod's admission, which made or found the PodGroup, and its creation."""


class PodGroupDeleter(Protocol):
    def __call__(self, group: PodGroup) -> None:
        """Delete ``group`` if its UID is still the same; ApiException otherwise."""
        ...


def api_podgroup_deleter(api: Any) -> PodGroupDeleter:
    custom = CustomObjectsApi(api)

    def delete(group: PodGroup) -> None:
        api_group, _, version = group.api_version.partition("/")
        custom.delete_namespaced_custom_object(
            api_group or names.PODGROUP_GROUP,
            version or names.PODGROUP_VERSIONS[0],
            group.metadata.namespace,
            names.PODGROUP_PLURAL,
            group.metadata.name,
            body=V1DeleteOptions(preconditions=V1Preconditions(uid=group.metadata.uid)),
        )

    return delete


def made_for_bare_pods(group: PodGroup) -> bool:
    meta = group.metadata
    return (
        meta.annotations.get(names.ANNOTATION_CREATED_BY) == names.CREATED_BY_WEBHOOK
        and meta.annotations.get(names.ANNOTATION_CREATED_FOR, "").startswith("user/")
        and not meta.owner_references
        and not meta.deletion_timestamp
    )


class PodGroupCleanup:
    def __init__(
        self,
        podgroups: Callable[[], Iterable[PodGroup]],
        pods: Callable[[], Iterable[Pod]],
        delete: PodGroupDeleter,
        *,
        grace: float = DEFAULT_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.podgroups = podgroups
        self.pods = pods
        self.delete = delete
        self.grace = grace
        self.clock = clock
        self._empty_since: dict[str, tuple[str, float]] = {}
        """PodGroup key -> (its UID, when it was first seen without pods)."""

    def step(self) -> list[str]:
        """Delete what has had no pods for the grace; the PodGroups deleted."""
        candidates = {g.key: g for g in self.podgroups() if made_for_bare_pods(g)}
        if not candidates:
            self._empty_since.clear()
            return []
        named = {
            f"{p.metadata.namespace}/{p.spec.scheduling_group.pod_group_name}"
            for p in self.pods()
            if p.spec.scheduling_group is not None
        }
        now = self.clock()
        deleted = []
        for key in [k for k in self._empty_since if k not in candidates or k in named]:
            del self._empty_since[key]
        for key, group in candidates.items():
            if key in named:
                continue
            uid, since = self._empty_since.setdefault(key, (group.metadata.uid, now))
            if uid != group.metadata.uid:
                self._empty_since[key] = (group.metadata.uid, now)
                continue
            if now - since < self.grace:
                continue
            del self._empty_since[key]
            try:
                self.delete(group)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    log.warning(
                        "PodGroup not removed", extra={"podgroup": key, "status": exc.status}
                    )
                continue
            _removed.add(1)
            deleted.append(key)
            log.info("PodGroup of bare pods removed after its pods", extra={"podgroup": key})
        return deleted
