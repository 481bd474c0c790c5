"""Objects from the cluster that fluence cannot use: each logged, counted, reported once, skipped.

Everything the extender reads was written by someone it does not trust to be
careful: a tenant's pod and its annotations, a namespace admin's PodGroup, a
node, the resources config. One such object must never stop the startup
rebuild or the watch, and so never take scheduling down for everyone else.
This module owns that rule; it never decides what an object means.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from fluence import telemetry
from fluence.events import NoEvents, ObjectEvents, ObjectRef

log = logging.getLogger(__name__)

T = TypeVar("T")

_untrusted = telemetry.meter("fluence.untrusted").create_counter(
    "fluence_untrusted_objects",
    description=(
        "Objects read from the cluster that fluence skipped or did not trust, by kind and reason"
    ),
)

POD = ObjectRef("Pod", "v1", "", "")
NODE = ObjectRef("Node", "v1", "", "")

UNDECODABLE = "undecodable"
"""Reason: the object's JSON does not have the shape the API promises (a field of a wrong type)."""
FAILED = "failed"
"""Reason: taking the object in raised an error; the message names it."""


def count(kind: str, reason: str) -> None:
    """Count one object of ``kind`` not used for ``reason`` (a short, fixed word)."""
    _untrusted.add(1, {"kind": kind, "reason": reason})


class UntrustedObjects:
    """Reports objects that could not be used, and runs one object's handling on its own."""

    REASON = "FluenceSkippedObject"

    def __init__(self, events: ObjectEvents | None = None) -> None:
        self.events: ObjectEvents = events if events is not None else NoEvents()

    def report(self, about: ObjectRef, reason: str, message: str) -> None:
        """Log, count and (once per object and reason, the recorder's rule) post a Warning."""
        count(about.kind, reason)
        log.warning(
            "object not used",
            extra={
                "kind": about.kind,
                "object": f"{about.namespace}/{about.name}" if about.namespace else about.name,
                "reason": reason,
                "error": message,
            },
        )
        self.events.warn_about(about, self.REASON, f"fluence did not use this object: {message}")

    def each(self, about: ObjectRef, obj: T, fn: Callable[[T], object]) -> bool:
        """``fn(obj)``; an error is reported for ``about`` and swallowed. True when it ran clean.

        Deliberately broad: whatever one object makes go wrong must stay with
        that object. The error's type and text go into the log and the Event.
        """
        try:
            fn(obj)
        except Exception as exc:  # noqa: BLE001 - one bad object must not stop the others
            self.report(about, FAILED, f"{type(exc).__name__}: {exc}")
            log.debug("object handling failed", exc_info=True)
            return False
        return True


def pod_ref(namespace: str, name: str, uid: str) -> ObjectRef:
    return ObjectRef(POD.kind, POD.api_version, namespace, name, uid)


def node_ref(name: str, uid: str = "") -> ObjectRef:
    return ObjectRef(NODE.kind, NODE.api_version, "", name, uid)
