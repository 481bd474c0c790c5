"""Asking kube-scheduler to try again the pods of waiting groups that fit now.

kube-scheduler parks a pod its extender refused among the unschedulable ones and
tries it again on the next cluster event (any event, for an extender) or after
five minutes. The event that frees room is usually a deletion, and
kube-scheduler may act on it before this extender's own watch has delivered it:
the retry is refused while the room is still held here, and the group then
waits minutes for an event that has passed. So, about once a second, the pods
of every reserved group that fits now and has not asked for a while get a
condition of ours written on their status: a pod update, which kube-scheduler
answers by trying the pod again, and which ``kubectl describe pod`` shows.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from fluence import names, telemetry
from fluence.ledger import Ledger

log = logging.getLogger(__name__)

_requeued = telemetry.meter("fluence.requeue").create_counter(
    "fluence_pods_requeued",
    description="Pods of waiting groups that fit now which kube-scheduler was asked to retry",
)


class ConditionWriter(Protocol):
    def __call__(self, pod: str, condition: dict[str, Any]) -> None:
        """Set ``condition`` (by its type) in the status of ``pod`` (namespace/name)."""
        ...


def api_condition_writer(api: Any) -> ConditionWriter:
    """Writes the condition with a strategic merge patch of ``pods/status``.

    Merged by type, so kube-scheduler's and the kubelet's conditions stay as
    they are.
    """
    core = CoreV1Api(api)

    def write(pod: str, condition: dict[str, Any]) -> None:
        namespace, _, name = pod.partition("/")
        core.patch_namespaced_pod_status(
            name,
            namespace,
            {"status": {"conditions": [condition]}},
            _content_type="application/strategic-merge-patch+json",
        )

    return write


class Requeuer:
    """Finds the groups that fit now but wait unasked, and marks their pods."""

    def __init__(
        self,
        ledger: Ledger,
        write: ConditionWriter,
        *,
        quiet: float = 1.0,
        repeat: float = 30.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.ledger = ledger
        self.write = write
        self.quiet = quiet
        """Seconds since a group last asked before its pods are marked (kube-scheduler's
        own retries of a pod in backoff come sooner)."""
        self.repeat = repeat
        """Seconds after which a group that still has not asked is marked again."""
        self.clock = clock

    def check(self) -> int:
        """Mark the pods of every group due; returns how many pods were marked."""
        marked = 0
        for group, pods in self.ledger.fitting_unasked(self.quiet, self.repeat):
            now = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
            condition = {
                "type": names.CONDITION_ROOM_FREE,
                "status": "True",
                "reason": "GroupFitsNow",
                "message": f"fluence holds room for group {group} now; "
                "kube-scheduler is asked to place this pod again",
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
            for pod in pods:
                try:
                    self.write(pod, condition)
                except ApiException as exc:
                    if exc.status != 404:  # a pod gone is no longer waiting
                        log.warning(
                            "could not ask kube-scheduler to retry a pod",
                            extra={"pod": pod, "status": exc.status, "reason": str(exc.reason)},
                        )
                    continue
                except Exception as exc:  # noqa: BLE001 - one pod must not stop the others
                    log.warning(
                        "could not ask kube-scheduler to retry a pod",
                        extra={"pod": pod, "error": repr(exc)},
                    )
                    continue
                marked += 1
            log.info(
                "asked kube-scheduler to retry a group that fits now",
                extra={"group": group, "pods": len(pods)},
            )
        if marked:
            _requeued.add(marked)
        return marked
