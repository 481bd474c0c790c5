"""One admission review, start to finish: decode, decide, wire the gang, answer.

Pods get the env, the queue's gate and their gang; batch/v1 Jobs of the fluence
profile get the podFailurePolicy rule of :mod:`webhook.job_policy`.

Kept apart from the HTTP layer so tests drive it with bytes in, bytes out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fluence import names
from fluence.json_patch import PatchBuilder
from webhook import env, gang
from webhook.job_policy import plan_job
from webhook.job_runtime import JobRuntimes, needs_job_deadline
from webhook.review import (
    AdmissionRequest,
    Pod,
    UserInfo,
    allow,
    decode_job,
    decode_pod,
    decode_review,
)

log = logging.getLogger(__name__)

UNAUTHENTICATED_GANG = (
    "the fluence webhook runs without client authentication, so it creates no PodGroup: "
    "create it yourself and set spec.schedulingGroup, or set the "
    f"{names.ANNOTATION_GROUP_SIZE} annotation to gang the pod by its label"
)


@dataclass
class Mutation:
    """The patch and warnings for one pod, plus the gang still to wire (needs the API server)."""

    patch: PatchBuilder = field(default_factory=PatchBuilder)
    warnings: list[str] = field(default_factory=list)
    gang: gang.GangRequest | None = None
    timeouts: env.EnvPlan | None = None
    """Set when the pod's deadline may still come from its Job: QRMI timeouts to add then."""


def mutate(
    pod: Pod,
    namespace: str,
    contract: env.EnvContract,
    user: UserInfo | None = None,
    *,
    queue: bool = True,
) -> Mutation:
    """Everything decided from the pod alone: env vars, the queue's gate, warnings, which
    gang to wire."""
    result = Mutation()
    if pod.spec.scheduler_name != names.SCHEDULER_NAME:
        asked = sorted({t for s in env.containers(pod) for t in env.fluxion_types(s.container)})
        if asked:
            result.warnings.append(
                f"the pod requests {names.resource_name(asked[0])} but spec.schedulerName is "
                f"{pod.spec.scheduler_name or 'unset'!r}; only schedulerName "
                f"{names.SCHEDULER_NAME!r} assigns a backend"
            )
        return result
    plan = env.plan_env(pod, contract)
    result.warnings.extend(plan.warnings)
    env.add_env(plan, contract, result.patch, queued=queue)
    if plan.qrmi and needs_job_deadline(pod) is not None:
        result.timeouts = plan
    else:
        env.add_timeouts(plan, pod.spec.active_deadline_seconds, result.patch)
    if queue:
        add_queue_gate(pod, result.patch)
    result.gang, gang_warnings = gang.plan_gang(pod, namespace, user)
    result.warnings.extend(gang_warnings)
    return result


def add_queue_gate(pod: Pod, patch: PatchBuilder) -> None:
    """Hold the pod back from kube-scheduler until the queue has placed its whole group.

    Pods of a Job are gated like any other rather than the Job suspended: the queue
    places groups of pods whatever made them (Jobs, JobSets, StatefulSets, bare pods),
    and a gated pod already exists, so its group's quorum is counted from the API
    server as the extender path counts it.
    """
    gates = pod.spec.scheduling_gates
    if any(g.name == names.QUEUE_GATE for g in gates or ()):
        return
    patch.append("/spec/schedulingGates", gates is not None, {"name": names.QUEUE_GATE})


class Admission:
    """Answers AdmissionReviews for Pod CREATE and batch/v1 Job CREATE.

    ``authenticated`` is False when anyone may post a review: then ``wiring`` and
    ``runtimes`` must be None too (see :func:`webhook.__main__.build_admission`), and
    a pod that asks for a gang is told how to get one without the webhook.
    """

    def __init__(
        self,
        contract: Callable[[], env.EnvContract],
        wiring: gang.GangWiring | None = None,
        runtimes: JobRuntimes | None = None,
        *,
        authenticated: bool = True,
        queue: bool = True,
    ) -> None:
        self.contract = contract
        self.queue = queue
        """Gate the pods of the fluence profile for the queue (``FLUENCE_QUEUE``)."""
        self.wiring = wiring
        self.runtimes = runtimes
        self.authenticated = authenticated

    async def review(self, body: bytes) -> bytes:
        """The encoded response review; :class:`~webhook.review.ReviewError` for a bad request."""
        request = decode_review(body)
        try:
            return await self._review(request)
        except Exception:
            # Admission only adds conveniences (env vars, a gang link, a Job's rule). With
            # failurePolicy Fail a 500 would reject every fluence pod for as long
            # as a bug lasts; allowing with a warning keeps workloads running and
            # tells their owner why the variables are missing.
            what = "Job" if request.is_job_create else "pod"
            log.exception(
                "admission failed; object allowed unchanged",
                extra={"uid": request.uid, "kind": what},
            )
            return allow(
                request.uid,
                warnings=[
                    f"fluence webhook hit an internal error; the {what} was admitted unchanged"
                ],
            )

    async def _review(self, request: AdmissionRequest) -> bytes:
        if request.is_job_create:
            return review_job(request)
        if not request.is_pod_create:
            what = f"{request.operation or '?'} {request.kind.kind or '?'}"
            return allow(
                request.uid,
                warnings=[
                    f"fluence webhook only mutates Pod CREATE and batch/v1 Job CREATE, got {what};"
                    " nothing changed"
                ],
            )
        try:
            pod = decode_pod(request.object)
        except ValueError as e:
            return allow(request.uid, warnings=[f"fluence webhook left the pod unchanged: {e}"])
        mutation = mutate(
            pod, request.namespace, self.contract(), request.user_info, queue=self.queue
        )
        calls: list[Awaitable[int | None]] = []
        if mutation.gang is not None and not self.authenticated:
            mutation.warnings.append(UNAUTHENTICATED_GANG)
        if mutation.gang is not None and self.wiring is not None:
            calls.append(
                self.wiring.wire(
                    mutation.gang,
                    dry_run=bool(request.dry_run),
                    patch=mutation.patch,
                    warnings=mutation.warnings,
                )
            )
        deadline: asyncio.Future[int | None] | None = None
        if self.runtimes is not None:
            deadline = asyncio.ensure_future(
                self.runtimes.apply(pod, request.namespace, mutation.patch)
            )
            calls.append(deadline)
        # Side by side: each keeps within the API budget, so together they do too.
        await asyncio.gather(*calls)
        if mutation.timeouts is not None:
            seconds = deadline.result() if deadline is not None else None
            env.add_timeouts(mutation.timeouts, seconds, mutation.patch)
        return allow(request.uid, mutation.patch.ops, mutation.warnings)


def review_job(request: AdmissionRequest) -> bytes:
    """A Job's answer: a function of the Job alone (no API call), whoever sent it."""
    try:
        job = decode_job(request.object)
    except ValueError as e:
        return allow(request.uid, warnings=[f"fluence webhook left the Job unchanged: {e}"])
    mutation = plan_job(job)
    return allow(request.uid, mutation.patch.ops, mutation.warnings)
