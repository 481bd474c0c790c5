"""Recovery: holdings that follow the pods the API server shows, after a restart and after.

A bound pod whose record this scheduler sealed for it is replayed (its node,
amounts, backend and the gang members still pending); any other bound pod is
held by its own requests, and keeps the backend its annotation names; a pod
that does not fit waits, unaccounted, until capacity frees. This unit owns
those rules and the pods waiting to be accounted; it never matches or queues,
and releases only through the ledger's callback. Callers hold the ledger's and
the graph's locks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fluence import names
from fluence.cluster_graph import ClusterGraph
from fluence.events import PodEvents
from fluence.placement import BackendChoice
from fluence.pods import Pod, pod_requests, split_requests
from fluence.runtimes import pod_runtime, time_left
from fluence.scheduling.holdings import (
    COMMITTED,
    FOREIGN,
    TENTATIVE,
    GroupDevices,
    Holding,
    Holdings,
)
from fluence.scheduling.record import (
    AllocationRecord,
    PendingMember,
    RecordSeal,
    trusted_record,
)
from fluxion_nb.errors import NotFoundError, StateError

log = logging.getLogger(__name__)

CLAIMED = "backend:"
"""Group keys ``<namespace>/backend:<name>`` hold a backend that pods without a trusted
record name (``:`` is in no object name, so no group's key is the same)."""


class Recovery:
    """Replays sealed records, holds other pods by their requests, retries what did not fit."""

    def __init__(
        self,
        graph: ClusterGraph,
        store: Holdings,
        *,
        seal: RecordSeal,
        events: PodEvents,
        clock: Callable[[], float],
        default_runtime: int,
        release: Callable[[str, str], object],
    ) -> None:
        self.graph = graph
        self.store = store
        self.seal = seal
        self.events = events
        self.clock = clock
        self.default_runtime = default_runtime
        self._release = release
        """The ledger's release (a pod ended, or is bound elsewhere than it was held)."""
        self._holdings = store.by_pod
        self._unaccounted: dict[str, Pod] = {}
        """Bound pods that did not fit where they run; held again when capacity frees."""
        self._claimants: dict[str, dict[str, Pod]] = {}
        """Backend name -> pods without a trusted record that name it while another holds it:
        they take it over when it is let go, so it is never handed to a third pod."""
        store.freed.append(self._hand_over)

    def follow(self, pod: Pod) -> None:
        """Bring the holdings in line with one pod as the API server sees it."""
        key = pod.key
        if pod.terminal:
            self._release(key, f"pod {pod.status.phase}")
            return
        if not pod.bound:
            self.follow_released(pod)
            return
        h = self._holdings.get(key)
        rec = trusted_record(pod, self.seal, self.events)
        if h is not None:
            if h.node == pod.spec.node_name or not h.amounts:
                h.seen_bound = True
                if h.state == TENTATIVE and rec is not None:
                    h.state = COMMITTED
                if not h.node:
                    h.node = pod.spec.node_name
                return
            # Bound somewhere else than we held: re-hold where it really runs.
            self._release(key, f"bound to {pod.spec.node_name}, not {h.node}")
        self._account(pod, rec)

    def _account(self, pod: Pod, rec: AllocationRecord | None) -> None:
        """Hold a bound pod that holds nothing: by its record, else by its requests.

        Only ever holds (a pod that does not fit waits in ``_unaccounted``), so it
        frees no capacity and can start no retry of its own.
        """
        if rec is not None and rec.node in ("", pod.spec.node_name):
            self._replay(pod, rec)
        else:
            self._hold_foreign(pod)

    def follow_released(self, pod: Pod) -> str:
        """A pod the queue released but kube-scheduler has not bound yet: hold it where its
        record says (after a restart, and on a standby that follows the leader's queue).

        Returns the node its trusted record names ("" when it has none). A pod that does
        not fit there yet (this view has not seen the room freed) waits to be accounted.
        """
        if pod.bound or pod.gated or pod.metadata.deletion_timestamp:
            return ""
        if names.ANNOTATION_ALLOCATION_SEAL not in pod.metadata.annotations:
            return ""
        rec = trusted_record(pod, self.seal, self.events)
        if rec is None or not rec.node:
            return ""
        if pod.key not in self._holdings:
            self._replay(pod, rec, rec.node, TENTATIVE)
        return rec.node

    def _replay(
        self, pod: Pod, rec: AllocationRecord, node: str = "", state: str = COMMITTED
    ) -> None:
        node = node or pod.spec.node_name
        runtime = pod_runtime(pod, self.default_runtime)
        left = time_left(pod, runtime, time.time())
        jid = 0
        shared = self.store.devices.get(rec.group) if rec.devices else None
        made_group = False
        try:
            if rec.amounts:
                jid = self.store.hold_compute(node, rec.amounts, left)
            if rec.devices and shared is None:
                wanted = [(d.type, d.path, d.name) for d in rec.devices]
                shared = self.store.hold_devices(rec.group, wanted, record_backends(rec), left)
                made_group = True
        except (StateError, NotFoundError) as exc:
            if jid and self.graph.holds(jid):
                self.graph.release(jid)
            for d in shared.devices if made_group and shared is not None else ():
                self.graph.release(d.jobid)
            if made_group:
                del self.store.devices[rec.group]
            log.error(
                "cannot replay a bound pod's allocation; it is not accounted",
                extra={"pod": pod.key, "node": node, "error": str(exc)},
            )
            self._unaccounted[pod.key] = pod
            return
        h = Holding(
            pod.key,
            pod.metadata.uid,
            rec.group,
            node,
            dict(rec.amounts),
            jid,
            state,
            self.clock(),
            BackendChoice(rec.backend, "", rec.attributes) if rec.backend else None,
        )
        h.runtime = runtime
        h.priority = rec.priority if rec.priority is not None else pod.spec.priority or 0
        h.singly = rec.singly
        if state == TENTATIVE:
            h.placed = h.since
        if shared is not None:
            self.store.join(h, shared)
        self._holdings[pod.key] = h
        self._unaccounted.pop(pod.key, None)
        for m in rec.pending:
            self._hold_pending(rec.group, m, shared)
            held = self._holdings.get(m.pod)
            if held is not None and held.state == TENTATIVE:
                held.priority, held.singly = h.priority, h.singly

    def _hold_pending(self, group: str, m: PendingMember, shared: GroupDevices | None) -> None:
        """Hold again where an unbound member of a gang was held before a restart."""
        if m.pod in self._holdings or not m.node:
            return
        jid = 0
        if m.amounts:
            try:
                jid = self.store.hold_compute(m.node, m.amounts, self.default_runtime)
            except (StateError, NotFoundError) as exc:
                log.warning(
                    "cannot hold a pending gang member again; it is matched anew when retried",
                    extra={"pod": m.pod, "group": group, "node": m.node, "error": str(exc)},
                )
                return
        now = self.clock()
        h = Holding(m.pod, m.uid, group, m.node, dict(m.amounts), jid, TENTATIVE, now)
        h.placed = now
        h.runtime = self.default_runtime
        if shared is not None:
            self.store.join(h, shared)
        self._holdings[m.pod] = h

    def _hold_foreign(self, pod: Pod) -> None:
        compute, _ = split_requests(pod_requests(pod))
        node = pod.spec.node_name
        jid = 0
        if compute:
            try:
                jid = self.store.hold_compute(node, compute)
            except (StateError, NotFoundError) as exc:
                log.warning(
                    "cannot account a pod bound by another scheduler",
                    extra={"pod": pod.key, "node": node, "error": str(exc)},
                )
                self._unaccounted[pod.key] = pod
                return
        h = Holding(pod.key, pod.metadata.uid, "", node, dict(compute), jid, FOREIGN, self.clock())
        self._keep_named_backend(pod, h)
        self._holdings[pod.key] = h
        self._unaccounted.pop(pod.key, None)

    def _keep_named_backend(self, pod: Pod, h: Holding) -> None:
        """A pod without a trusted record keeps the backend its annotation names.

        Its containers read ``QRMI_BACKEND`` from that annotation when they start,
        so a pod whose record was edited (or resized in place) may still be using
        the backend: handing it to another tenant would double-book it. Pods of
        one namespace naming the same backend share the hold (a gang's members);
        while someone else holds it, the pod waits to take it over.
        """
        name = pod.metadata.annotations.get(names.ANNOTATION_BACKEND, "")
        if not name or not split_requests(pod_requests(pod))[1]:
            return
        backend = next((b for b in self.graph.backends().values() if b.name == name), None)
        if backend is None:
            return
        key = f"{pod.metadata.namespace}/{CLAIMED}{name}"
        shared = self.store.devices.get(key)
        if shared is None:
            choice = BackendChoice(name, backend.path, dict(backend.attributes))
            wanted = [(sorted(backend.types)[0], backend.path, name)]
            try:
                shared = self.store.hold_devices(key, wanted, [choice])
            except (StateError, NotFoundError):
                # Held by its rightful holder (or another namespace's claim): taken over
                # when that lets go.
                self._claimants.setdefault(name, {})[pod.key] = pod
                return
            log.warning(
                "a backend named by a pod without a trusted record is kept for it",
                extra={"pod": pod.key, "backend": name},
            )
        h.group = key
        self.store.join(h, shared)

    def _hand_over(self, backend: str) -> None:
        """``backend`` was let go: the pods still running that name it keep it now."""
        waiting = self._claimants.pop(backend, {})
        for key, pod in waiting.items():
            h = self._holdings.get(key)
            if h is None or h.state != FOREIGN or h.devices:
                continue
            self._keep_named_backend(pod, h)
            self._holdings[key] = h  # indexed again under the group it joined

    def retry(self) -> None:
        """Capacity appeared (a release, a node): hold the pods that did not fit before.

        Holding frees nothing, so a retry never leads to another one.
        """
        for pod in list(self._unaccounted.values()):
            del self._unaccounted[pod.key]
            if pod.key in self._holdings:
                continue
            if pod.bound:
                self._account(pod, trusted_record(pod, self.seal, self.events))
            else:
                self.follow_released(pod)

    def waiting_to_be_accounted(self) -> bool:
        """Pods that did not fit are waiting for capacity."""
        return bool(self._unaccounted)

    def released(self, pod: str) -> None:
        """``pod``'s holding is gone: it is not waiting to be accounted either."""
        self._unaccounted.pop(pod, None)

    def unaccounted(self) -> list[str]:
        return sorted(self._unaccounted)

    def sealed(self, pod: Pod) -> bool:
        """Does the pod carry a record sealed for it? (Replayed first after a restart.)"""
        annotations = pod.metadata.annotations
        raw = annotations.get(names.ANNOTATION_ALLOCATION)
        seal = annotations.get(names.ANNOTATION_ALLOCATION_SEAL, "")
        return bool(raw) and self.seal.verify(pod.key, pod.metadata.uid, raw or "", seal)


def record_backends(rec: AllocationRecord) -> list[BackendChoice]:
    """The backends a record names, in order, each with the path of its device."""
    path = {d.name: d.path for d in rec.devices}
    named = [(rec.backend, rec.attributes)] if rec.backend else []
    named += [(b.name, b.attributes) for b in rec.more_backends]
    return [BackendChoice(n, path.get(n, ""), dict(a)) for n, a in named]
