"""Evicting whole groups for a higher-priority one (gang-aware preemption).

kube-scheduler's preemption picks one node and deletes the victims on it, so
it cannot take a gang whose pods span nodes as a whole: it would leave the
rest of the gang running, holding capacity for nothing. fluence therefore
answers ``/preempt`` with no victims and evicts itself, through the Eviction
API (so PodDisruptionBudgets apply), every bound pod of the groups
:meth:`~fluence.ledger.Ledger.victims_for` chose after a what-if match showed
the preemptor fits once they are gone. A PodGroup whose ``disruptionMode`` is
``single`` (v1beta1) or ``Pod`` (v1alpha2) may lose pods one at a time; every
other gang goes whole or not at all. Evictions run on a thread of their own:
filter never waits for the API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kubernetes.client import (
    CoreV1Api,
    V1DeleteOptions,
    V1Eviction,
    V1ObjectMeta,
    V1Preconditions,
)
from kubernetes.client.exceptions import ApiException

from fluence.events import PodEvents
from fluence.scheduling.holdings import Holding

log = logging.getLogger(__name__)


class Evictor(Protocol):
    def evict(self, victims: Mapping[str, Sequence[Holding]], by: str) -> None:
        """Evict every pod in ``victims`` (unit -> its bound holdings) for group ``by``; a unit
        is a whole group or ``"pod <key>"`` (:attr:`fluence.ledger.Holding.unit`)."""
        ...


class ApiEvictor:
    """Creates ``pods/eviction`` for each victim with its UID as a precondition."""

    def __init__(self, api: Any, events: PodEvents) -> None:
        self.core = CoreV1Api(api)
        self.events = events

    def evict(self, victims: Mapping[str, Sequence[Holding]], by: str) -> None:
        work = {g: list(hs) for g, hs in victims.items()}
        threading.Thread(
            target=self._run, args=(work, by), name="fluence-evict", daemon=True
        ).start()

    def _run(self, victims: Mapping[str, Sequence[Holding]], by: str) -> None:
        for group, holdings in victims.items():
            for h in holdings:
                if not self._evict(h.pod, h.uid, group):
                    continue
                namespace, _, name = h.pod.partition("/")
                alone = group.startswith("pod ")
                self.events.warn(
                    namespace,
                    name,
                    h.uid,
                    "Preempted",
                    (
                        f"evicted alone (group {h.group} lets its pods be disrupted one at a time)"
                        if alone
                        else f"evicted with the rest of group {group}"
                    )
                    + f" (priority {h.priority}) to make room for the higher-priority group {by}",
                )
            log.info("group preempted", extra={"group": group, "by": by})

    def requeue(self, pods: Sequence[tuple[str, str]], group: str, why: str) -> None:
        """Evict every pod (key, uid) of a released group that could not all start, so that
        their controller makes them again and they queue afresh; ``why`` goes in an Event."""
        work = list(pods)

        def run() -> None:
            for key, uid in work:
                if self._evict(key, uid, group):
                    namespace, _, name = key.partition("/")
                    self.events.warn(namespace, name, uid, "GangRequeued", why)
            log.warning("released group evicted to queue again", extra={"group": group, "why": why})

        threading.Thread(target=run, name="fluence-requeue", daemon=True).start()

    def _evict(self, key: str, uid: str, group: str) -> bool:
        """One eviction with the pod's UID as precondition; False when it did not happen."""
        namespace, _, name = key.partition("/")
        body = V1Eviction(
            metadata=V1ObjectMeta(name=name, namespace=namespace),
            delete_options=V1DeleteOptions(preconditions=V1Preconditions(uid=uid)) if uid else None,
        )
        try:
            self.core.create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as exc:
            if exc.status not in (404, 409):  # else gone already, or another pod by that name now
                log.warning(
                    "eviction refused",
                    extra={
                        "pod": key,
                        "group": group,
                        "status": exc.status,
                        "reason": str(exc.reason),
                    },
                )
            return False
        except Exception as exc:  # noqa: BLE001 - a thread must log, not die silently
            log.warning("eviction failed", extra={"pod": key, "error": repr(exc)})
            return False
        return True
