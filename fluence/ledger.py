"""The ledger: the coordinator of the scheduling core, one placement, bind or pod event at a time.

A place call is the cycle: the group joins the queue (:mod:`fluence.scheduling.reservations`
keeps the groups ahead of it reserved), is kept off the room held for preemptors
(:mod:`fluence.scheduling.preemption`), has its zones and racks chosen
(:mod:`fluence.scheduling.topology`), and is matched all or nothing and split into a
tentative holding per pod (:mod:`fluence.scheduling.match`); a group that does not fit
waits with a reservation. Binds commit holdings; pod events and the startup rebuild
follow the cluster (:mod:`fluence.scheduling.recovery`).

Release rules. A holding is released at once when its pod becomes Succeeded or
Failed, is deleted, or (tentative) is seen bound elsewhere without our record or
its bind fails. A tentative holding that is never bound (gang rolled back, pod
stuck) is released once ``unbound_timeout`` seconds pass since it was made or
last handed out again by filter; filter hands it out on every retry, so a gang
waiting in the scheduler keeps its place while it keeps being retried. A group
whose members are not all bound ``gang_timeout`` seconds after its match lets go
of the unbound ones (:meth:`Ledger.expire`).

The ledger owns only the order of those steps and its lock; it never talks to the
API server (callers bring pods and write what it decides).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fluence import telemetry
from fluence.cluster_graph import ClusterGraph
from fluence.events import NoEvents, PodEvents
from fluence.pods import Pod, pod_requests, split_requests
from fluence.runtimes import group_enforced, group_runtime
from fluence.scheduling.backfill import Backfill, conservative
from fluence.scheduling.holdings import (
    COMMITTED,
    TENTATIVE,
    Holding,
    Holdings,
)
from fluence.scheduling.match import MatchAndSplit
from fluence.scheduling.preemption import Preemption
from fluence.scheduling.queue import GroupQueue
from fluence.scheduling.record import (
    PendingMember,
    RecordSeal,
    process_seal,
)
from fluence.scheduling.recovery import Recovery
from fluence.scheduling.request import Exclusions, GroupRequest, LedgerError, PlaceResult
from fluence.scheduling.reservations import Reservations
from fluence.scheduling.topology import PACK, SPREADS, DomainChoice
from fluxion_nb.errors import NotFoundError, StateError

log = logging.getLogger(__name__)
_tracer = telemetry.tracer("fluence.ledger")

DEFAULT_UNBOUND_TIMEOUT = 300.0
DEFAULT_GANG_TIMEOUT = 600.0
PARKED_SECONDS = 330.0
"""The least time a waiting group stays queued with no pod asking: kube-scheduler keeps a
pod it could not place in its unschedulable queue for up to five minutes when no cluster
event moves it (plus half a minute of back-off). A group silent that long is gone; one
silent for less may be parked, and keeps its place and its reservation."""
DEFAULT_RUNTIME = 3600
"""Seconds a pod without a deadline or runtime annotation is expected to run."""


@dataclass(frozen=True)
class LastMatch:
    """What the last match of a group said, kept for ``kubectl fluence explain``."""

    status: str
    message: str
    at: float
    pods: int
    match_seconds: float


LAST_MATCHES_KEPT = 4096
"""Groups whose last match is remembered; the oldest are forgotten first."""


_gang_timeouts = telemetry.meter("fluence.ledger").create_counter(
    "fluence_gang_timeouts",
    description="Groups whose tentative holdings were released because not every member "
    "was bound within the gang timeout",
)
_preemptions = telemetry.meter("fluence.ledger").create_counter(
    "fluence_preemptions",
    description="Lower-priority groups (or pods, where a PodGroup allows) evicted so a group fits",
)


class Ledger:
    """The coordinator: one placement, bind, release or pod event at a time, over the units
    of :mod:`fluence.scheduling`.

    Lock order: the ledger's lock (``lock``, re-entrant), then the graph's; never
    the other way round. Every unit is called with both held.
    """

    def __init__(
        self,
        graph: ClusterGraph,
        *,
        unbound_timeout: float = DEFAULT_UNBOUND_TIMEOUT,
        gang_timeout: float = DEFAULT_GANG_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        seal: RecordSeal | None = None,
        events: PodEvents | None = None,
        default_runtime: int = DEFAULT_RUNTIME,
        backfill: Backfill | None = None,
        spread: str = PACK,
    ) -> None:
        if spread not in SPREADS:
            raise ValueError(f"spread must be one of {', '.join(SPREADS)}, not {spread!r}")
        self.graph = graph
        self.store = Holdings(graph)
        """Every pod's holding and every group's devices."""
        self.match = MatchAndSplit(graph, self.store, clock)
        """One all-or-nothing match of a group, split into a holding per pod."""
        self.topology = DomainChoice(graph, self.match, spread)
        """Which domains a group is matched in; how a spanning gang is shared (``spread``)."""
        self.events: PodEvents = events if events is not None else NoEvents()
        """Warnings for pod owners (an ignored record, a gang timeout)."""
        self.gang_timeout = gang_timeout
        self.seal = seal if seal is not None else process_seal()
        self.unbound_timeout = unbound_timeout
        self.clock = clock
        self.lock = threading.RLock()
        self._holdings = self.store.by_pod
        self._last_match: OrderedDict[str, LastMatch] = OrderedDict()
        self.default_runtime = default_runtime
        self.recovery = Recovery(
            graph,
            self.store,
            seal=self.seal,
            events=self.events,
            clock=clock,
            default_runtime=default_runtime,
            release=self.release,
        )
        """Holdings that follow the pods the API server shows (restart replay included)."""
        self.reservations = Reservations(
            graph, self.store.new_id, backfill if backfill is not None else conservative()
        )
        """The waiting groups in order and the reservations the ``backfill`` policy keeps."""
        self.preemption = Preemption(graph)
        """Who is being evicted for whom, and the choice of victims."""
        self._version = 0
        """Counts placements and releases: a what-if answer holds until it changes."""

    # ---- ids ---------------------------------------------------------------------------

    # ---- queries -----------------------------------------------------------------------

    def busy(self) -> bool:
        """Would a ledger operation now wait for another thread (or the graph)?"""
        if not self.lock.acquire(blocking=False):
            return True
        self.lock.release()
        return self.graph.busy()

    def annotations(self, h: Holding, *, naming_others: bool = True) -> dict[str, str]:
        """What the Binding of ``h``'s pod writes: backend, attributes, the sealed record.

        ``naming_others``: the record names the group's other members not bound yet and
        their nodes, so a restarted ledger holds them again from this pod alone.
        """
        # Pods of no group (other schedulers' pods) have no members to name.
        pending = []
        if h.group and naming_others:
            with self.lock:
                pending = [
                    PendingMember(o.pod, o.uid, o.node, dict(o.amounts))
                    for o in self._holdings.of_group(h.group)
                    if o.pod != h.pod and o.state == TENTATIVE
                ]
        return h.annotations(self.seal, pending)

    def get(self, pod: str) -> Holding | None:
        with self.lock:
            return self._holdings.get(pod)

    def holdings(self) -> dict[str, Holding]:
        with self.lock:
            return dict(self._holdings)

    def touch(self, pod: str) -> None:
        """Filter handed the holding out again: the scheduler still wants it."""
        with self.lock:
            h = self._holdings.get(pod)
            if h and h.state == TENTATIVE:
                h.since = self.clock()

    def unconfirmed(self, pod: str) -> None:
        """A bind of ``pod`` may or may not have happened: keep its holding, unbound for now.

        The watch commits it again when the pod shows up bound; the next bind
        attempt finds it bound (409) or binds it; expiry releases it if neither
        comes.
        """
        with self.lock:
            h = self._holdings.get(pod)
            if h is not None and not h.seen_bound:
                h.state = TENTATIVE
                h.since = self.clock()

    # ---- placing -----------------------------------------------------------------------

    def place(
        self,
        group: str,
        pods: Sequence[Pod],
        exclude: Collection[str] = (),
        *,
        exclude_for: Mapping[str, Collection[str]] | None = None,
        topology: str = "",
        priority: int = 0,
        singly: bool = False,
        parts: Sequence[tuple[str, Sequence[str]]] = (),
        settled: Exclusions | None = None,
    ) -> PlaceResult:
        """Match ``pods`` of ``group`` as a whole and split the result into tentative holdings.

        All or nothing: when one jobspec fails, everything matched so far is undone.
        ``topology``: a node label key one domain of which must hold every pod.
        ``parts``: (key, pod keys) of subsets that must each be in one domain of their
        own key, inside the group's (a composite's children with a topology constraint).
        ``singly``: preemption may later take its pods one at a time.
        ``exclude_for``: nodes only some members may not use, by pod key.
        ``settled``: the exclusions the pods' own node rules make, when the others are
        only for now (:attr:`GroupRequest.settled`).
        The match leaves free what the groups ahead of this one have reserved; a
        group that does not fit waits in the queue, reserved when near its head.
        """
        level = self.graph.level_of(topology) if topology else ""
        runtime = group_runtime(pods, self.default_runtime)
        req = GroupRequest(
            group,
            tuple(pods),
            {p.key: split_requests(pod_requests(p)) for p in pods},
            self.graph.known_types(),
            frozenset(exclude),  # a frozen set shared by many groups is not copied
            runtime,
            # What a match now must leave free of reservations: the runtime when the kubelet
            # enforces it, else everything from now on (an estimate plans, never backfills).
            runtime if group_enforced(pods) else 0,
            exclude_for=dict(exclude_for or {}),
            node_names=self.graph.node_names,
            settled=settled,
        )
        window = req.window
        planned = req.specs(runtime)
        specs = planned if window == runtime else req.specs(window)
        with _tracer.start_as_current_span("match") as span:
            span.set_attribute("group", group)
            span.set_attribute("pods", len(pods))
            started = time.perf_counter()
            with self.lock, self.graph.lock:
                try:
                    waiting = self.reservations.queue.arrive(
                        group,
                        priority,
                        (p.key for p in pods),
                        self.clock(),
                        runtime=runtime,
                        enforced=window == runtime,
                        options=() if level else (planned,),
                    )
                    self.reservations.ahead(waiting)
                    kept = self.preemption.kept_room(group, priority, self.queue.get)
                    if kept:
                        req = req.beside_preemptors(sorted(kept))
                        specs = req.specs(window)
                    if parts:
                        result = self.topology.parts(req, level, parts)
                    elif level:
                        result = self.topology.one_domain(req, level)
                    else:
                        result = self.topology.packed(req, specs)
                    for h in result.holdings.values():
                        h.priority = priority
                        h.singly = singly
                    if result.holdings:
                        self._version += 1
                    if result.status == "unsatisfiable":
                        result = self._for_now(req, level, parts, result)
                        if result.status == "busy":
                            # Kept off every node it could use for now: no start time can
                            # be planned (and a search for one would try every end).
                            waiting.options = ()
                    elif level and result.status == "busy":
                        # Its ways to be reserved, one per domain that could ever hold it:
                        # only a group that waits needs them (built for every domain).
                        waiting.options = tuple(
                            specs for _, specs in self.topology.domain_specs(req, level, runtime)
                        )
                    result = self.reservations.outcome(waiting, result)
                finally:
                    elapsed = time.perf_counter() - started
            span.set_attribute("status", result.status)
            span.set_attribute("match_seconds", elapsed)
            last = LastMatch(result.status, result.message, self.clock(), len(pods), elapsed)
            self._remember(group, last)
            return PlaceResult(
                result.status, result.message, result.holdings, elapsed, result.starts_in
            )

    # ---- the queue ---------------------------------------------------------------------

    def _for_now(
        self,
        req: GroupRequest,
        level: str,
        parts: Sequence[tuple[str, Sequence[str]]],
        result: PlaceResult,
    ) -> PlaceResult:
        """``result`` of a group that can never fit, unless only the nodes kept off for
        now stand in its way: then it does not fit now, and keeps its place in the queue."""
        lasting = req.settled_only()
        if lasting is None:
            return result
        if parts:
            ever = self.topology.parts_ever_fit(lasting, level, parts)
        else:
            ever = self.topology.ever_fits(lasting, level)
        if not ever:
            return result
        return PlaceResult(
            "busy", f"group {req.group} does not fit now on the nodes that can take its pods now"
        )

    @property
    def queue(self) -> GroupQueue:
        """The waiting groups in order (:attr:`reservations` owns them)."""
        return self.reservations.queue

    def reserve(self) -> list[dict[str, Any]]:
        """Make the reservations of the queue's first groups; the queue, in order."""
        with self.lock, self.graph.lock:
            self.reservations.ahead(None)
            return self.reservations.listing(self.clock())

    def fitting_unasked(self, quiet: float, repeat: float) -> list[tuple[str, list[str]]]:
        """Reserved groups that fit now and whose pods did not ask for ``quiet`` seconds
        (:meth:`Reservations.fitting_unasked`)."""
        with self.lock, self.graph.lock:
            return self.reservations.fitting_unasked(quiet, repeat, self.clock())

    def waiting(self) -> list[dict[str, Any]]:
        """The queue in order, for ``/state`` and ``kubectl fluence queue``."""
        with self.lock:
            return self.reservations.listing(self.clock())

    # ---- preemption --------------------------------------------------------------------

    def victims_for(self, group: str) -> list[str]:
        """The units whose eviction lets waiting ``group`` fit now (:meth:`Preemption.choose`).

        Drops ``group``'s own reservation when there are candidates (the queue makes
        it again); nothing is marked or released.
        """
        with self.lock, self.graph.lock:
            w = self.queue.get(group)
            if w is None or not self.preemption.worth_asking(w, self._version):
                return []
            held = list(self._holdings.values())
            members = self.preemption.candidates(w, held)
            if not members:
                return []
            if w.reservation is not None:
                self.reservations.cancel(w)
                self.reservations.moved()
            return self.preemption.choose(w, members, held, self._version)

    def evict_for(self, units: Sequence[str], by: str) -> dict[str, list[Holding]]:
        """Mark ``units`` as being preempted by ``by``; their bound pods, to be evicted.

        Their unbound members let go at once; the bound ones keep their capacity
        until their pods are gone (the watch releases them), so nothing is placed
        twice meanwhile. That capacity is planned to free now, so the preempting
        group's reservation stands on it and no group behind is placed into it
        while the pods go (which would only be preempted in turn).
        """
        out: dict[str, list[Holding]] = {}
        with self.lock, self.graph.lock:
            for u in units:
                _preemptions.add(1)
                self.preemption.mark(u, by)
                hs = [h for h in self._holdings.values() if h.unit == u]
                for h in hs:
                    if h.state == TENTATIVE and not h.seen_bound:
                        self.release(h.pod, f"preempted by group {by}")
                out[u] = [h for h in hs if h.state == COMMITTED or h.seen_bound]
                if not out[u]:
                    self.preemption.unmark(u)
            going = {h.jobid for hs in out.values() for h in hs if h.jobid}
            going |= {d.jobid for hs in out.values() for h in hs if not h.singly for d in h.devices}
            going.discard(0)
            if going and self.graph.end_soon(going):
                self.reservations.moved()
            return out

    def start_preemption(self, group: str) -> tuple[list[str], dict[str, list[Holding]]]:
        """(units already being preempted for ``group``, {unit chosen now: its bound pods}).

        One step under the ledger's lock: two asks for one group at once (its
        members' filters, kube-scheduler's preempt call, a retry after a timeout)
        never both choose victims, so no more is evicted than one choice needs.
        """
        with self.lock:
            already = self.preempted_for(group)
            if already:
                return already, {}
            victims = self.victims_for(group)
            return [], self.evict_for(victims, group) if victims else {}

    def preempted_for(self, group: str) -> list[str]:
        """The units being evicted to make room for ``group``, sorted."""
        with self.lock:
            return self.preemption.for_group(group)

    def _remember(self, group: str, last: LastMatch) -> None:
        with self.lock:
            self._last_match[group] = last
            self._last_match.move_to_end(group)
            while len(self._last_match) > LAST_MATCHES_KEPT:
                self._last_match.popitem(last=False)

    def last_match(self, group: str) -> LastMatch | None:
        """The outcome of the group's most recent match, if one was made here."""
        with self.lock:
            return self._last_match.get(group)

    # ---- committing and releasing ------------------------------------------------------

    def commit(self, pod: str, uid: str, node: str) -> Holding:
        """The pod is being bound to ``node``: make its holding committed (moving it if needed).

        A pod without a holding (expired, or never filtered by us) is allocated on
        ``node`` directly when it fits there; otherwise LedgerError.
        """
        with self.lock, self.graph.lock:
            h = self._holdings.get(pod)
            if h is None:
                raise LedgerError(
                    f"pod {pod} has no allocation (it expired or was released); "
                    "the scheduler will retry it through filter"
                )
            if h.node and h.node != node or not h.node and h.amounts:
                self._move(h, node)
            h.state = COMMITTED
            h.uid = uid or h.uid
            if not h.node:
                h.node = node
            return h

    def _move(self, h: Holding, node: str) -> None:
        try:
            new = self.store.hold_compute(node, h.amounts, h.runtime)
        except (StateError, NotFoundError) as exc:
            raise LedgerError(
                f"pod {h.pod} was allocated {h.node} but is bound to {node}, "
                f"where its {h.amounts} do not fit: {exc}"
            ) from exc
        if h.jobid:
            self.graph.release(h.jobid)
        log.info("allocation moved", extra={"pod": h.pod, "from": h.node, "to": node})
        h.jobid, h.node = new, node

    def release(self, pod: str, reason: str) -> Holding | None:
        with self.lock:
            self.recovery.released(pod)
            h = self._holdings.pop(pod, None)
            if h is None:
                return None
            self.store.release_jobs(h)
            self.reservations.moved()
            self._version += 1
            if h.unit in self.preemption.evicting and not any(
                o.unit == h.unit for o in self._holdings.values()
            ):
                by = self.preemption.unmark(h.unit)
                log.info("preempted group is gone", extra={"group": h.unit, "by": by})
            log.info("allocation released", extra={"pod": pod, "group": h.group, "reason": reason})
            if self.recovery.waiting_to_be_accounted():
                # Capacity came free: pods of other schedulers that did not fit may fit now.
                # A retry only holds, so it never comes back here.
                with self.graph.lock:
                    self.recovery.retry()
            return h

    def expire(self) -> list[str]:
        """Release what waits too long; returns the pods released.

        A tentative holding not handed out again for ``unbound_timeout`` seconds
        goes. So does every tentative holding of a group whose members are not
        all bound ``gang_timeout`` seconds after its match: filter retries renew
        each member's holding, so a gang with one member that can never bind
        would otherwise keep the others' capacity for ever. A waiting group leaves
        the queue when none of its pods asked for ``gang_timeout`` seconds, and
        never sooner than :data:`PARKED_SECONDS`.
        """
        now = self.clock()
        with self.lock:
            old = self.store.unbound_for(now, self.unbound_timeout)
            for k in old:
                self.release(k, f"not bound within {self.unbound_timeout:.0f}s")
            self.reservations.drop_silent(now, max(self.gang_timeout, PARKED_SECONDS))
            for group, members in self.store.stuck_groups(now, self.gang_timeout).items():
                why = (
                    f"group {group} not fully bound within {self.gang_timeout:.0f}s; "
                    "its capacity is released and the group is matched again when retried"
                )
                for k in members:
                    self.release(k, why)
                    namespace, _, name = k.partition("/")
                    self.events.warn(namespace, name, "", "GangTimeout", why)
                log.warning("gang timed out", extra={"group": group, "released": members})
                _gang_timeouts.add(1)
                old += members
            return old

    # ---- following the cluster ---------------------------------------------------------

    def observe(self, pod: Pod) -> None:
        """Bring the ledger in line with one pod as the API server sees it."""
        with self.lock, self.graph.lock:
            self.recovery.follow(pod)
            if pod.bound or pod.terminal:
                # Bound by another extender (or the queue's leader): it waits here no more.
                self.reservations.forget_pod(pod.key, "its pods were bound")

    def follow_release(self, pod: Pod) -> tuple[Holding | None, str]:
        """A released pod this ledger may not have seen yet (its watch lags the scheduler
        that asks about it): hold it where its record says. Returns its holding, if any,
        and the node its trusted record names ("" when it carries none)."""
        with self.lock, self.graph.lock:
            node = self.recovery.follow_released(pod)
            return self._holdings.get(pod.key), node

    def sealed(self, pod: Pod) -> bool:
        """Does the pod carry a record sealed for it? (Replayed first after a restart.)"""
        return self.recovery.sealed(pod)

    def forget(self, pod_key: str) -> None:
        """The pod was deleted."""
        with self.lock:
            self.reservations.forget_pod(pod_key)
            self.release(pod_key, "pod deleted")

    def retry_unaccounted(self) -> None:
        """Capacity appeared (a node, or a release): account again pods that did not fit before."""
        with self.lock, self.graph.lock:
            self.recovery.retry()

    def drop_lost(self, jobids: Sequence[int]) -> None:
        """The graph was rebuilt and these jobs no longer fit: forget their holdings."""
        lost = set(jobids)
        with self.lock:
            for k, h in list(self._holdings.items()):
                if h.jobid in lost or any(d.jobid in lost for d in h.devices):
                    self.release(k, "no longer fits the changed cluster")

    def drop_absent(self, present: set[str]) -> None:
        """After recovery: release unbound holdings of pods the cluster no longer has."""
        with self.lock:
            for k, h in list(self._holdings.items()):
                if h.state == TENTATIVE and k not in present:
                    self.release(k, "the pod no longer exists")
