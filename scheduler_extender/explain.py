"""Why a pod is pending, or where it went: the answer behind ``GET /explain``.

Everything is read from copies: the reflectors' pods, the ledger's holding of
the pod, and jobspecs rebuilt for the group the way filter builds them. The
reason for a pod that holds nothing is worked out now, in the order filter
would meet it (not ours, quorum, jobspec, fit), with what-if matches that
record nothing, so asking never changes what the scheduler will do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fluence import groups
from fluence.group_jobspec import GroupSpecs, JobspecError, group_jobspecs
from fluence.ledger import Ledger
from fluence.pods import Pod
from fluence.scheduling.holdings import Holding
from fluence.scheduling.match import describe
from scheduler_extender.scheduling import Scheduler, split_exclusions
from scheduler_extender.whatif import FITS, UNSATISFIABLE, JobspecInputError, what_if

UNKNOWN = "unknown"
NOT_OURS = "not-ours"
WAITING_FOR_QUORUM = "waiting-for-quorum"
INVALID = "invalid"
BUSY = "busy"
UNSATISFIABLE_NOW = UNSATISFIABLE
FITS_NOW = "fits-now"
PLACED = "placed"


def _last_match(ledger: Ledger, group: str) -> dict[str, Any] | None:
    """The ledger's record of the group's last match, or None when it has none."""
    got = ledger.last_match(group)
    return dataclasses.asdict(got) if got is not None else None


def _holding_doc(h: Holding) -> dict[str, Any]:
    return {
        "state": h.state,
        "node": h.node or None,
        "amounts": dict(h.amounts),
        "backend": h.backend.name if h.backend else None,
        "attributes": dict(h.backend.attributes) if h.backend else {},
        "devices": [{"type": d.type, "path": d.path, "name": d.name} for d in h.devices],
    }


def _find(scheduler: Scheduler, namespace: str, name: str) -> Pod | None:
    for p in scheduler.view.pods_in(namespace):
        if p.metadata.name == name:
            return p
    return None


def _specs_doc(specs: GroupSpecs) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in specs.compute:
        out.append(
            {
                "kind": "compute",
                "pods": c.count,
                "each": describe(dict(c.shape)),
                "jobspec": c.jobspec,
            }
        )
    for d in specs.devices:
        out.append({"kind": "device", "type": d.type, "count": d.count, "jobspec": d.jobspec})
    return out


def explain(scheduler: Scheduler, namespace: str, name: str) -> dict[str, Any]:
    """The explanation document for pod ``namespace/name`` (see docs/observability.md)."""
    key = f"{namespace}/{name}"
    graph, ledger = scheduler.graph, scheduler.ledger
    pod = _find(scheduler, namespace, name)
    held = ledger.get(key)
    doc: dict[str, Any] = {
        "pod": key,
        "known": pod is not None,
        "phase": pod.status.phase if pod else None,
        "node": (pod.spec.node_name or None) if pod else None,
        "group": held.group if held and held.group else None,
        "members": [],
        "quorum": None,
        "holding": _holding_doc(held) if held else None,
        "backend": held.backend.name if held and held.backend else None,
        "jobspecs": [],
        "last_match": None,
        "verdict": "",
        "reason": "",
    }
    if pod is None:
        if held is not None:
            doc["verdict"] = PLACED
            doc["reason"] = f"not in the pod cache, but holds {held.state} resources on {held.node}"
        else:
            doc["verdict"] = UNKNOWN
            doc["reason"] = (
                f"pod {key} is not known to the extender: check the name and namespace "
                "(it may have been deleted)"
            )
        return doc
    if pod.spec.scheduler_name != scheduler.scheduler_name:
        doc["verdict"] = NOT_OURS
        doc["reason"] = (
            f"spec.schedulerName is {pod.spec.scheduler_name!r}, not "
            f"{scheduler.scheduler_name!r}: fluence does not place this pod"
        )
        return doc
    ref = scheduler.identify(pod)
    # The reflector cache indexes pods by gang (``group_pods``); other views are scanned.
    indexed = getattr(scheduler.view, "group_pods", None)
    candidates = indexed(ref) if callable(indexed) and not ref.single else None
    if candidates is None:
        candidates = [p for p in scheduler.view.pods_in(namespace) if groups.same_group(p, ref)]
    members = [p for p in candidates if not p.terminal and not p.metadata.deletion_timestamp]
    if pod.key not in {m.key for m in members}:
        members.append(pod)
    doc["group"] = ref.key
    doc["last_match"] = _last_match(ledger, ref.key)
    doc["quorum"] = {"source": ref.source, "min_count": ref.min_count, "present": len(members)}
    doc["members"] = [
        {
            "pod": m.key,
            "node": m.spec.node_name or None,
            "holding": (h.state if (h := ledger.get(m.key)) else None),
        }
        for m in sorted(members, key=lambda m: m.key)
    ]
    unplaced = [m for m in members if not m.bound and not m.gated and ledger.get(m.key) is None]
    to_spec = unplaced or members
    common, extra = split_exclusions({m.key: set(graph.excluded_for(m)) for m in to_spec})
    try:
        specs = group_jobspecs(
            ref.key, to_spec, graph.known_types(), sorted(common), exclude_for=extra
        )
    except JobspecError as exc:
        doc["verdict"] = INVALID
        doc["reason"] = str(exc)
        return doc
    doc["jobspecs"] = _specs_doc(specs)
    if held is not None:
        where = held.node or (held.backend.name if held.backend else "no node")
        doc["verdict"] = PLACED
        doc["reason"] = f"{held.state} allocation on {where}" + (
            " (bound)" if pod.bound else " (waiting for the scheduler to bind it)"
        )
        return doc
    if pod.bound:
        doc["verdict"] = PLACED
        doc["reason"] = f"bound to {pod.spec.node_name} but holds nothing in the ledger"
        return doc
    if len(members) < ref.min_count:
        missing = ref.min_count - len(members)
        doc["verdict"] = WAITING_FOR_QUORUM
        doc["reason"] = (
            f"waiting for {missing} more pod(s) of group {ref.key} "
            f"({len(members)} of {ref.min_count} exist)"
        )
        return doc
    doc["verdict"], doc["reason"] = _fit_reason(scheduler, ref.key, specs)
    return doc


def _fit_reason(scheduler: Scheduler, group: str, specs: GroupSpecs) -> tuple[str, str]:
    """Match each jobspec alone, without allocating; the first that fails is the reason."""
    checks: list[tuple[str, dict[str, Any]]] = [
        (f"{c.count} pod(s) of {describe(dict(c.shape))}", c.jobspec) for c in specs.compute
    ]
    checks += [(f"{d.count} {d.type}", d.jobspec) for d in specs.devices]
    for what, js in checks:
        try:
            got = what_if(scheduler.graph, js)
        except JobspecInputError as exc:
            return INVALID, f"group {group}: {exc}"
        if got["status"] == UNSATISFIABLE:
            return (
                UNSATISFIABLE_NOW,
                f"group {group} can never fit: {what} exceed what the cluster has",
            )
        if got["status"] != FITS:
            return BUSY, f"group {group} does not fit now: not enough free capacity for {what}"
    return (
        FITS_NOW,
        f"group {group} fits now; the scheduler places it on its next retry "
        "(if it stays pending, look at the pod's events for other scheduler plugins' reasons)",
    )
