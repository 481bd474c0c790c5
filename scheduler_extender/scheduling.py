"""The extender's decisions, as a plain object the HTTP verbs call (and tests drive directly).

Filter places a pod's whole group on the first member it sees and answers
with that member's own node; later members get theirs from the ledger. Bind
commits the allocation and writes it onto the pod through the Binding, so the
record arrives atomically with ``spec.nodeName``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec
from opentelemetry import trace

from fluence import groups, names, telemetry
from fluence.cluster_graph import ClusterGraph
from fluence.group_jobspec import JobspecError, group_jobspecs
from fluence.ledger import Ledger
from fluence.pods import Pod, PodGroup
from fluence.runtimes import group_runtime
from fluence.scheduling.holdings import TENTATIVE
from fluence.scheduling.request import Exclusions, LedgerError, PlaceResult

if TYPE_CHECKING:
    from scheduler_extender.eviction import Evictor

log = logging.getLogger(__name__)
_tracer = telemetry.tracer("fluence.extender")
_meter = telemetry.meter("fluence.extender")
_match_seconds = _meter.create_histogram(
    "fluence_match_seconds", unit="s", description="Time to match and split one group."
)

MAX_SCORE = 10

START_SOON_SECONDS = 3
"""A waiting group whose reservation starts within this many seconds is answered with an
error, not a rejection.

kube-scheduler tries a rejected pod again on a cluster event, after a back-off that grows
with every rejection up to its maximum (times the square root of the size of a 1.37 pod
group: 5.7 s for 32 pods at 1 s). A group refused while it waited has that back-off when
its room frees, and its start waits out a random part of it. An error is tried again
after a back-off counted from the errors alone (1 s, then 2 s, ...), so a group that
starts in a moment is tried about when it starts. kube-scheduler's own gang plugin
answers a gang still missing members the same way."""

LAG_GRACE_SECONDS = 10.0
"""How long a gang member's node may go unoffered by kube-scheduler before it is moved.

kube-scheduler offers a member only some nodes at a time: the nodes of one candidate
placement (a rack, with topology-aware workload scheduling, each tried in turn), or
all nodes but one its cache still sees busy a moment after fluence's watch saw the
pod there end. Either way the member keeps its holding and the filter answers that
these nodes will not do, so the placement that holds fluence's nodes is the one that
succeeds; were it released, the gang would be split and the room handed to the next
small pod. A node not offered for this long since it was last handed out is ruled
out for a reason of kube-scheduler's own, and the member is placed again. A pod
alone is placed again at once: no gang waits on it."""


class ClusterView(Protocol):
    """What the extender reads from the cluster (the reflectors' caches)."""

    def pods_in(self, namespace: str) -> Sequence[Pod]: ...

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None: ...


@runtime_checkable
class GroupIndexedView(ClusterView, Protocol):
    """A view that finds a gang's pods without scanning its namespace (the reflector cache)."""

    def group_pods(self, ref: groups.GroupRef) -> Sequence[Pod]: ...


class BindConflict(Exception):
    """The API server said 409: the pod is bound already, or its UID is not the one we placed."""


class BindError(Exception):
    """The Binding could not be created; the message says why."""


class BindOutcomeUnknown(BindError):
    """No answer says whether the Binding was made (a timeout, a lost connection, a 5xx).

    The pod may be bound already, so its allocation is kept until the watch (or
    the next bind attempt's 409) says which.
    """


class ReleaseRefused(Exception):
    """The API server refused the release: the pod is gone, was recreated or changed."""


class Binder(Protocol):
    """Creates Bindings; called on the event loop, so it must not block it."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None: ...

    async def node_of(self, namespace: str, name: str) -> str | None:
        """The pod's node ("" or None when unbound); BindOutcomeUnknown when it cannot be read."""
        ...


@dataclass
class FilterOutcome:
    nodes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


def describe_units(units: Sequence[str]) -> str:
    """Preemption units for a message: "group(s) a, b" and/or "pod(s) c" (sorted)."""
    pods = sorted(u.removeprefix("pod ") for u in units if u.startswith("pod "))
    groups = sorted(u for u in units if not u.startswith("pod "))
    parts = [f"group(s) {', '.join(groups)}"] if groups else []
    if pods:
        parts.append(f"pod(s) {', '.join(pods)}")
    return " and ".join(parts)


def _parts(ref: groups.GroupRef, pods: Sequence[Pod]) -> list[tuple[str, list[str]]]:
    """A composite's children with a topology of their own: (topology key, their pods)."""
    return [
        (key, [m.key for m in pods if groups.group_name(m) == (groups.NATIVE, child)])
        for child, key in ref.child_topology
    ]


def _elsewhere(group: str, node: str) -> str:
    return f"group {group} is placed elsewhere: node {node} holds this pod"


def split_exclusions(each: Mapping[str, set[str]]) -> tuple[set[str], dict[str, set[str]]]:
    """The nodes no pod may use, and the others each pod may not: a node one member may
    not use stays open to the rest."""
    sets = list(each.values())
    common = set.intersection(*sets) if sets else set()
    return common, {k: s - common for k, s in each.items() if s - common}


def _with_exclusions(
    each: dict[str, set[str]], exclude_for: Mapping[str, Collection[str]]
) -> tuple[set[str], dict[str, set[str]]]:
    """The pods' own exclusions ``each`` (changed in place) with ``exclude_for`` added, split
    as :func:`split_exclusions` does."""
    for key, nodes in exclude_for.items():
        each.setdefault(key, set()).update(nodes)
    return split_exclusions(each)


def _released_to(node: str) -> str:
    return f"the queue released this pod to node {node}"


class Scheduler:
    def __init__(
        self,
        graph: ClusterGraph,
        ledger: Ledger,
        view: ClusterView,
        binder: Binder,
        *,
        scheduler_name: str = "fluence",
        evictor: Evictor | None = None,
    ) -> None:
        self.graph = graph
        self.evictor = evictor
        """Evicts whole lower-priority groups for a waiting one; None: no preemption."""
        self.ledger = ledger
        self.view = view
        self.binder = binder
        self.scheduler_name = scheduler_name
        self._indexed = view if isinstance(view, GroupIndexedView) else None
        self._composites = view if isinstance(view, groups.CompositeView) else None

    def would_block(self) -> bool:
        """A decision now would wait for another thread: run it off the event loop."""
        return self.ledger.busy()

    # ---- filter ------------------------------------------------------------------------

    def filter(self, pod: Pod, candidates: Collection[str]) -> FilterOutcome:
        """Where ``pod`` may go among ``candidates``.

        ``candidates`` is only asked "is X offered?" on the common paths and
        iterated only when every candidate is in the reply (a failure message
        per node, or a pod that needs no node resources), so a lazily decoded
        :class:`~scheduler_extender.candidates.Candidates` stays cheap.
        """
        if pod.spec.scheduler_name != self.scheduler_name:
            return FilterOutcome(nodes=list(candidates))
        with _tracer.start_as_current_span("filter") as span:
            span.set_attribute("pod", pod.key)
            out = self._filter(pod, candidates, span)
            span.set_attribute("nodes", ",".join(out.nodes[:5]))
            return out

    def _filter(self, pod: Pod, candidates: Collection[str], span: trace.Span) -> FilterOutcome:
        held = self.ledger.get(pod.key)
        if held is not None and pod.metadata.uid and held.uid and held.uid != pod.metadata.uid:
            self.ledger.release(pod.key, "pod was recreated under the same name")
            held = None
        if held is None and names.ANNOTATION_ALLOCATION_SEAL in pod.metadata.annotations:
            held, node = self.ledger.follow_release(pod)
            if held is None and node:
                # The queue's leader placed it and holds its room; this view has not seen
                # that room freed yet (its watch lags). It is accounted when it has.
                if node in candidates:
                    return FilterOutcome(nodes=[node])
                return FilterOutcome(failed={n: _released_to(node) for n in candidates})
        if held is not None:
            span.set_attribute("group", held.group)
            if not held.amounts:
                self.ledger.touch(pod.key)
                return FilterOutcome(nodes=list(candidates))
            if held.node in candidates:
                self.ledger.touch(pod.key)
                return FilterOutcome(nodes=[held.node])
        # Everything below may change state: the offered names are read whole first, so a
        # list that is not all names is refused before anything is decided.
        len(candidates)
        if held is not None:
            if (
                held.group != pod.key
                and held.state == TENTATIVE
                and self.ledger.clock() - held.since < LAG_GRACE_SECONDS
            ):
                return FilterOutcome(
                    failed={n: _elsewhere(held.group, held.node) for n in candidates}
                )
            self.ledger.release(pod.key, f"the scheduler ruled out its node {held.node}")
            return self._place(pod.key, [pod], pod, candidates, only_candidates=True)

        ref = self.identify(pod)
        span.set_attribute("group", ref.key)
        if ref.unknown:
            # As kube-scheduler's gang plugin: no member goes before its PodGroup (and quorum)
            # is known, so a PodGroup the watch has not delivered yet never splits a gang.
            # An error, not failed nodes: kube-scheduler may have seen the PodGroup already
            # (its add event spent), and it retries an error after its back-off whatever
            # happens, where it would keep a pod whose nodes failed until the next event.
            return FilterOutcome(error=ref.waiting or f"waiting for PodGroup {ref.key} to exist")
        members = self._members(pod, ref)
        if len(members) < ref.min_count:
            missing = ref.min_count - len(members)
            msg = (
                f"waiting for {missing} more pod(s) of group {ref.key} "
                f"({len(members)} of {ref.min_count} exist)"
            )
            return FilterOutcome(failed={n: msg for n in candidates})
        to_place = [
            m for m in members if not m.bound and not m.gated and self.ledger.get(m.key) is None
        ]
        if pod.key not in {m.key for m in to_place}:
            to_place.append(pod)
        return self._place(
            ref.key,
            to_place,
            pod,
            candidates,
            only_candidates=False,
            topology=ref.topology,
            priority=groups.group_priority(ref, members),
            singly=ref.singly,
            preempts=ref.preempts,
            parts=_parts(ref, to_place),
        )

    def identify(self, pod: Pod) -> groups.GroupRef:
        """The pod's group, with its quorum, from what the view holds."""
        return groups.identify(pod, self.view.podgroup, self._composites)

    def group_members(self, pod: Pod, ref: groups.GroupRef) -> list[Pod]:
        """The live pods of ``pod``'s group (``pod`` included)."""
        return self._members(pod, ref)

    def place_group(
        self,
        ref: groups.GroupRef,
        members: Sequence[Pod],
        to_place: Sequence[Pod],
        also_exclude: Collection[str] = (),
        exclude_for: Mapping[str, Collection[str]] | None = None,
    ) -> PlaceResult:
        """Match ``to_place`` of group ``ref`` whole, on any node (the queue's path).

        ``also_exclude``: nodes none of them may use; ``exclude_for``: nodes some may not
        (by pod key), beside those their own node rules rule out; both only for now (the
        queue's node room), so a group that fits without them does not fit now, not never.
        A group that does not fit waits in the ledger's queue, and starts preempting
        lower-priority groups where it may; the message says so.
        """
        each = self._excluded(to_place)
        for_now = bool(also_exclude) or any((exclude_for or {}).values())
        # The pods' own node rules, apart from the nodes kept off only for now.
        settled = split_exclusions(each) if for_now else None
        common, extra = _with_exclusions(each, exclude_for or {})
        try:
            res = self._match(
                ref.key,
                to_place,
                # The queue's exclusions as they are when the pods' own rules add none: the
                # groups of a round share them (nodes at their pod limit, maybe thousands).
                common | set(also_exclude) if common else also_exclude,
                exclude_for=extra,
                topology=ref.topology,
                priority=groups.group_priority(ref, members),
                singly=ref.singly,
                parts=_parts(ref, to_place),
                settled=Exclusions(sorted(settled[0]), settled[1]) if settled else None,
            )
        except JobspecError as exc:
            return PlaceResult("unsatisfiable", str(exc))
        except LedgerError as exc:
            log.error("placing a group failed", extra={"group": ref.key, "error": str(exc)})
            return PlaceResult("error", str(exc))
        if res.status == "busy" and ref.preempts and to_place:
            also = self._preempt_for(ref.key, to_place[0])
            if also:
                return replace(res, message=res.message + also)
        return res

    def open_now(
        self,
        ref: groups.GroupRef,
        to_place: Sequence[Pod],
        exclude_for: Mapping[str, Collection[str]],
    ) -> frozenset[str]:
        """The nodes open to ``to_place`` of group ``ref`` (those their own node rules
        leave) if the group would fit now with only those rules and ``exclude_for`` in
        the way; empty if it would not. Changes nothing: a what-if for the queue."""
        common, extra = _with_exclusions(self._excluded(to_place), exclude_for)
        try:
            specs = group_jobspecs(
                ref.key,
                to_place,
                self.graph.known_types(),
                common,
                duration=group_runtime(to_place, self.ledger.default_runtime),
                exclude_for=extra,
            )
        except JobspecError:
            return frozenset()
        if not self.graph.fits_now(specs.jobspecs()):
            return frozenset()
        return frozenset(self.graph.node_names()) - common

    def _excluded(self, pods: Sequence[Pod]) -> dict[str, set[str]]:
        """The nodes each of ``pods`` may not use (taints, node selectors), by pod key."""
        exclude: dict[str, set[str]] = {}
        seen: dict[bytes, list[str]] = {}
        for p in pods:
            # Members usually share their node rules: work each distinct set out once.
            spec = p.spec
            sig = msgspec.json.encode(
                (
                    spec.tolerations,
                    spec.node_selector,
                    spec.affinity,
                    [c.resources for c in spec.containers],
                    [c.resources for c in spec.init_containers],
                )
            )
            if sig not in seen:
                seen[sig] = self.graph.excluded_for(p)
            exclude[p.key] = set(seen[sig])
        return exclude

    def _match(
        self,
        group: str,
        pods: Sequence[Pod],
        exclude: Collection[str],
        *,
        exclude_for: Mapping[str, Collection[str]] | None = None,
        topology: str,
        priority: int,
        singly: bool,
        parts: Sequence[tuple[str, Sequence[str]]],
        settled: Exclusions | None = None,
    ) -> PlaceResult:
        res = self.ledger.place(
            group,
            pods,
            exclude,  # the jobspec sorts what it names
            exclude_for=exclude_for,
            topology=topology,
            priority=priority,
            singly=singly,
            parts=parts,
            settled=settled,
        )
        _match_seconds.record(res.match_seconds)
        trace.get_current_span().set_attribute("match_seconds", res.match_seconds)
        return res

    def _members(self, pod: Pod, ref: groups.GroupRef) -> list[Pod]:
        if ref.single:
            return [pod]
        if self._indexed is not None:
            pods = self._indexed.group_pods(ref)
        else:
            pods = [p for p in self.view.pods_in(ref.namespace) if groups.same_group(p, ref)]
        found = {p.key: p for p in pods if not p.terminal and not p.metadata.deletion_timestamp}
        found[pod.key] = pod
        return list(found.values())

    def _place(
        self,
        group: str,
        pods: list[Pod],
        pod: Pod,
        candidates: Collection[str],
        *,
        only_candidates: bool,
        topology: str = "",
        priority: int = 0,
        singly: bool = False,
        preempts: bool = True,
        parts: Sequence[tuple[str, Sequence[str]]] = (),
    ) -> FilterOutcome:
        exclude, extra = split_exclusions(self._excluded(pods))
        # A lone pod goes only where the scheduler's own filters let it (e.g. a node's pod
        # limit, which the graph does not model); matching elsewhere would only be undone.
        alone = len(pods) == 1 and pods[0].key == pod.key
        if only_candidates or (alone and len(candidates) < self.graph.node_count()):
            allowed = set(candidates)
            exclude.update(n for n in self.graph.node_names() if n not in allowed)
        try:
            res = self._match(
                group,
                pods,
                exclude,
                exclude_for=extra,
                topology=topology,
                priority=priority,
                singly=singly,
                parts=parts,
            )
        except JobspecError as exc:
            return FilterOutcome(unresolvable={n: str(exc) for n in candidates})
        except LedgerError as exc:
            log.error("placing a group failed", extra={"group": group, "error": str(exc)})
            return FilterOutcome(error=str(exc))
        if res.status == "unsatisfiable":
            return FilterOutcome(unresolvable={n: res.message for n in candidates})
        if res.status != "allocated":
            if res.starts_in is not None and 0 < res.starts_in <= START_SOON_SECONDS:
                # Its room frees in a moment: an error makes kube-scheduler try again after
                # a short back-off of its own, where a rejection would wait for an event
                # and a back-off grown with every refusal (up to the max times the square
                # root of a pod group's size).
                going = self.ledger.preempted_for(group)
                also = f"; waiting for preempted {describe_units(going)} to end" if going else ""
                return FilterOutcome(error=f"{res.message}{also}; to be tried again when it starts")
            message = res.message + (self._preempt_for(group, pod) if preempts else "")
            return FilterOutcome(failed={n: message for n in candidates})
        mine = res.holdings[pod.key]
        if not mine.amounts:
            return FilterOutcome(nodes=list(candidates))
        if mine.node in candidates:
            return FilterOutcome(nodes=[mine.node])
        if not only_candidates and len(pods) > 1:
            # A gang placed where these candidates are not (another rack kube-scheduler
            # tries first, say): the placement with fluence's nodes is the one to pass.
            return FilterOutcome(failed={n: _elsewhere(group, mine.node) for n in candidates})
        if not only_candidates:
            # Fluxion chose a node the scheduler ruled out for this pod: try once more within
            # the candidates, keeping the rest of the group where it is.
            self.ledger.release(pod.key, f"the scheduler ruled out its node {mine.node}")
            return self._place(group, [pod], pod, candidates, only_candidates=True)
        msg = f"fluxion placed pod {pod.key} on {mine.node}, which the scheduler ruled out"
        self.ledger.release(pod.key, msg)
        return FilterOutcome(failed={n: msg for n in candidates})

    def preempt(self, pod: Pod) -> None:
        """kube-scheduler's own filters found no node for ``pod``: match its group as filter
        would, so that a group that only fits once lower-priority groups go preempts them.

        Holdings such a match makes are let go at once: kube-scheduler has ruled out
        every node for its own reasons and would not bring the pod back to use them.
        """
        if pod.spec.scheduler_name != self.scheduler_name or self.evictor is None:
            return
        if self.ledger.get(pod.key) is not None:
            return
        before = set(self.ledger.holdings())
        self.filter(pod, self.graph.node_names())
        for key, h in self.ledger.holdings().items():
            if key not in before and h.state == TENTATIVE:
                self.ledger.release(key, "kube-scheduler ruled out every node for the group")

    def _preempt_for(self, group: str, pod: Pod) -> str:
        """Start evicting the lower-priority groups (or pods of groups that allow it) whose
        going lets ``group`` fit; what to add to its message ("" when nothing is preempted)."""
        if self.evictor is None or pod.spec.preemption_policy == "Never":
            return ""
        already, doomed = self.ledger.start_preemption(group)
        if already:
            return f"; waiting for preempted {describe_units(already)} to end"
        if not doomed:
            return ""
        victims = list(doomed)
        log.info("preempting", extra={"group": group, "victims": victims})
        self.evictor.evict(doomed, group)
        return f"; preempting lower-priority {describe_units(victims)}"

    # ---- prioritize --------------------------------------------------------------------

    def prioritize(self, pod: Pod, candidates: Collection[str]) -> list[tuple[str, int]]:
        held = self.ledger.get(pod.key)
        node = held.node if held else ""
        return [(n, MAX_SCORE if n == node else 0) for n in candidates]

    # ---- bind --------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind the pod; returns "" or the error for the scheduler.

        The commit runs under the ledger's lock, so it is safe beside the
        reflectors; it runs in a thread only while a rebuild holds the graph.
        Two binds of one pod both create the Binding at worst: the second gets
        409, reads the pod back on the same node and succeeds.
        """
        key = f"{namespace}/{name}"
        with _tracer.start_as_current_span("bind") as span:
            span.set_attribute("pod", key)
            span.set_attribute("node", node)
            try:
                if self.would_block():
                    held = await asyncio.to_thread(self.ledger.commit, key, uid, node)
                else:
                    held = self.ledger.commit(key, uid, node)
            except LedgerError as exc:
                return str(exc)
            span.set_attribute("group", held.group)
            try:
                try:
                    await self.binder.bind(
                        namespace, name, uid, node, self.ledger.annotations(held)
                    )
                except BindConflict as conflict:
                    actual = await self.binder.node_of(namespace, name)
                    if actual == node:
                        return ""
                    if actual:
                        self.ledger.release(key, "bind conflict: the pod is bound elsewhere")
                        return f"pod {key} is already bound to {actual}, not {node}"
                    # Not bound at all: the UID precondition failed (the pod was recreated).
                    self.ledger.release(key, "bind conflict")
                    return f"binding pod {key} to {node} was refused: {conflict}"
            except BindOutcomeUnknown as exc:
                self.ledger.unconfirmed(key)
                return (
                    f"binding pod {key} to {node}: outcome unknown ({exc}); its allocation is "
                    "kept until the API server shows whether it is bound"
                )
            except BindError as exc:
                self.ledger.release(key, "bind failed")
                return f"binding pod {key} to {node} failed: {exc}"
            log.info("pod bound", extra={"pod": key, "node": node, "group": held.group})
            return ""
