"""A Job's ``activeDeadlineSeconds`` on each of its pods, where the planner reads it.

The extender plans a waiting group's start from its members' expected runtime:
a pod's own ``activeDeadlineSeconds``, else the runtime annotation, else a
default. A Job's deadline is enforced by the Job controller and never copied
into the pods it creates, so the planner would not see it. Admission is where
a pod and its owner meet: when a fluence pod owned by a batch Job states no
runtime of its own, the webhook sets its ``activeDeadlineSeconds`` to the Job's.
That never ends a pod sooner than the Job controller would (a pod starts after
its Job, and the Job's deadline counts from the Job's start), and unlike an
annotation it is a limit the kubelet enforces.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from fluence import names
from fluence.json_patch import PatchBuilder, pointer
from webhook.review import Pod

log = logging.getLogger(__name__)


class JobDeadlines(Protocol):
    """Reads a Job's ``spec.activeDeadlineSeconds`` (blocking; called from a thread)."""

    def job_deadline(self, namespace: str, name: str) -> int | None:
        """The Job's deadline in seconds; None when it has none or cannot be read."""
        ...


def owning_job(pod: Pod) -> str | None:
    """Name of the batch Job that controls ``pod``, if any."""
    for ref in pod.metadata.owner_references or ():
        if ref.kind == "Job" and ref.api_version.startswith("batch/") and ref.name:
            return ref.name
    return None


def needs_job_deadline(pod: Pod) -> str | None:
    """The owning Job to ask, when ``pod`` is fluence's and states no runtime of its own."""
    if pod.spec.scheduler_name != names.SCHEDULER_NAME:
        return None
    if pod.spec.active_deadline_seconds or names.ANNOTATION_RUNTIME in pod.annotations:
        return None
    return owning_job(pod)


class JobRuntimes:
    """Gives Job pods their Job's deadline; remembers deadlines briefly.

    A Job's pods arrive in a burst, so a deadline read is kept ``ttl`` seconds:
    one read per Job and burst, not one per pod.
    """

    MAX_REMEMBERED = 4096

    def __init__(
        self,
        jobs: JobDeadlines | None,
        *,
        ttl: float = 10.0,
        budget_seconds: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = jobs
        self.ttl = ttl
        self.budget_seconds = budget_seconds
        self._clock = clock
        self._known: dict[tuple[str, str], tuple[float, int | None]] = {}

    async def deadline(self, namespace: str, job: str) -> int | None:
        """The Job's deadline, from memory when read less than ``ttl`` seconds ago."""
        if self.jobs is None:
            return None
        key = (namespace, job)
        now = self._clock()
        known = self._known.get(key)
        if known is not None and now - known[0] < self.ttl:
            return known[1]
        try:
            value = await asyncio.wait_for(
                asyncio.to_thread(self.jobs.job_deadline, namespace, job), self.budget_seconds
            )
        except TimeoutError:
            log.warning(
                "the owning Job could not be read in time; no runtime estimate from it",
                extra={"namespace": namespace, "job": job},
            )
            return None
        if len(self._known) >= self.MAX_REMEMBERED:
            self._known.clear()
        self._known[key] = (now, value)
        return value

    async def apply(self, pod: Pod, namespace: str, patch: PatchBuilder) -> int | None:
        """Set the pod's ``activeDeadlineSeconds`` to the owning Job's, when it has one;
        the deadline set, if any."""
        job = needs_job_deadline(pod)
        if job is None:
            return None
        seconds = await self.deadline(namespace or pod.metadata.namespace, job)
        if seconds is None or seconds <= 0:
            return None
        patch.add(pointer("spec", "activeDeadlineSeconds"), seconds)
        return seconds
