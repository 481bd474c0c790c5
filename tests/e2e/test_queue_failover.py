"""A long queue across the leader's death: 50 groups start in the order they would have.

The same 50 gated gangs are run twice through fluence's queue on the same KWOK nodes:
once with the extender left alone, once with it SIGKILLed and restarted while most of
them still wait. The test ends one running group at a time (the earliest started) and
records which groups each end lets start. Both runs must start the groups in the same
order, and the restarted leader must plan the same reservations as the one it replaced,
from nothing but what the API server holds (gated pods, sealed records, pod start times).

Every pod takes a whole node and states its runtime in the ``runtime`` annotation, which
plans reservations but lets no group start in front of another's reservation (that takes
an enforced runtime); a group is one pod or the whole cluster, so a reservation never
leaves a free node to another group. The order is then the queue's alone, not a matter
of how quickly kube-scheduler binds or KWOK ends pods: a group that needs two of four
nodes is reserved on whichever two free first, and whether two running groups started in
the same second (and so end in it) is timing, which would decide what may backfill.

The uninterrupted run also gives the queue's latency from a pod's end to the release that
end made possible (``fluence_queue_release_after_end_seconds``).
"""

from __future__ import annotations

import datetime
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from kubernetes.client import ApiClient

from fluence import names
from testbed import ControlPlane
from tests.e2e.test_extender_e2e import Extender, Stack, Suite, wait_for
from tests.e2e.test_queue_e2e import LEASE_SECONDS
from tests.e2e.test_queue_e2e import lease_namespace as lease_namespace  # noqa: F401 - fixture
from tests.e2e.test_queue_e2e import stack as stack  # noqa: F401 - fixture

GROUPS = 50
NODES = 4
KILL_AFTER = 12
"""Groups started before the leader is killed in the second run."""
RUNTIME = 600
"""Every pod's runtime estimate (annotation), far beyond the test's length."""
SETTLE = 0.6
"""Seconds without a release after an end's holdings are gone before the step is over."""


def shapes() -> list[int]:
    """Each group's pod count (1 or NODES, seeded); each pod asks for a whole 4-cpu node."""
    rng = random.Random(39)
    return [rng.choice((1, 1, 1, NODES)) for _ in range(GROUPS)]


@pytest.fixture
def suite(stack: Stack, kube: ApiClient, namespace: str) -> Iterator[Suite]:  # noqa: F811
    with Suite(stack, kube, namespace) as s:
        yield s


@dataclass
class Run:
    """One pass of the groups: pods named ``<prefix>-gNN-i``."""

    suite: Suite
    prefix: str
    sizes: list[int]
    started: list[int] = field(default_factory=list)
    """Group indices in the order they were released (each step's in index order)."""
    waits: list[float] = field(default_factory=list)
    """Seconds from asking KWOK to end a group to seeing the next group released."""

    def group(self, i: int) -> str:
        return f"{self.prefix}-g{i:02d}"

    def pods(self, i: int) -> list[str]:
        return [f"{self.group(i)}-{k}" for k in range(self.sizes[i])]

    def create(self) -> None:
        blocker = [f"{self.prefix}-blk-{k}" for k in range(NODES)]
        for p in blocker:
            self._pod(p, f"{self.prefix}-blk", NODES)
        self.suite.wait_bound(*blocker, timeout=60)
        for p in blocker:
            self.suite.stack.cp.kwok.wait_for_phase(self.suite.ns, p, "Running")
        for i, size in enumerate(self.sizes):
            for p in self.pods(i):
                self._pod(p, self.group(i), size)
        ext = self.suite.stack.extender
        wait_for(
            lambda: len(self.waiting()) == GROUPS,
            60,
            f"the {GROUPS} groups of run {self.prefix} to wait in the queue",
            lambda: f"{self.waiting()} | {ext.log_tail()}",
        )

    def _pod(self, name: str, group: str, size: int) -> None:
        self.suite.pod(
            name,
            cpu="4",
            memory="64Mi",
            labels={names.LABEL_GROUP: group},
            annotations={
                names.ANNOTATION_GROUP_SIZE: str(size),
                names.ANNOTATION_RUNTIME: str(RUNTIME),
            },
            spec={"schedulingGates": [{"name": names.QUEUE_GATE}]},
        )

    def waiting(self) -> list[str]:
        """This run's groups in the extender's queue, in queue order."""
        prefix = f"{self.suite.ns}/{self.prefix}-"
        queue = [
            w
            for w in self.suite.stack.extender.state()["queue"]
            if w["group"].startswith(prefix) and w["position"] is not None
        ]
        return [w["group"] for w in sorted(queue, key=lambda w: w["position"])]

    def reservations(self) -> dict[str, float]:
        """Each reserved group of this run -> the Unix time its reservation starts."""
        prefix = f"{self.suite.ns}/{self.prefix}-"
        return {
            w["group"]: _unix(w["start"])
            for w in self.suite.stack.extender.state()["queue"]
            if w["group"].startswith(prefix) and w["reserved"]
        }

    def pods_now(self) -> dict[str, dict[str, Any]]:
        """This run's pods by name: gated, node and phase (one list call)."""
        core = self.suite.core
        items = core.api_client.sanitize_for_serialization(core.list_namespaced_pod(self.suite.ns))
        return {
            p["metadata"]["name"]: {
                "gated": bool(p["spec"].get("schedulingGates")),
                "node": p["spec"].get("nodeName") or "",
                "phase": (p.get("status") or {}).get("phase"),
            }
            for p in items["items"]
            if p["metadata"]["name"].startswith(self.prefix + "-")
        }

    def released(self, pods: dict[str, dict[str, Any]]) -> set[int]:
        return {
            i for i in range(GROUPS) if all(not pods[p]["gated"] for p in self.pods(i) if p in pods)
        }

    def end(self, names_: list[str]) -> float:
        """Have KWOK end ``names_``; when it was asked."""
        kwok = self.suite.stack.cp.kwok
        for p in names_:
            kwok.exit(self.suite.ns, p, 0)
        asked = time.monotonic()
        for p in names_:
            kwok.wait_for_phase(self.suite.ns, p, "Succeeded")
        return asked

    def step(self, ended: list[str]) -> list[int]:
        """End ``ended`` (one group's pods); the groups that end lets start, in index order."""
        before = self.released(self.pods_now())
        asked = self.end(ended)
        keys = {f"{self.suite.ns}/{p}" for p in ended}
        wait_for(
            lambda: not keys & set(self.suite.state_pods()),
            30,
            f"the extender to let go of {ended}",
            self.suite.stack.extender.log_tail,
        )
        new, seen = self.settle(before, f"step after {ended}")
        if seen is not None:
            self.waits.append(seen - asked)
        return new

    def settle(
        self, before: set[int], what: str, at_least_one: bool = False
    ) -> tuple[list[int], float | None]:
        """The groups released since ``before`` once their pods run and no release came for
        SETTLE seconds (with ``at_least_one``, not before one came), and when the first came."""
        seen: float | None = None
        quiet_since = time.monotonic()
        last: set[int] = set(before)
        deadline = time.monotonic() + 60
        while True:
            pods = self.pods_now()
            now = self.released(pods)
            if now != last:
                last, quiet_since = now, time.monotonic()
                seen = seen or quiet_since
            new = now - before
            settled = (new or not at_least_one) and all(
                pods[p]["node"] and pods[p]["phase"] == "Running" for i in new for p in self.pods(i)
            )
            if settled and time.monotonic() - quiet_since >= SETTLE:
                return sorted(new), seen
            assert time.monotonic() < deadline, (
                f"{what} did not settle: {sorted(new)} | " + self.suite.stack.extender.log_tail()
            )
            time.sleep(0.05)

    def drive(self, on_started: Any = None) -> None:
        """End the earliest started group, one at a time, until every group has started."""
        running = [[f"{self.prefix}-blk-{k}" for k in range(NODES)]]
        while len(self.started) < GROUPS:
            if running:
                new = self.step(running.pop(0))
            else:
                # The last end's release came later than SETTLE (the goal, checked from the
                # extender's own count below, is 95 % within 1 s): nothing runs, so one comes.
                idle = f"idle after {self.started}"
                new, _ = self.settle(set(self.started), idle, at_least_one=True)
            self.started += new
            running += [self.pods(i) for i in new]
            if on_started is not None:
                on_started(self)
        for pods in running:
            self.end(pods)


def _unix(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def after_end(extender: Extender) -> tuple[float, float]:
    """(releases within 1 s of the end that made room, all such releases) so far."""
    text = httpx.get(extender.url + "/metrics/", timeout=10).text
    within = count = 0.0
    for line in text.splitlines():
        if line.startswith("fluence_queue_release_after_end_seconds_bucket") and 'le="1.0"' in line:
            within = float(line.rsplit(" ", 1)[1])
        elif line.startswith("fluence_queue_release_after_end_seconds_count"):
            count = float(line.rsplit(" ", 1)[1])
    return within, count


def test_fifty_waiting_groups_start_in_the_same_order_after_the_leader_is_killed(
    suite: Suite, control_plane: ControlPlane
) -> None:
    suite.add_nodes(NODES, cpu="4")
    sizes = shapes()
    ext = suite.stack.extender

    plain = Run(suite, "a", sizes)
    plain.create()
    assert plain.waiting() == [f"{suite.ns}/{plain.group(i)}" for i in range(GROUPS)]
    within0, count0 = after_end(ext)
    plain.drive()
    within, count = after_end(ext)

    killed: dict[str, Any] = {}

    def kill_once(run: Run) -> None:
        if killed or len(run.started) < KILL_AFTER:
            return
        time.sleep(3)  # the running groups have run a while: their ends are not "now + runtime"
        killed["queue"] = run.waiting()
        killed["reserved"] = run.reservations()
        ext.kill(signal.SIGKILL)
        ext.start()
        wait_for(
            lambda: run.waiting() == killed["queue"],
            30 + LEASE_SECONDS,
            "the restarted extender to form the same queue",
            lambda: f"{run.waiting()} | {ext.log_tail()}",
        )
        killed["replanned"] = run.reservations()

    again = Run(suite, "b", sizes)
    again.create()
    again.drive(kill_once)

    assert killed, "the leader was never killed"
    assert len(killed["queue"]) >= GROUPS // 2, killed["queue"]
    assert plain.started == list(range(GROUPS)), plain.started
    assert again.started == plain.started, (plain.started, again.started)
    before, after = killed["reserved"], killed["replanned"]
    assert before and set(after) == set(before), (before, after)
    moved = {g: round(after[g] - before[g], 1) for g in before}
    assert all(abs(d) <= 2 for d in moved.values()), moved

    releases = count - count0
    assert releases >= GROUPS / 2, (releases, plain.waits)
    share = (within - within0) / releases
    assert share >= 0.95, (share, releases, plain.waits)
