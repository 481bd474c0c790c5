"""Gang wiring: a pod with the group label gets a native PodGroup and a link to it.

Kubernetes gangs pods through ``scheduling.k8s.io`` PodGroups (``v1beta1`` from
1.37, ``v1alpha2`` in 1.36; the served version is discovered) referenced by
``spec.schedulingGroup``, a field that is immutable after creation, so
admission is the one place to set it. The decision (which group,
which namespace, which size) is pure; talking to the API server goes through
the small :class:`GangCluster` protocol, run in a thread because the official
client blocks. Clusters without the API are left alone: the extender reads the
group label itself.

The webhook holds cluster-wide rights to create PodGroups, so it must not lend
them to whoever creates a pod. A PodGroup is created only when the requesting
user could create it themselves (a SubjectAccessReview), or when the request
comes from a trusted workload controller on behalf of the pod's controlling
owner (whose creator the API server already authorised). The PodGroup records
the workload it was made for and is owned by that workload, so it is
garbage-collected with it; a PodGroup made for another workload, or not made by
the webhook, is never adopted.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluence import names
from fluence.groups import parse_group_size
from fluence.json_patch import PatchBuilder, pointer
from webhook.review import Pod, UserInfo

log = logging.getLogger(__name__)

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class Owner:
    """The pod's controlling owner, which also owns the PodGroup made for its pods."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass(frozen=True)
class GangRequest:
    """What admission learned about a pod's gang, before any API call."""

    group: str
    namespace: str
    size_annotation: int | None
    job: str | None
    """Name of the owning batch Job, whose parallelism sizes the gang when no annotation does."""
    owner: Owner | None = None
    user: UserInfo = field(default_factory=UserInfo)
    """Who creates the pod (the AdmissionReview's userInfo)."""
    priority_class: str = ""
    """The pod's PriorityClass, which its PodGroup must share: kube-scheduler places a
    group only when every pod has the group's priority."""

    @property
    def workload(self) -> str:
        """Whom the PodGroup is for: the controlling owner, else the user creating bare pods."""
        if self.owner is not None:
            return f"{self.owner.kind}/{self.owner.name}/{self.owner.uid}"
        return f"user/{self.user.username}"


def plan_gang(
    pod: Pod, namespace: str, user: UserInfo | None = None
) -> tuple[GangRequest | None, list[str]]:
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
        size = parse_group_size(raw)
        if size is None:
            warnings.append(
                f"{names.ANNOTATION_GROUP_SIZE}={raw!r} is not a plain positive integer; "
                "the gang size comes from the owning Job, else 1"
            )
    refs = pod.metadata.owner_references or ()
    job = next(
        (o.name for o in refs if o.kind == "Job" and o.api_version.startswith("batch/") and o.name),
        None,
    )
    owner = next(
        (
            Owner(o.api_version, o.kind, o.name, o.uid)
            for o in refs
            if o.controller and o.api_version and o.kind and o.name and o.uid
        ),
        None,
    )
    request = GangRequest(
        group, namespace, size, job, owner, user or UserInfo(), pod.spec.priority_class_name
    )
    return request, warnings


def resolve_min_count(request: GangRequest, job_size: Callable[[str, str], int | None]) -> int:
    """The annotation if set, else the owning Job's parallelism (else completions), else 1."""
    if request.size_annotation:
        return request.size_annotation
    if request.job:
        size = job_size(request.namespace, request.job)
        if size and size > 0:
            return size
    return 1


def podgroup_body(
    request: GangRequest, min_count: int, version: str = names.PODGROUP_VERSIONS[0]
) -> dict[str, Any]:
    """The PodGroup for the request's workload, owned by the pod's controlling owner if any."""
    metadata: dict[str, Any] = {
        "name": request.group,
        "namespace": request.namespace,
        "labels": {names.LABEL_GROUP: request.group},
        "annotations": {
            names.ANNOTATION_CREATED_BY: names.CREATED_BY_WEBHOOK,
            names.ANNOTATION_CREATED_FOR: request.workload,
        },
    }
    if request.owner is not None:
        metadata["ownerReferences"] = [request.owner.reference()]
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": max(1, min_count)}}}
    if request.priority_class:
        spec["priorityClassName"] = request.priority_class
    if version == "v1beta1":
        # A fluence gang is all or nothing, in preemption too; the API's default is single.
        spec["disruptionMode"] = {"all": {}}
    return {
        "apiVersion": f"{names.PODGROUP_GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": spec,
    }


def made_for(podgroup: dict[str, Any] | None, request: GangRequest) -> bool:
    """True when ``podgroup`` was created by the webhook for the request's workload."""
    if podgroup is None:
        return False
    annotations = (podgroup.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(names.ANNOTATION_CREATED_BY) == names.CREATED_BY_WEBHOOK
        and annotations.get(names.ANNOTATION_CREATED_FOR) == request.workload
    )


class GangCluster(Protocol):
    """The API calls gang wiring needs (blocking; called from a thread)."""

    def served_podgroup_version(self) -> str | None:
        """The newest version of names.PODGROUP_VERSIONS the API server serves PodGroups in."""
        ...

    def job_size(self, namespace: str, name: str) -> int | None: ...

    def may_create_podgroups(self, user: UserInfo, namespace: str) -> bool:
        """Whether ``user`` may create PodGroups in ``namespace`` (SubjectAccessReview)."""
        ...

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        """Create it; True if created, False if it already existed; raises otherwise."""
        ...

    def read_podgroup(self, namespace: str, name: str, version: str) -> dict[str, Any] | None:
        """The PodGroup as a dict, None when there is none."""
        ...


class KubeGangCluster:
    """:class:`GangCluster` over the official kubernetes client."""

    def __init__(self, api_client: Any, timeout: float = 3.0) -> None:
        from kubernetes import client

        self._custom = client.CustomObjectsApi(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._timeout = timeout

    def served_podgroup_version(self) -> str | None:
        from kubernetes.client.exceptions import ApiException

        for version in names.PODGROUP_VERSIONS:
            try:
                listing = self._custom.get_api_resources(
                    names.PODGROUP_GROUP, version, _request_timeout=self._timeout
                )
            except ApiException as e:
                if e.status == 404:
                    continue
                raise
            if any(r.name == names.PODGROUP_PLURAL for r in listing.resources or ()):
                return version
        return None

    def _job_spec(self, namespace: str, name: str, without: str) -> Any:
        """The Job's spec; None (logged: ``without`` says what is lost) when it cannot be read."""
        from kubernetes.client.exceptions import ApiException

        try:
            job = self._batch.read_namespaced_job(name, namespace, _request_timeout=self._timeout)
        except ApiException as e:
            log.warning(
                f"cannot read the owning Job; {without}",
                extra={"namespace": namespace, "job": name, "status": e.status},
            )
            return None
        return job.spec

    def job_size(self, namespace: str, name: str) -> int | None:
        spec = self._job_spec(namespace, name, "gang size falls back to 1")
        if spec is None:
            return None
        return int(spec.parallelism or spec.completions or 0) or None

    def job_deadline(self, namespace: str, name: str) -> int | None:
        """The Job's ``spec.activeDeadlineSeconds`` (see :mod:`webhook.job_runtime`)."""
        spec = self._job_spec(namespace, name, "no runtime estimate from it")
        deadline = spec.active_deadline_seconds if spec is not None else None
        return int(deadline) if deadline else None

    def may_create_podgroups(self, user: UserInfo, namespace: str) -> bool:
        from kubernetes import client

        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user.username,
                uid=user.uid or None,
                groups=user.groups or None,
                extra=user.extra or None,
                resource_attributes=client.V1ResourceAttributes(
                    group=names.PODGROUP_GROUP,
                    resource=names.PODGROUP_PLURAL,
                    verb="create",
                    namespace=namespace,
                ),
            )
        )
        answer = self._authz.create_subject_access_review(review, _request_timeout=self._timeout)
        return bool(answer.status and answer.status.allowed)

    def read_podgroup(self, namespace: str, name: str, version: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            found = self._custom.get_namespaced_custom_object(
                names.PODGROUP_GROUP,
                version,
                namespace,
                names.PODGROUP_PLURAL,
                name,
                _request_timeout=self._timeout,
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return found if isinstance(found, dict) else None

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self._custom.create_namespaced_custom_object(
                names.PODGROUP_GROUP,
                body["apiVersion"].rpartition("/")[2],
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


PRIORITY_MUST_MATCH = frozenset({"v1beta1"})
"""PodGroup versions whose kube-scheduler places a group only when every pod has the
group's priority (1.37 on). 1.36 (``v1alpha2``) compares nothing, and its API server
drops a PodGroup's priority class unless the ``WorkloadAwarePreemption`` gate is on."""

_Decision = tuple[str, str, str, str, str]
"""Namespace, group, workload, requesting user and priority class of a remembered link."""


class GangWiring:
    """Knows whether the cluster serves PodGroups and wires gangs when it does.

    The members of a gang arrive in a burst (a Job or ReplicaSet creates them
    one after another), so a PodGroup known to exist is remembered for
    ``ensured_ttl`` seconds and the following members skip the create call.
    The window is short because a PodGroup deleted inside it would leave a
    member linked to nothing. What is remembered is the whole decision (group,
    workload and requesting user), so a cached answer never links a pod that
    the full check would not have.
    """

    MAX_REMEMBERED = 4096

    def __init__(
        self,
        cluster: GangCluster | None,
        *,
        recheck_seconds: float = 300.0,
        ensured_ttl: float = 10.0,
        budget_seconds: float = 3.0,
        trusted_controllers: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.budget_seconds = budget_seconds
        """All API calls of one review together: below the webhook's timeoutSeconds."""
        self.recheck_seconds = recheck_seconds
        self.ensured_ttl = ensured_ttl
        self.trusted_controllers = trusted_controllers
        """Usernames of workload controllers whose pods get a PodGroup for their owner."""
        self.served = False
        self.version = names.PODGROUP_VERSIONS[0]
        """The PodGroup version the API server serves (meaningful while ``served``)."""
        self._clock = clock
        self._ensured: dict[_Decision, float] = {}
        self.checked_at: float | None = None

    def _recently_ensured(self, key: _Decision) -> bool:
        expiry = self._ensured.get(key)
        return expiry is not None and expiry > self._clock()

    def _remember(self, key: _Decision) -> None:
        if self.ensured_ttl <= 0:
            return
        now = self._clock()
        if len(self._ensured) >= self.MAX_REMEMBERED:
            self._ensured = {k: t for k, t in self._ensured.items() if t > now}
            if len(self._ensured) >= self.MAX_REMEMBERED:
                self._ensured.clear()
        self._ensured[key] = now + self.ensured_ttl

    async def refresh(self) -> bool:
        """Ask the API server (again) which PodGroup version it serves, if any."""
        if self.cluster is None:
            return False
        try:
            version = await asyncio.to_thread(self.cluster.served_podgroup_version)
        except Exception as e:  # a flaky API server must not stop the webhook
            log.warning(
                "cannot discover the PodGroup API; gang wiring stays as it was",
                extra={"error": str(e)},
            )
            return self.served
        served = version is not None
        if served != self.served or version != self.version or self.checked_at is None:
            log.info(
                "PodGroup API discovery",
                extra={
                    "served": served,
                    "api": f"{names.PODGROUP_GROUP}/{version}" if version else None,
                },
            )
        self.served = served
        if version is not None:
            self.version = version
        self.checked_at = self._clock()
        return served

    async def watch(self) -> None:
        """Re-check discovery every ``recheck_seconds`` (background task)."""
        while True:
            await asyncio.sleep(self.recheck_seconds)
            await self.refresh()

    def _by_trusted_controller(self, request: GangRequest) -> bool:
        return request.owner is not None and request.user.username in self.trusted_controllers

    async def _authorized(
        self, cluster: GangCluster, request: GangRequest, warnings: list[str]
    ) -> bool:
        """Whether the PodGroup may be created for this request (see the module docstring)."""
        if self._by_trusted_controller(request):
            return True
        try:
            allowed = await asyncio.to_thread(
                cluster.may_create_podgroups, request.user, request.namespace
            )
        except Exception as e:
            log.error(
                "SubjectAccessReview failed; the pod is not linked",
                extra={"group": request.group, "namespace": request.namespace, "error": str(e)},
            )
            warnings.append(
                f"could not check whether {request.user.username or 'the requester'!r} may create "
                f"PodGroups; {request.group!r} was not linked and the pod is gang-scheduled by "
                "its label only"
            )
            return False
        if not allowed:
            log.warning(
                "requester may not create PodGroups; the pod is not linked",
                extra={
                    "group": request.group,
                    "namespace": request.namespace,
                    "user": request.user.username,
                },
            )
            warnings.append(
                f"{request.user.username or 'the requester'!r} may not create PodGroups in "
                f"{request.namespace!r}, so the webhook created none; the pod is gang-scheduled "
                "by its group label only"
            )
        return allowed

    async def _adoptable(
        self,
        cluster: GangCluster,
        request: GangRequest,
        warnings: list[str],
        *,
        absent_ok: bool = False,
    ) -> bool:
        """An existing PodGroup of that name is linked only when it was made for this workload.

        ``absent_ok``: no PodGroup at all is fine too (a dry run, which creates nothing).
        """
        try:
            existing = await asyncio.to_thread(
                cluster.read_podgroup, request.namespace, request.group, self.version
            )
        except Exception as e:
            log.error(
                "cannot read the existing PodGroup; the pod is not linked",
                extra={"group": request.group, "namespace": request.namespace, "error": str(e)},
            )
            warnings.append(
                f"could not read PodGroup {request.group!r}; the pod is gang-scheduled by its "
                "label only"
            )
            return False
        if existing is None and absent_ok:
            return True
        if made_for(existing, request):
            theirs = ((existing or {}).get("spec") or {}).get("priorityClassName") or ""
            if theirs == request.priority_class or self.version not in PRIORITY_MUST_MATCH:
                return True
            warnings.append(
                f"PodGroup {request.group!r} has priority class {theirs or 'none'!r} and this "
                f"pod {request.priority_class or 'none'!r}; kube-scheduler places a group only "
                "when all its pods share its priority, so the pod was not linked to it"
            )
            return False
        log.warning(
            "a PodGroup of that name exists for another workload; the pod is not linked",
            extra={
                "group": request.group,
                "namespace": request.namespace,
                "workload": request.workload,
            },
        )
        warnings.append(
            f"PodGroup {request.group!r} already exists and was not created by the fluence "
            f"webhook for this workload ({request.workload}); the pod was not linked to it. "
            "Use another group name, or set spec.schedulingGroup yourself"
        )
        return False

    async def _ensure(
        self, cluster: GangCluster, request: GangRequest, dry_run: bool, warnings: list[str]
    ) -> bool:
        """Make sure the PodGroup exists for this workload; False (with a warning) otherwise."""
        key = (
            request.namespace,
            request.group,
            request.workload,
            request.user.username,
            request.priority_class,
        )
        if self._recently_ensured(key):
            return True
        if not await self._authorized(cluster, request, warnings):
            return False
        if dry_run:
            return await self._adoptable(cluster, request, warnings, absent_ok=True)
        min_count = await asyncio.to_thread(resolve_min_count, request, cluster.job_size)
        body = podgroup_body(request, min_count, self.version)
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
        if not created and not await self._adoptable(cluster, request, warnings):
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
