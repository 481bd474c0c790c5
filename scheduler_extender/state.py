"""The ``/state`` document: what the graph holds, per node, backend, group and pod.

Versioned so tools can rely on it::

    {"version": 1,
     "nodes":    {name: {type: {"capacity", "allocated", "free"}}},
     "backends": {name: {"held": bool, "pod": key|null, "attributes": {...}}},
     "groups":   {key: {"pods": {pod: node}, "backend": name|null}},
     "pods":     {key: {"node", "state", "group", "amounts", "backend"}},
     "queue":    [{"group", "position", "priority", "pods", "runtime",
                   "waiting_seconds", "reserved", "start", "starts_in", "note"}]}

The queue lists the groups the ledger has matched and keeps waiting, in order,
then the gated groups the queue could not match yet (a quorum still missing, a
PodGroup not there, a back-off after a gang timeout): their position is null
and their note says why.

Built from copies taken under short locks, so reading it never holds up a match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from scheduler_extender.gated_queue import Waiting

VERSION = 1


def snapshot(graph: ClusterGraph, ledger: Ledger, gated: Sequence[Waiting] = ()) -> dict[str, Any]:
    holdings = ledger.holdings()
    nodes = graph.node_usage()
    held = graph.backend_usage()
    holder: dict[str, str] = {}
    for h in holdings.values():
        for d in h.devices:
            holder[d.name] = h.pod
    backends = {
        b.name: {
            "held": held.get(b.name, False),
            "pod": holder.get(b.name),
            "attributes": dict(b.attributes),
        }
        for b in graph.backends().values()
    }
    groups: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    for key, h in sorted(holdings.items()):
        be = h.backend.name if h.backend else None
        pods[key] = {
            "node": h.node or None,
            "state": h.state,
            "group": h.group or None,
            "amounts": dict(h.amounts),
            "backend": be,
        }
        if h.group:
            g = groups.setdefault(h.group, {"pods": {}, "backend": None})
            g["pods"][key] = h.node or None
            g["backend"] = g["backend"] or be
    return {
        "version": VERSION,
        "nodes": nodes,
        "backends": backends,
        "groups": groups,
        "pods": pods,
        "queue": queue_listing(ledger, gated),
    }


def queue_listing(ledger: Ledger, gated: Sequence[Waiting]) -> list[dict[str, Any]]:
    listing = ledger.waiting()
    matched = {w["group"] for w in listing}
    reasons = {w.group: w.reason for w in gated}
    for entry in listing:
        # Not reserved: the queue's own reason says more (the nodes kept off for now).
        if not entry["reserved"] and reasons.get(entry["group"]):
            entry["note"] = reasons[entry["group"]]
    for w in gated:
        if w.group not in matched:
            listing.append(
                {
                    "group": w.group,
                    "position": None,
                    "priority": None,
                    "pods": w.pods,
                    "runtime": None,
                    "waiting_seconds": None,
                    "reserved": False,
                    "start": None,
                    "starts_in": None,
                    "note": w.reason,
                }
            )
    return listing
