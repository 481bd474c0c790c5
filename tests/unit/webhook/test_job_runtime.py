"""A Job's activeDeadlineSeconds reaches the planner through its pods' own."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import msgspec

from fluence import names
from fluence.json_patch import PatchBuilder
from fluence.pods import decode_pod
from fluence.runtimes import pod_runtime
from tests.support.admission import apply_patch, container, pod, response_ops, review
from tests.unit.webhook.test_app import CONTRACT, client_for, post
from webhook.admission import Admission
from webhook.job_runtime import JobRuntimes, needs_job_deadline
from webhook.review import Pod

JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}


class Jobs:
    """Job deadlines by name; counts the reads."""

    def __init__(self, deadlines: dict[str, int | None], delay: float = 0.0) -> None:
        self.deadlines = deadlines
        self.delay = delay
        self.reads: list[tuple[str, str]] = []

    def job_deadline(self, namespace: str, name: str) -> int | None:
        self.reads.append((namespace, name))
        time.sleep(self.delay)
        return self.deadlines.get(name)


def job_pod(**kw: Any) -> dict[str, Any]:
    return pod(container(), owners=[JOB], **kw)


def admitted(doc: dict[str, Any], jobs: Jobs) -> dict[str, Any]:
    """``doc`` as the API server stores it after the webhook's patch."""
    client = client_for(Admission(lambda: CONTRACT, None, JobRuntimes(jobs), queue=False))
    _, ops = response_ops(post(review(doc, namespace="team"), client).content)
    return dict(apply_patch(doc, ops))


def planned_runtime(doc: dict[str, Any]) -> int:
    """What the extender's planner takes as the pod's runtime (default: unknown)."""
    doc = {**doc, "metadata": {**doc["metadata"], "name": "p", "namespace": "team"}}
    return pod_runtime(decode_pod(json.dumps(doc)), 0)


def test_a_job_pod_without_a_runtime_of_its_own_gets_its_jobs_deadline() -> None:
    jobs = Jobs({"train": 900})
    stored = admitted(job_pod(), jobs)
    assert stored["spec"]["activeDeadlineSeconds"] == 900
    assert stored["metadata"] == job_pod()["metadata"]
    assert planned_runtime(stored) == 900
    assert jobs.reads == [("team", "train")]


def test_a_pod_that_states_its_own_estimate_keeps_it_and_no_job_is_read() -> None:
    jobs = Jobs({"train": 900})
    own = job_pod(annotations={names.ANNOTATION_RUNTIME: "2m"})
    assert admitted(own, jobs) == own
    with_deadline = job_pod()
    with_deadline["spec"]["activeDeadlineSeconds"] = 30
    assert admitted(with_deadline, jobs) == with_deadline
    assert planned_runtime(with_deadline) == 30
    assert jobs.reads == []


def test_only_fluence_pods_owned_by_a_batch_job_are_looked_at() -> None:
    jobs = Jobs({"train": 900})
    other = pod(container(), owners=[JOB], scheduler="default-scheduler")
    bare = pod(container())
    cron = pod(container(), owners=[{**JOB, "apiVersion": "example.com/v1"}])
    for doc in (other, bare, cron):
        assert admitted(doc, jobs) == doc
    assert jobs.reads == []


def test_a_job_without_a_deadline_adds_nothing_and_the_pod_is_reinvocation_safe() -> None:
    assert admitted(job_pod(), Jobs({"train": None})) == job_pod()
    jobs = Jobs({"train": 120})
    once = admitted(job_pod(), jobs)
    assert admitted(once, jobs) == once  # reinvoked: the pod now states its estimate


def test_one_read_per_job_for_a_burst_of_its_pods() -> None:
    jobs = Jobs({"train": 300})
    runtimes = JobRuntimes(jobs)

    async def burst() -> list[list[dict[str, Any]]]:
        out = []
        for _ in range(20):
            patch = PatchBuilder()
            await runtimes.apply(msgspec.convert(job_pod(), Pod), "team", patch)
            out.append(patch.ops)
        return out

    patches = asyncio.run(burst())
    assert len(jobs.reads) == 1
    assert all(ops == patches[0] for ops in patches) and patches[0]


def test_a_slow_api_server_admits_the_pod_without_the_estimate_in_time() -> None:
    jobs = Jobs({"train": 300}, delay=1.0)
    runtimes = JobRuntimes(jobs, budget_seconds=0.1)
    patch = PatchBuilder()

    async def admit() -> float:
        started = time.monotonic()
        await runtimes.apply(msgspec.convert(job_pod(), Pod), "team", patch)
        return time.monotonic() - started

    assert asyncio.run(admit()) < 0.9
    assert patch.ops == []


def test_which_pods_ask_their_job() -> None:
    assert needs_job_deadline(msgspec.convert(job_pod(), Pod)) == "train"
    assert needs_job_deadline(msgspec.convert(pod(container()), Pod)) is None
