"""Warnings for pod owners: posted off the caller's thread, bounded, once per pod and reason."""

from __future__ import annotations

import threading
import time
from typing import Any

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.events import EventRecorder
from fluence.ledger import Ledger
from fluence.scheduling.record import RecordSeal
from tests.unit.fluence.test_ledger import Clock, bound
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")


class Collected:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.arrived = threading.Event()

    def __call__(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append((namespace, body))
        self.arrived.set()


class Recorded:
    """A PodEvents that keeps what it was told, synchronously."""

    def __init__(self) -> None:
        self.warnings: list[tuple[str, str, str, str, str]] = []

    def warn(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self.warnings.append((namespace, name, uid, reason, message))


def test_an_event_is_a_warning_on_the_pod_posted_in_its_namespace() -> None:
    posted = Collected()
    recorder = EventRecorder(posted).start()
    recorder.warn("team-a", "w0", "uid-1", "Because", "x" * 5000)
    recorder.stop()
    [(namespace, body)] = posted.events
    assert namespace == "team-a"
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "w0",
        "uid": "uid-1",
    }
    assert body["type"] == "Warning" and body["reason"] == "Because"
    assert len(body["message"]) == EventRecorder.MAX_MESSAGE
    assert body["source"] == {"component": names.SCHEDULER_NAME}
    assert body["metadata"] == {"generateName": "w0.", "namespace": "team-a"}


def test_the_same_pod_and_reason_is_reported_once_per_window() -> None:
    posted = Collected()
    clock = Clock()
    recorder = EventRecorder(posted, repeat_seconds=60, clock=clock).start()
    for _ in range(5):
        recorder.warn("ns", "p", "u", "R", "m")
    recorder.warn("ns", "p", "u", "Other", "m")
    clock.now += 61
    recorder.warn("ns", "p", "u", "R", "m")
    recorder.stop()
    assert [b["reason"] for _, b in posted.events] == ["R", "Other", "R"]


def test_a_slow_or_failing_api_server_never_blocks_the_caller() -> None:
    release = threading.Event()

    def stuck(namespace: str, body: dict[str, Any]) -> None:
        release.wait(10)
        raise ConnectionError("api server down")

    recorder = EventRecorder(stuck, capacity=2).start()
    started = time.monotonic()
    for i in range(50):  # far more than the queue holds: the rest are dropped
        recorder.warn("ns", f"p{i}", "", "R", "m")
    assert time.monotonic() - started < 0.5
    release.set()
    recorder.stop()


def test_an_ignored_record_is_reported_on_the_pod() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("a", cpu="4")])
    events = Recorded()
    ledger = Ledger(graph, seal=RecordSeal(b"k" * 32), events=events)
    forged = bound(make_pod("f", cpu="1"), "a", {names.ANNOTATION_ALLOCATION: '{"node": "a"}'})
    ledger.observe(forged)
    [(namespace, name, uid, reason, message)] = events.warnings
    assert (namespace, name, uid, reason) == (
        "default",
        "f",
        forged.metadata.uid,
        "UntrustedAllocationRecord",
    )
    assert "no valid seal" in message


def test_a_gang_timeout_is_reported_on_each_released_member() -> None:
    clock = Clock()
    events = Recorded()
    graph = ClusterGraph(EXAMPLES, [make_node("a", cpu="4")])
    ledger = Ledger(graph, unbound_timeout=600, gang_timeout=10, clock=clock, events=events)
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(2)]
    ledger.place("default/g", gang)
    clock.now += 11
    assert sorted(ledger.expire()) == ["default/w0", "default/w1"]
    assert sorted((w[1], w[3]) for w in events.warnings) == [
        ("w0", "GangTimeout"),
        ("w1", "GangTimeout"),
    ]
    assert "not fully bound within 10s" in events.warnings[0][4]
