"""The queue fluence owns: gated pods wait here until their whole group is placed.

The webhook gives every pod of the fluence profile the scheduling gate
``fluence.flux-framework.org/queue``, so kube-scheduler leaves it alone. The
queue (run by the extender holding the queue's Lease) forms groups from the
gated pods, orders them by priority, then arrival, and matches each with
Fluxion through the ledger as the filter path would (reservations, backfill,
topology, preemption). A group that fits is released whole: each pod gets one
patch (:func:`fluence.pinning.release_ops`) that records its allocation, pins
it to its node and removes the gate; kube-scheduler then checks the pod with
its own plugins and binds it there, and the extender's filter answers it from
its holding at once.

A released group whose members are not all bound within the gang timeout (a
member refused by kube-scheduler, its node gone) is evicted whole, so that its
controller makes the pods again and they queue afresh, after a back-off that
doubles with each such timeout; after ``retry_limit`` of them the group's new
pods wait gated, with the reason. A bare pod evicted so is gone: nothing makes
it again. No pod waits pinned to a node for longer than the gang timeout.

Nothing of the queue lives only here: the gated pods, their PodGroups and the
sealed records of released pods are in the API server, so a restarted or
standby extender forms the same groups in the same order, and holds released
pods where their records say (:mod:`fluence.scheduling.recovery`); the gang
timeouts so far ride on the queue's Lease (:mod:`scheduler_extender.gang_timeouts`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from typing import Any, Protocol

from fluence import groups, names, telemetry
from fluence.device_claims import Devices
from fluence.json_patch import PatchOp
from fluence.pinning import release_ops
from fluence.pod_affinity import NamespaceLabels
from fluence.pods import Pod
from fluence.reflectors import DELETED
from fluence.runtimes import group_runtime
from fluence.scheduling.holdings import Holding
from fluence.volume_nodes import Storage
from scheduler_extender.gang_timeouts import GangTimeouts
from scheduler_extender.node_room import NodeRoom, PlacedOnNodes
from scheduler_extender.qrmi_acquisition import AcquireFailed, Acquisitions
from scheduler_extender.scheduling import BindOutcomeUnknown, ReleaseRefused, Scheduler

log = logging.getLogger(__name__)
_meter = telemetry.meter("fluence.queue")
_released = _meter.create_counter(
    "fluence_queue_pods_released",
    description="Gated pods released to kube-scheduler pinned to the node Fluxion chose",
)
_requeued = _meter.create_counter(
    "fluence_queue_groups_requeued",
    description="Released groups evicted to queue again: not all bound within the gang timeout",
)
_after_end = _meter.create_histogram(
    "fluence_queue_release_after_end_seconds",
    unit="s",
    description="From a pod's end (room freed) to the release of the group that room let start",
)
_refused = _meter.create_counter(
    "fluence_queue_release_failures",
    description="Releases the API server refused or did not answer (tried again next round)",
)

DEFAULT_INTERVAL = 1.0
"""Seconds between rounds when no pod or node event wakes the queue sooner."""


DEFAULT_BACKOFF = 10.0
"""Seconds a group evicted after its first gang timeout waits before it is placed again."""
MAX_BACKOFF = 600.0
MATCH_TRIES = 3
"""Matches of one group per round, each leaving out the nodes where kube-scheduler would
have refused a member of the last (:mod:`scheduler_extender.node_room`)."""
DEFAULT_STATUS_INTERVAL = 30.0
"""Least seconds between two writes of a waiting group's Queued condition."""
DEFAULT_TELL_AFTER = 2.0
"""Seconds a group waits before its pods are told why: a gang whose pods are still being
created, or that starts at the next round, costs no status writes."""
DEFAULT_RETRY_LIMIT = 5
"""Gang timeouts after which a group's pods stay gated until an operator acts."""


class PodWriter(Protocol):
    async def release(self, namespace: str, name: str, ops: Sequence[PatchOp]) -> None: ...


class GroupEvictor(Protocol):
    def requeue(self, pods: Sequence[tuple[str, str]], group: str, why: str) -> None:
        """Evict ``pods`` (key, uid) of ``group``; their controller makes them again."""
        ...


class ConditionWriter(Protocol):
    def __call__(self, pod: str, condition: dict[str, Any]) -> None:
        """Set ``condition`` (by its type) in the status of ``pod`` (namespace/name)."""
        ...


class Leadership(Protocol):
    @property
    def leader(self) -> bool: ...

    @property
    def carried(self) -> str | None:
        """What the last leader left on the Lease for its successor (None: nothing)."""
        ...

    def carry(self, value: str) -> None:
        """Leave ``value`` on the Lease with the next renewal."""
        ...


@dataclass(frozen=True)
class Release:
    """One pod's release: where it goes and the patch that sends it there."""

    pod: str
    uid: str
    group: str
    node: str
    ops: list[PatchOp]
    first: bool = True
    """Its record names the group's other members released with it: written before them."""


@dataclass
class PlacesKept:
    """The places under the nodes' pod limits a round keeps for the first group that waits
    for places alone (it would fit now if the nodes at their limit had room).

    The pod limit is not in the graph, so no reservation holds places: without this, each
    place a pod's end frees would go to a later arrival that needs one, and a gang that
    needs several would wait for as long as such arrivals come. As EASY backfill does
    with a reservation, a group behind it may still use the nodes it waits on if it is
    expected to end by the time enough places free there (the planned ends of the pods
    held on them); one that is not is kept off them for the round. When those ends are
    not foreseeable (pods held until released), nothing is kept."""

    nodes: frozenset[str] = frozenset()
    """The nodes the waiting group may use."""
    by: float = 0.0
    """Graph time by which enough places free there."""
    group: str = ""
    tried: bool = False
    """The round's first group that waits has been looked at (only it may keep places)."""
    _beside: tuple[frozenset[str], frozenset[str]] | None = None

    def beside(self, full: frozenset[str]) -> frozenset[str]:
        """``full`` and the nodes kept, worked out once for each set of full nodes."""
        if self._beside is None or self._beside[0] is not full:
            self._beside = (full, full | self.nodes)
        return self._beside[1]


@dataclass(frozen=True)
class Waiting:
    """A group the last round did not release, and why (for ``kubectl fluence queue``)."""

    group: str
    pods: int
    reason: str
    members: tuple[str, ...] = ()
    """The group's gated pods, which carry the reason in their Queued condition."""


def ours_alone(pod: Pod) -> bool:
    """Gated by the queue and by nothing else: ready for the queue to place."""
    return [g.name for g in pod.spec.scheduling_gates] == [names.QUEUE_GATE]


class GatedQueue:
    """Forms groups from gated pods, places them, and releases the placed ones."""

    def __init__(
        self,
        scheduler: Scheduler,
        writer: PodWriter,
        *,
        evictor: GroupEvictor | None = None,
        interval: float = DEFAULT_INTERVAL,
        backoff: float = DEFAULT_BACKOFF,
        retry_limit: int = DEFAULT_RETRY_LIMIT,
        conditions: ConditionWriter | None = None,
        status_interval: float = DEFAULT_STATUS_INTERVAL,
        tell_after: float = DEFAULT_TELL_AFTER,
        acquisitions: Acquisitions | None = None,
        storage: Storage | None = None,
        devices: Devices | None = None,
        namespaces: NamespaceLabels | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scheduler = scheduler
        self.acquisitions = acquisitions
        """QRMI resources acquired before a release and released after (None: not done)."""
        self.storage = storage
        """Claims, volumes and storage classes (None: volumes are left to kube-scheduler)."""
        self.devices = devices
        """ResourceClaims, ResourceSlices and DeviceClasses (None: left to kube-scheduler)."""
        self.ledger = scheduler.ledger
        self.writer = writer
        self.evictor = evictor
        self.interval = interval
        self.retry_limit = retry_limit
        self.clock = clock
        self.conditions = conditions
        self.status_interval = status_interval
        self.tell_after = tell_after
        self._waiting_since: dict[str, float] = {}
        """Group key -> when a round first left it waiting (since then without a break)."""
        self._freed_at: float | None = None
        """When the watch first saw a pod end since the last round that released or could not
        use the room."""
        self._freed_before_plan: float | None = None
        self._told: dict[str, str] = {}
        """Pod key -> the reason its Queued condition says."""
        self._told_at: dict[str, float] = {}
        """Group key -> when a reason was last written on its pods."""
        self._pinned: dict[str, Pod] = {}
        """Released pods of ours not bound yet, by key."""
        self._placed = PlacedOnNodes(namespaces)
        """Pods of any scheduler bound to a node or released pinned there: their host ports
        and what pod affinity counts."""
        self._pinned_since: dict[str, float] = {}
        """Group key -> when this queue first saw a member pinned and unbound."""
        self.timeouts = GangTimeouts(backoff, MAX_BACKOFF, clock=clock)
        """Each requeued group's gang timeouts and back-off (carried on the queue's Lease)."""
        self._lock = threading.Lock()
        self._gated: dict[str, Pod] = {}
        """Pods of the fluence profile that carry the queue's gate, by key."""
        self._sent: dict[str, str] = {}
        """Pods whose release was written (key -> uid) and that the watch still shows gated."""
        self._sent_to: dict[str, str] = {}
        """The nodes of ``_sent``: such pods count as placed there before the watch shows
        the release (the next round must not give their ports, spread or devices away)."""
        self._written: set[str] = set()
        """Groups a release of which was written since the last round's writes ended."""
        self._wake: Callable[[], object] = lambda: None
        if acquisitions is not None:
            acquisitions.wake = lambda: self.poke()  # a QRMI call ended: go on with its result
        self.waiting: list[Waiting] = []
        """The groups the last round left waiting, in queue order."""

    # ---- following the cluster --------------------------------------------------------

    def on_pod(self, kind: str, pod: Pod) -> None:
        """A reflector handler: keep the gated pods; wake the loop when room may have freed."""
        key = pod.key
        mine = pod.spec.scheduler_name == self.scheduler.scheduler_name
        if self.acquisitions is not None:
            self.acquisitions.on_pod(kind, pod)
        with self._lock:
            if kind != DELETED and mine and pod.gated_by(names.QUEUE_GATE):
                if not pod.metadata.deletion_timestamp:
                    self._gated[key] = pod
                else:
                    self._gated.pop(key, None)
            else:
                self._gated.pop(key, None)
                self._sent.pop(key, None)
                self._sent_to.pop(key, None)
                if kind == DELETED:
                    self._told.pop(key, None)
            if kind != DELETED and mine and _pinned(pod):
                self._pinned[key] = pod
            else:
                self._pinned.pop(key, None)
            node = pod.spec.node_name or (_pinned_node(pod) if mine and _pinned(pod) else "")
            node = node or self._sent_to.get(key, "")
            gone = kind == DELETED or pod.terminal
            self._placed.put(key, "" if gone else node, pod)
        if kind == DELETED or pod.terminal:
            if self._freed_at is None:
                self._freed_at = self.clock()
            self.poke()
        elif mine and pod.gated:
            self.poke()

    def on_change(self, kind: str, obj: object) -> None:
        """A reflector handler for nodes, claims, volumes, storage classes, CSI nodes,
        volume attachments, resource claims and slices, device classes and namespaces:
        room may have freed or a rule changed, so a round looks again."""
        self.poke()

    def poke(self) -> None:
        self._wake()

    # ---- one round ---------------------------------------------------------------------

    def plan(self, emit: Callable[[list[Release]], object] | None = None) -> list[Release]:
        """Place what fits now, in queue order; the releases to write.

        ``emit``: called with each group's releases as soon as it is placed, so that its
        writes start while the round goes on through the groups behind it."""
        self._freed_before_plan = self._freed_at
        with self._lock:
            gated = [p for p in self._gated.values() if p.key not in self._sent]
        found: dict[str, tuple[groups.GroupRef, list[Pod]]] = {}
        waiting: list[Waiting] = []
        for pod in gated:
            if not ours_alone(pod):
                continue
            ref = self.scheduler.identify(pod)
            if ref.key in found:
                continue
            if ref.unknown:
                reason = ref.waiting or f"waiting for PodGroup {ref.key} to exist"
                waiting.append(Waiting(ref.key, 1, reason, (pod.key,)))
                found[ref.key] = (ref, [])
                continue
            found[ref.key] = (ref, self.scheduler.group_members(pod, ref))
        order = sorted(
            ((ref, members) for ref, members in found.values() if members),
            key=lambda rm: (-groups.group_priority(*rm), _arrival(rm[1]), rm[0].key),
        )
        releases: list[Release] = []
        kept = PlacesKept()
        now = self.clock()
        graph = self.scheduler.graph
        limits, held = graph.pod_limits(), self.ledger.holdings().values()
        with self._lock:
            room = self._placed.room(
                limits, held, graph.nodes, self.storage, graph.free_units, self.devices
            )
        for ref, members in order:
            gated_keys = tuple(m.key for m in members if m.gated_by(names.QUEUE_GATE))
            count, until = astuple(self.timeouts.get(ref.key))
            if count >= self.retry_limit:
                reason = f"not all started within the gang timeout {count} times; not placed again"
            elif now < until:
                reason = f"gang timeout {count}: placed again in {until - now:.0f}s"
            else:
                placed = len(releases)
                reason = self._place(ref, members, room, releases, kept)
                if emit is not None and len(releases) > placed:
                    emit(releases[placed:])
            if reason:
                waiting.append(Waiting(ref.key, len(members), reason, gated_keys))
        self.waiting = waiting
        self._waiting_since = {w.group: self._waiting_since.get(w.group, now) for w in waiting}
        if self.acquisitions is not None:
            self.acquisitions.keep_only(found)
        return releases

    def _place(
        self,
        ref: groups.GroupRef,
        members: list[Pod],
        room: NodeRoom,
        out: list[Release],
        kept: PlacesKept,
    ) -> str:
        """Place one group and add its releases to ``out``; why it waits ("" if it does not)."""
        ledger = self.ledger
        for m in members:
            held = ledger.get(m.key)
            if held is not None and held.uid and m.metadata.uid and held.uid != m.metadata.uid:
                ledger.release(m.key, "pod was recreated under the same name")
        ready = [m for m in members if m.bound or ledger.get(m.key) is not None or _placeable(m)]
        if len(ready) < ref.min_count:
            missing = ref.min_count - len(ready)
            return f"waiting for {missing} more pod(s) of group {ref.key}"
        to_place = [m for m in ready if not m.bound and ledger.get(m.key) is None]
        if to_place:
            why = self._place_where_kube_scheduler_agrees(ref, members, to_place, room, kept)
            if why:
                return why
        due = [
            (m, held)
            for m in members
            if (held := ledger.get(m.key)) is not None and ours_alone(m) and m.key not in self._sent
        ]
        try:
            acquired = self._acquire(ref.key, members, [h for _, h in due])
        except AcquireFailed as exc:
            for m, _ in due:
                ledger.release(m.key, str(exc))
            return str(exc)
        finalizers = [names.FINALIZER_QRMI_RELEASE] if acquired else []
        for i, (m, held) in enumerate(due):
            ledger.touch(m.key)
            # Each released pod's record holds its own place; the first also names the
            # others', and is written before them: a leader that dies between the writes
            # leaves a successor all it needs, and records do not grow with the gang's
            # size squared.
            annotations = ledger.annotations(held, naming_others=i == 0)
            for resource, token in acquired:
                assert self.acquisitions is not None
                annotations.update(self.acquisitions.annotations(m, resource, token))
            ops = release_ops(m, held.node, annotations, finalizers)
            out.append(Release(m.key, m.metadata.uid, ref.key, held.node, ops, first=i == 0))
        return ""

    def _acquire(
        self, group: str, members: list[Pod], held: list[Holding]
    ) -> list[tuple[str, str]]:
        """(resource, token) of each of the group's QRMI acquisitions, made now if need be
        ([]: nothing to acquire). AcquireFailed when one could not be made."""
        if self.acquisitions is None:
            return []
        holding = next((h for h in held if h.backend is not None), None)
        if holding is None or holding.backend is None:
            return []
        backends = holding.backends or [holding.backend]
        resources = self.acquisitions.needs((b.name, b.attributes) for b in backends)
        if not resources:
            return []
        return self.acquisitions.acquire_all(group, resources, members)

    def _place_where_kube_scheduler_agrees(
        self,
        ref: groups.GroupRef,
        members: list[Pod],
        to_place: list[Pod],
        room: NodeRoom,
        kept: PlacesKept,
    ) -> str:
        """Match the group on nodes kube-scheduler would take its pods on.

        The graph holds neither pod counts, ports nor the pods affinity counts, and
        kube-scheduler refuses a pinned pod on a node at its limit, where a port it takes
        is taken, or that pod affinity rules out (:mod:`scheduler_extender.node_room`):
        such nodes are left out, and a node the match would fill past its limit, or where
        members meet that may not, is left out and the match made again. (Members asking
        for the same ports, or kept apart per node, are matched on distinct nodes in the
        first place, and the places left under nodes' pod limits are dealt out among
        members before the match.)
        """
        why = room.claims_unmet(to_place)
        if why:
            return why
        by_key = {m.key: m for m in to_place}
        left_out = room.refusing(to_place)
        clashed = room.full()
        if kept.nodes and not self._ends_by(to_place, kept.by):
            clashed = kept.beside(clashed)  # the places a group ahead waits for
        for _ in range(MATCH_TRIES):
            res = self.scheduler.place_group(ref, members, to_place, clashed, left_out)
            if res.status != "allocated":
                why = res.message or res.status
                # Counted without copying the nodes at their pod limit (thousands, maybe).
                unused = len(clashed) + len(set[str]().union(*left_out.values()) - clashed)
                if unused:
                    why += (
                        f" (not counting {unused} node(s) at their pod limit, where its "
                        "host ports are taken or its other requests do not fit, or that pod "
                        "affinity, its spread, its volumes or its devices rule out for some of "
                        "its pods)"
                    )
                if res.status == "busy" and not kept.tried:
                    kept.tried = True  # the first group that waits, alone (EASY)
                    why += self._keep_places(ref, to_place, room, kept)
                return why
            clash = room.clashing(res.holdings, by_key)
            unmet = room.unmet(res.holdings, by_key, left_out)
            if not clash and not unmet:
                room.take(res.holdings, by_key)
                return ""
            for key in res.holdings:
                self.ledger.release(key, "matched onto nodes that would refuse its pods")
            clashed |= clash
            for key, nodes in unmet.items():
                left_out.setdefault(key, set()).update(nodes)
        return (
            f"no placement within the nodes' pod limits, free host ports, room for other "
            f"requests, pod affinity, topology spread, volumes and devices after {MATCH_TRIES} "
            "tries"
        )

    def _ends_by(self, pods: Sequence[Pod], by: float) -> bool:
        """Are ``pods`` expected to end by graph time ``by``, were they placed now?"""
        runtime = group_runtime(pods, self.ledger.default_runtime)
        return runtime > 0 and self.scheduler.graph.now() + runtime <= by

    def _keep_places(
        self, ref: groups.GroupRef, to_place: list[Pod], room: NodeRoom, kept: PlacesKept
    ) -> str:
        """Keep the places ``ref`` waits for (:class:`PlacesKept`) if it waits for places
        alone; what its reason says of them ("" when none are kept)."""
        if ref.topology or ref.child_topology:
            return ""
        if not room.full() and not room.room_for(to_place):
            return ""  # no node is short of places for it
        nodes = self.scheduler.open_now(ref, to_place, room.refusing(to_place, places=False))
        if not nodes:
            return ""
        graph = self.scheduler.graph
        now = graph.now()
        by = room.places_free_by(nodes, len(to_place), now, graph.planned_ends())
        if by is None:
            return ""
        kept.nodes, kept.by, kept.group = nodes, by, ref.key
        return f"; places are kept for it, expected free in {by - now:.0f}s"

    def tell(self) -> int:
        """Write each waiting group's reason on its gated pods (condition ``Queued``): once
        the group has waited ``tell_after`` seconds, at once on a pod not told yet, again
        when the reason changed but at most every ``status_interval`` seconds a group; the
        pods written."""
        if self.conditions is None:
            return 0
        now = self.clock()
        written = 0
        for w in self.waiting:
            if now - self._waiting_since.get(w.group, now) < self.tell_after:
                continue
            due = now - self._told_at.get(w.group, -self.status_interval) >= self.status_interval
            condition = queued_condition(w.reason)
            wrote = 0
            for pod in w.members:
                told = self._told.get(pod)
                if told == w.reason or told is not None and not due:
                    continue
                if self._condition(pod, condition):
                    self._told[pod] = w.reason
                    wrote += 1
            if wrote:
                self._told_at[w.group] = now
                written += wrote
        waiting = {w.group for w in self.waiting}
        for key in [k for k in self._told_at if k not in waiting]:
            del self._told_at[key]
        return written

    def _condition(self, pod: str, condition: dict[str, Any]) -> bool:
        assert self.conditions is not None
        try:
            self.conditions(pod, condition)
        except Exception as exc:  # noqa: BLE001 - the reason is a courtesy; go on
            log.info("queued condition not written", extra={"pod": pod, "error": repr(exc)})
            return False
        return True

    def _untell(self, released: Sequence[Release]) -> None:
        """Turn the Queued condition of released pods that carried one False."""
        for r in released:
            if self._told.pop(r.pod, None) is not None:
                self._condition(r.pod, released_condition(r.node))

    def overdue(self) -> list[str]:
        """Evict the released groups not all bound within the gang timeout (or pinned to a node
        that is gone); the groups evicted."""
        now = self.clock()
        timeout = self.ledger.gang_timeout
        with self._lock:
            pinned = list(self._pinned.values())
        nodes = set(self.scheduler.graph.node_names())
        stuck: dict[str, tuple[groups.GroupRef, Pod, str]] = {}
        alive: set[str] = set()
        for pod in pinned:
            ref = self.scheduler.identify(pod)
            alive.add(ref.key)
            since = self._pinned_since.setdefault(ref.key, now)
            node = _pinned_node(pod)
            if node and node not in nodes:
                stuck[ref.key] = (ref, pod, f"its node {node} is gone")
            elif now - since >= timeout and ref.key not in stuck:
                why = f"not every member was bound within the gang timeout ({timeout:.0f}s)"
                stuck[ref.key] = (ref, pod, why)
        for key in list(self._pinned_since):
            if key not in alive:
                del self._pinned_since[key]
        for key, (ref, pod, why) in stuck.items():
            members = self.scheduler.group_members(pod, ref)
            count, until = astuple(self.timeouts.bump(key))
            wait = until - now
            self._pinned_since.pop(key, None)
            with self._lock:
                for m in members:
                    self._pinned.pop(m.key, None)
            for m in members:
                # Bound members keep their holdings until their pods are gone (the watch).
                if not m.bound:
                    self.ledger.release(m.key, f"group {key} requeued: {why}")
            _requeued.add(1)
            message = (
                f"group {key} evicted to queue again: {why} (time {count}, back-off {wait:.0f}s)"
            )
            log.warning("released group requeued", extra={"group": key, "why": why})
            if self.evictor is not None:
                self.evictor.requeue([(m.key, m.metadata.uid) for m in members], key, message)
        return list(stuck)

    async def write(self, releases: Sequence[Release]) -> None:
        """Write the releases side by side (the writer bounds the connections)."""
        await self._send(releases)
        await self._sent_all(releases)

    async def _send(self, releases: Sequence[Release]) -> None:
        """Write some of a round's releases: those of one group, or all of them."""
        with self._lock:
            for r in releases:
                self._sent[r.pod] = r.uid
                self._sent_to[r.pod] = r.node
                self._placed.put(r.pod, r.node, self._gated.get(r.pod))
        by_group: dict[str, list[Release]] = {}
        for r in releases:
            by_group.setdefault(r.group, []).append(r)
        await asyncio.gather(*(self._write_group(rs) for rs in by_group.values()))
        if releases:
            freed, self._freed_at = self._freed_at, None
            if freed is not None:
                _after_end.record(self.clock() - freed)

    async def _sent_all(self, releases: Sequence[Release]) -> None:
        """After a round's writes: the QRMI acquisitions the written pods carry are theirs,
        and the released pods told of waiting are told they are released."""
        if not releases and self._freed_at == self._freed_before_plan:
            # The room freed so far started nobody: a later release is not its wait.
            self._freed_at = None
        written, self._written = self._written, set()
        if self.acquisitions is not None:
            # Not from the writes themselves: the round's thread may be acquiring meanwhile.
            for group in written:
                self.acquisitions.written(group)
        if self.conditions is not None and any(r.pod in self._told for r in releases):
            await asyncio.to_thread(self._untell, releases)

    async def _write_group(self, releases: list[Release]) -> None:
        """The release naming the others first, then the rest side by side."""
        first = [r for r in releases if r.first]
        for r in first:
            await self._write(r)
        await asyncio.gather(*(self._write(r) for r in releases if not r.first))

    async def _write(self, r: Release) -> None:
        namespace, _, name = r.pod.partition("/")
        try:
            await self.writer.release(namespace, name, r.ops)
        except (ReleaseRefused, BindOutcomeUnknown) as exc:
            _refused.add(1)
            log.warning(
                "release not written; tried again next round",
                extra={"pod": r.pod, "node": r.node, "error": str(exc)},
            )
            with self._lock:
                self._sent.pop(r.pod, None)
                if self._sent_to.pop(r.pod, None) is not None:
                    self._placed.put(r.pod, "", None)
            self.poke()
            return
        _released.add(1)
        self._written.add(r.group)
        self._pinned_since.setdefault(r.group, self.clock())
        log.info("pod released", extra={"pod": r.pod, "node": r.node, "group": r.group})

    async def let_go(self) -> None:
        """Release the QRMI acquisitions whose pods are done, and take their finalizers off."""
        if self.acquisitions is None:
            return
        removals = await asyncio.to_thread(self.acquisitions.reap)
        await asyncio.gather(*(self._unfinalize(pod, ops) for pod, ops in removals))

    async def _unfinalize(self, pod: str, ops: Sequence[PatchOp]) -> None:
        namespace, _, name = pod.partition("/")
        try:
            await self.writer.release(namespace, name, ops)
        except (ReleaseRefused, BindOutcomeUnknown) as exc:
            log.warning("finalizer not removed; tried again", extra={"pod": pod, "error": str(exc)})

    # ---- the loop ----------------------------------------------------------------------

    async def run(self, ready: Callable[[], bool], leadership: Leadership) -> None:
        """Rounds until cancelled: on a pod or node event, else every ``interval`` seconds."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        self._wake = lambda: loop.call_soon_threadsafe(woken.set)
        try:
            await self._rounds(woken, ready, leadership)
        finally:
            self._wake = lambda: None  # events after the loop ends wake nothing

    async def round(self) -> None:
        """One round of the leader: evict overdue groups, place and release what fits, let
        QRMI acquisitions go, tell the waiting groups why."""
        await asyncio.to_thread(self.overdue)
        loop = asyncio.get_running_loop()
        sending: list[concurrent.futures.Future[None]] = []

        def emit(placed: list[Release]) -> None:
            # From the round's thread: the loop writes them while the round goes on.
            sending.append(asyncio.run_coroutine_threadsafe(self._send(placed), loop))

        releases = await asyncio.to_thread(self.plan, emit)
        await asyncio.gather(*(asyncio.wrap_future(f) for f in sending))
        await self._sent_all(releases)
        await self.let_go()
        await asyncio.to_thread(self.tell)

    async def _rounds(
        self, woken: asyncio.Event, ready: Callable[[], bool], leadership: Leadership
    ) -> None:
        led = False
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout=self.interval)
            woken.clear()
            leading = leadership.leader
            if leading and not led:
                # Taken over: go on counting the gang timeouts where the last leader stopped.
                self.timeouts.load(leadership.carried)
            led = leading
            if not ready() or not leading:
                continue
            try:
                await self.round()
                self.timeouts.forget_quiet(
                    {w.group for w in self.waiting} | set(self._pinned_since)
                )
                leadership.carry(self.timeouts.encode())
            except Exception:
                log.exception("a queue round failed; the next one starts afresh")


def queued_condition(reason: str) -> dict[str, Any]:
    """The pod condition that says why its group waits (``kubectl describe pod`` shows it)."""
    return {
        "type": names.CONDITION_QUEUED,
        "status": "True",
        "reason": "WaitingInQueue",
        "message": f"{reason} (kubectl fluence queue shows its place)",
        "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def released_condition(node: str) -> dict[str, Any]:
    """The Queued condition of a pod the queue released: no longer waiting."""
    where = f" to node {node}" if node else ""
    return {
        **queued_condition(""),
        "status": "False",
        "reason": "Released",
        "message": f"placed by fluence's queue and released{where}",
    }


def _pinned(pod: Pod) -> bool:
    """Released by a queue (it carries a sealed record) and not bound yet."""
    return (
        not pod.gated
        and not pod.bound
        and not pod.terminal
        and not pod.metadata.deletion_timestamp
        and names.ANNOTATION_ALLOCATION_SEAL in pod.metadata.annotations
    )


def _pinned_node(pod: Pod) -> str:
    """The node a released pod's required affinity names last (the queue's addition)."""
    affinity = pod.spec.affinity
    required = affinity.node_affinity.required if affinity and affinity.node_affinity else None
    for term in required.node_selector_terms if required else ():
        for r in reversed(term.match_fields):
            if r.key == names.NODE_NAME_FIELD and r.operator == "In" and len(r.values) == 1:
                return r.values[0]
    return ""


def _placeable(pod: Pod) -> bool:
    """Not bound and either gated by the queue alone or not gated at all."""
    return not pod.bound and (not pod.gated or ours_alone(pod))


def _arrival(members: Sequence[Pod]) -> str:
    """The group's arrival: its first member's creation (RFC 3339 text sorts by time)."""
    return min((m.metadata.creation_timestamp or "" for m in members), default="")
