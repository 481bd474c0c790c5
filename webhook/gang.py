"""Gang wiring: a pod with the group label gets a native PodGroup and a link to it.

Kubernetes 1.36 gangs pods through ``scheduling.k8s.io/v1alpha2`` PodGroups
referenced by ``spec.schedulingGroup``, a field that is immutable after
creation, so admission is the one place to set it. The decision (which group,
which namespace, which size) is pure; talking to the API server goes through
the small :class:`GangCluster` protocol, run in a thread because the official
client blocks. Clusters without the API are left alone: the extender reads the
group label itself.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fluence import names
from webhook.patch import PatchBuilder, pointer
from webhook.review import Pod

log = logging.getLogger(__name__)

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class GangRequest:
    """What admission learned about a pod's gang, before any API call."""

    group: str
    namespace: str
    size_annotation: int | None
    job: str | None
    """Name of the owning batch Job, whose parallelism sizes the gang when no annotation does."""


def plan_gang(pod: Pod, namespace: str) -> tuple[GangRequest | None, list[str]]:
    """The gang to wire for ``pod`` (None when there is nothing to do) and warnings for the user."""
    group = pod.labels.get(names.LABEL_GROUP, "")
    if not group or pod.spec.scheduling_group is not None:
        return None, []
    warnings: list[str] = []
    if len(group) > 253 or not _DNS_SUBDOMAIN.match(group):
        return None, [
            f"group {group!r} is not a valid PodGroup name (lower-case DNS subdomain); "
            "no PodGroup was created, the group label alone identifies the gang"
        ]
    namespace = namespace or pod.metadata.namespace
    if not namespace:
        return None, ["the pod has no namespace; no PodGroup was created"]
    size: int | None = None
    raw = pod.annotations.get(names.ANNOTATION_GROUP_SIZE)
    if raw is not None:
        try:
            size = int(raw.strip())
        except ValueError:
            size = None
        if size is None or size <= 0:
            size = None
            warnings.append(
                f"{names.ANNOTATION_GROUP_SIZE}={raw!r} is not a positive integer; "
                "the gang size comes from the owning Job, else 1"
            )
    job = next(
        (
            o.name
            for o in pod.metadata.owner_references or ()
            if o.kind == "Job" and o.api_version.startswith("batch/") and o.name
        ),
        None,
    )
    return GangRequest(group, namespace, size, job), warnings


def resolve_min_count(request: GangRequest, job_size: Callable[[str, str], int | None]) -> int:
    """The annotation if set, else the owning Job's parallelism (else completions), else 1."""
    if request.size_annotation:
        return request.size_annotation
    if request.job:
        size = job_size(request.namespace, request.job)
        if size and size > 0:
            return size
    return 1


def podgroup_body(group: str, namespace: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": group,
            "namespace": namespace,
            "labels": {names.LABEL_GROUP: group},
            "annotations": {names.ANNOTATION_CREATED_BY: names.CREATED_BY_WEBHOOK},
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": max(1, min_count)}}},
    }


class GangCluster(Protocol):
    """The three API calls gang wiring needs (blocking; called from a thread)."""

    def serves_podgroups(self) -> bool: ...

    def job_size(self, namespace: str, name: str) -> int | None: ...

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        """Create it; True if created, False if it already existed; raises otherwise."""
        ...


class KubeGangCluster:
    """:class:`GangCluster` over the official kubernetes client."""

    def __init__(self, api_client: Any, timeout: float = 3.0) -> None:
        from kubernetes import client

        self._custom = client.CustomObjectsApi(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._timeout = timeout

    def serves_podgroups(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            listing = self._custom.get_api_resources(
                names.PODGROUP_GROUP, names.PODGROUP_VERSION, _request_timeout=self._timeout
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return any(r.name == names.PODGROUP_PLURAL for r in listing.resources or ())

    def job_size(self, namespace: str, name: str) -> int | None:
        from kubernetes.client.exceptions import ApiException

        try:
            job = self._batch.read_namespaced_job(name, namespace, _request_timeout=self._timeout)
        except ApiException as e:
            log.warning(
                "cannot read the owning Job; gang size falls back to 1",
                extra={"namespace": namespace, "job": name, "status": e.status},
            )
            return None
        spec = job.spec
        if spec is None:
            return None
        return int(spec.parallelism or spec.completions or 0) or None

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self._custom.create_namespaced_custom_object(
                names.PODGROUP_GROUP,
                names.PODGROUP_VERSION,
                body["metadata"]["namespace"],
                names.PODGROUP_PLURAL,
                body,
                _request_timeout=self._timeout,
            )
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True


class GangWiring:
    """Knows whether the cluster serves PodGroups and wires gangs when it does.

    The members of a gang arrive in a burst (a Job or ReplicaSet creates them
    one after another), so a PodGroup known to exist is remembered for
    ``ensured_ttl`` seconds and the following members skip the create call.
    The window is short because a PodGroup deleted inside it would leave a
    member linked to nothing.
    """

    MAX_REMEMBERED = 4096

    def __init__(
        self,
        cluster: GangCluster | None,
        *,
        recheck_seconds: float = 300.0,
        ensured_ttl: float = 10.0,
        budget_seconds: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.budget_seconds = budget_seconds
        """All API calls of one review together: below the webhook's timeoutSeconds."""
        self.recheck_seconds = recheck_seconds
        self.ensured_ttl = ensured_ttl
        self.served = False
        self._clock = clock
        self._ensured: dict[tuple[str, str], float] = {}
        self.checked_at: float | None = None

    def _recently_ensured(self, key: tuple[str, str]) -> bool:
        expiry = self._ensured.get(key)
        return expiry is not None and expiry > self._clock()

    def _remember(self, key: tuple[str, str]) -> None:
        if self.ensured_ttl <= 0:
            return
        now = self._clock()
        if len(self._ensured) >= self.MAX_REMEMBERED:
            self._ensured = {k: t for k, t in self._ensured.items() if t > now}
            if len(self._ensured) >= self.MAX_REMEMBERED:
                self._ensured.clear()
        self._ensured[key] = now + self.ensured_ttl

    async def refresh(self) -> bool:
        """Ask the API server (again) whether it serves scheduling.k8s.io/v1alpha2 podgroups."""
        if self.cluster is None:
            return False
        try:
            served = await asyncio.to_thread(self.cluster.serves_podgroups)
        except Exception as e:  # a flaky API server must not stop the webhook
            log.warning(
                "cannot discover the PodGroup API; gang wiring stays as it was",
                extra={"error": str(e)},
            )
            return self.served
        if served != self.served or self.checked_at is None:
            log.info(
                "PodGroup API discovery",
                extra={"served": served, "api": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}"},
            )
        self.served = served
        self.checked_at = self._clock()
        return served

    async def watch(self) -> None:
        """Re-check discovery every ``recheck_seconds`` (background task)."""
        while True:
            await asyncio.sleep(self.recheck_seconds)
            await self.refresh()

    async def _ensure(
        self, cluster: GangCluster, request: GangRequest, dry_run: bool, warnings: list[str]
    ) -> bool:
        """Make sure the PodGroup exists; False (with a warning) when it cannot be."""
        key = (request.namespace, request.group)
        if not dry_run and not self._recently_ensured(key):
            min_count = await asyncio.to_thread(resolve_min_count, request, cluster.job_size)
            body = podgroup_body(request.group, request.namespace, min_count)
            try:
                created = await asyncio.to_thread(cluster.create_podgroup, body)
            except Exception as e:
                log.error(
                    "PodGroup creation failed; the pod is not linked",
                    extra={"group": request.group, "namespace": request.namespace, "error": str(e)},
                )
                warnings.append(
                    f"could not create PodGroup {request.group!r}; the pod is gang-scheduled "
                    "by its label only (check the webhook's RBAC and logs)"
                )
                return False
            self._remember(key)
            if created:
                log.info(
                    "PodGroup created",
                    extra={
                        "group": request.group,
                        "namespace": request.namespace,
                        "min_count": min_count,
                    },
                )
        return True

    async def wire(
        self, request: GangRequest, *, dry_run: bool, patch: PatchBuilder, warnings: list[str]
    ) -> None:
        """Ensure the PodGroup exists (not on dry-run) and link the pod to it."""
        if self.cluster is None or not self.served:
            return
        try:
            linked = await asyncio.wait_for(
                self._ensure(self.cluster, request, dry_run, warnings), self.budget_seconds
            )
        except TimeoutError:
            log.error(
                "API server too slow for the admission deadline; the pod is not linked",
                extra={"group": request.group, "namespace": request.namespace},
            )
            warnings.append(
                f"the API server did not answer within {self.budget_seconds:g}s; PodGroup "
                f"{request.group!r} was not ensured and the pod is gang-scheduled by its label only"
            )
            return
        if not linked:
            return
        patch.add(pointer("spec", "schedulingGroup"), {"podGroupName": request.group})
