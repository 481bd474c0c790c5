"""Match and split: one all-or-nothing match for a whole group, then a node per pod.

Every jobspec of the group is matched now; when one fails, everything matched so
far is undone. The group's jobs then become one job per pod (a pod alone in its
shape keeps its matched job), held in the store as tentative holdings, and the
group's devices are held once for its members to share. This unit owns that step
and the words of its refusals; it never queues, reserves or preempts. Callers hold
the ledger's and the graph's locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from fluence import names
from fluence.cluster_graph import ClusterGraph
from fluence.group_jobspec import GroupSpecs
from fluence.placement import BackendChoice, PlacementError, assign, backends_of, slots_per_node
from fluence.pods import CORE, GPU, MEMORY
from fluence.scheduling.holdings import TENTATIVE, Holding, Holdings
from fluence.scheduling.request import GroupRequest, LedgerError, PlaceResult, pods_by_shape
from fluxion_nb.errors import InputError, NotFoundError, StateError
from fluxion_nb.graph import Allocation

log = logging.getLogger(__name__)


def describe(amounts: Mapping[str, int]) -> str:
    """Graph amounts in Kubernetes words: ``cpu 1500m, memory 512Mi, nvidia.com/gpu 1``."""
    parts = []
    for t, n in sorted(amounts.items()):
        if t == CORE:
            parts.append(f"cpu {n}m")
        elif t == MEMORY:
            parts.append(f"memory {n}Mi")
        elif t == GPU:
            parts.append(f"{names.RESOURCE_GPU} {n}")
        else:
            parts.append(f"{names.resource_name(t)} {n}")
    return ", ".join(parts)


class MatchAndSplit:
    """Places a group's jobspecs all or nothing and splits the match into holdings."""

    def __init__(self, graph: ClusterGraph, store: Holdings, clock: Callable[[], float]) -> None:
        self.graph = graph
        self.store = store
        self.clock = clock

    def __call__(self, req: GroupRequest, specs: GroupSpecs) -> PlaceResult:
        """Match ``specs`` now (of ``req.window`` seconds), then hold each pod ``req.runtime``."""
        group, pods, split, runtime, window = (
            req.group,
            req.pods,
            req.split,
            req.runtime,
            req.window,
        )
        matched: list[int] = []
        node_of: dict[str, str] = {}
        backends: list[tuple[str, BackendChoice]] = []
        # A shape only one pod has: that pod keeps the matched job as its own (no re-hold).
        kept: dict[str, tuple[int, Allocation]] = {}

        def undo() -> None:
            for jid in matched:
                self.graph.cancel_match(jid)

        shape_pods = pods_by_shape(pods, split)
        try:
            for cs in specs.compute:
                jid = self.store.new_id()
                alloc = self.graph.allocate(cs.jobspec, jid)
                if not alloc.ok:
                    undo()
                    return self._failure(
                        req, alloc.status, f"{cs.count} pod(s) of {describe(dict(cs.shape))}"
                    )
                matched.append(jid)
                # Specs of one shape (one per domain, spread) each take the next pods;
                # one for named pods (a part in a domain of its own) takes those.
                if cs.pods:
                    mine = list(cs.pods)
                    shape_pods[cs.shape] = [k for k in shape_pods[cs.shape] if k not in cs.pods]
                else:
                    mine, shape_pods[cs.shape] = (
                        shape_pods[cs.shape][: cs.count],
                        shape_pods[cs.shape][cs.count :],
                    )
                placed = assign(mine, slots_per_node(alloc.by_node(), cs.shape, cs.count))
                node_of.update(placed)
                if cs.count == 1 and window == runtime:
                    (only,) = placed
                    kept[only] = (jid, alloc)
            shared = self.store.devices.get(group)
            for ds in specs.devices if shared is None else ():
                jid = self.store.new_id()
                alloc = self.graph.allocate(ds.jobspec, jid)
                if not alloc.ok:
                    undo()
                    what = f"{ds.count} {names.resource_name(ds.type)}"
                    return self._failure(req, alloc.status, what)
                matched.append(jid)
                found = backends_of(alloc)
                if not found:
                    undo()
                    return PlaceResult("unsatisfiable", f"the {ds.type} match returned no backend")
                backends += [(ds.type, be) for be in found]
        except (PlacementError, InputError) as exc:
            undo()
            raise LedgerError(f"group {group}: {exc}") from exc
        # Split: the group jobs become one job per pod.
        kept_ids = {jid for jid, _ in kept.values()}
        for jid in matched:
            if jid not in kept_ids:
                self.graph.cancel_match(jid)
        now = self.clock()
        made: dict[str, Holding] = {}
        try:
            if shared is None and backends:
                wanted = [(t, be.path, be.name) for t, be in backends]
                shared = self.store.hold_devices(group, wanted, [b for _, b in backends], runtime)
            ordered = sorted(pods, key=lambda p: p.key)
            for p in ordered:
                compute = split[p.key][0]
                node = node_of.get(p.key, "")
                jid = 0
                if p.key in kept:
                    jid, alloc = kept.pop(p.key)
                    self.graph.adopt(jid, alloc, node)
                elif compute:
                    jid = self.store.hold_compute(node, compute, runtime)
                h = Holding(p.key, p.metadata.uid, group, node, dict(compute), jid, TENTATIVE, now)
                h.placed = now
                h.runtime = runtime
                if shared is not None:
                    self.store.join(h, shared)
                made[p.key] = h
                self.store.by_pod[p.key] = h
        except (StateError, NotFoundError) as exc:
            for h in made.values():
                self.store.release_jobs(h)
                self.store.by_pod.pop(h.pod, None)
            self.store.drop_unused(group)
            for jid, _ in kept.values():
                self.graph.cancel_match(jid)
            raise LedgerError(f"group {group}: splitting the allocation failed: {exc}") from exc
        # A group of one is logged once, when it is bound; a gang's layout is worth a line.
        level = logging.INFO if len(made) > 1 else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(
                level,
                "group placed",
                extra={
                    "group": group,
                    "pods": {k: h.node for k, h in made.items()},
                    "backend": ",".join(be.name for _, be in backends),
                },
            )
        return PlaceResult("allocated", "", made)

    @staticmethod
    def _failure(req: GroupRequest, status: str, what: str) -> PlaceResult:
        group = req.group
        if req.beside_preemptor:
            # Matched off the room kept for a preemptor: no verdict on "never".
            msg = (
                f"group {group} does not fit now: not enough free capacity for {what} "
                "beside the room held for a higher-priority group whose preempted pods are going"
            )
            return PlaceResult("busy", msg)
        if status == "unsatisfiable":
            msg = f"group {group} can never fit: {what} exceed what the cluster has"
        else:
            msg = f"group {group} does not fit now: not enough free capacity for {what}"
        return PlaceResult("unsatisfiable" if status == "unsatisfiable" else "busy", msg)
