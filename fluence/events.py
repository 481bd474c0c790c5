"""Kubernetes Events about pods, posted off the caller's thread.

Some decisions are a pod owner's business more than an operator's: a record on
their pod that fluence ignored, a gang whose capacity was released. A warning
Event on the pod shows up in ``kubectl describe pod`` where they look. Posting
must never slow or break scheduling, so events go into a bounded queue that a
daemon thread drains; when the queue is full an event is dropped and counted,
and the same (pod, reason) is reported once per ``repeat_seconds``.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fluence import names, telemetry

log = logging.getLogger(__name__)

_meter = telemetry.meter("fluence.events")
_posted = _meter.create_counter(
    "fluence_events_posted", description="Kubernetes Events posted about pods"
)
_dropped = _meter.create_counter(
    "fluence_events_dropped",
    description="Events not posted: the queue was full or the API server refused them",
)


@dataclass(frozen=True)
class PodEvent:
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    kind: str = "Pod"
    """The involved object's kind and apiVersion: a Pod unless said otherwise."""
    api_version: str = "v1"


class PodEvents(Protocol):
    """What the scheduling code calls; never blocks, never raises."""

    def warn(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None: ...


class ObjectEvents(PodEvents, Protocol):
    """Also warns about objects other than pods (a PodGroup, a Node)."""

    def warn_about(self, about: ObjectRef, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about; cluster-scoped ones (Nodes) are reported in ``default``."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str = ""


class NoEvents:
    """Posts nothing (benchmarks, tests without an API server)."""

    def warn(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        return None

    def warn_about(self, about: ObjectRef, reason: str, message: str) -> None:
        return None


class EventRecorder:
    """Posts core/v1 Events with ``create`` from a daemon thread."""

    MAX_MESSAGE = 1024
    MAX_REMEMBERED = 4096

    def __init__(
        self,
        post: Callable[[str, dict[str, Any]], None],
        *,
        component: str = names.SCHEDULER_NAME,
        capacity: int = 256,
        repeat_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post = post
        self.component = component
        self.repeat_seconds = repeat_seconds
        self._clock = clock
        self._queue: queue.Queue[PodEvent | None] = queue.Queue(capacity)
        self._last: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def warn(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._enqueue(PodEvent(namespace, name, uid, reason, message))

    def warn_about(self, about: ObjectRef, reason: str, message: str) -> None:
        ns = about.namespace or "default"
        event = PodEvent(ns, about.name, about.uid, reason, message, about.kind, about.api_version)
        self._enqueue(event)

    def _enqueue(self, event: PodEvent) -> None:
        who = event.uid or f"{event.kind}/{event.namespace}/{event.name}"
        key = (who, event.reason)
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.repeat_seconds:
                return
            self._last[key] = now
            self._last.move_to_end(key)
            while len(self._last) > self.MAX_REMEMBERED:
                self._last.popitem(last=False)
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            _dropped.add(1)

    def body(self, event: PodEvent) -> dict[str, Any]:
        """The core/v1 Event for ``event`` (a Warning on the pod or other object)."""
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {
            "apiVersion": event.api_version,
            "kind": event.kind,
            "namespace": event.namespace,
            "name": event.name,
        }
        if event.uid:
            involved["uid"] = event.uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{event.name}.", "namespace": event.namespace},
            "involvedObject": involved,
            "reason": event.reason,
            "message": event.message[: self.MAX_MESSAGE],
            "type": "Warning",
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    def start(self) -> EventRecorder:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fluence-events", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Post what is queued (within ``timeout``), then end the thread."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._post(event.namespace, self.body(event))
            except Exception as exc:  # an event is best effort; scheduling goes on
                _dropped.add(1)
                log.warning(
                    "could not post an Event",
                    extra={"pod": f"{event.namespace}/{event.name}", "error": str(exc)},
                )
            else:
                _posted.add(1)


def api_poster(api_client: Any, timeout: float = 5.0) -> Callable[[str, dict[str, Any]], None]:
    """``post`` for :class:`EventRecorder` over the official kubernetes client."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def post(namespace: str, body: dict[str, Any]) -> None:
        # The client serialises a dict body as it is; its typed signature wants a model.
        core.create_namespaced_event(namespace, body, _request_timeout=timeout)  # type: ignore[arg-type]

    return post
