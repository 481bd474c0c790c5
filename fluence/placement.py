"""Allocation -> which node each pod gets, and which backend the group got.

A compute match holds one slot shape for ``count`` pods; the matcher reports
per-node totals, so each node's total divided by one slot's amount is the
number of member pods that node takes. Every member gets its own node this
way (the Go fluence only checked set membership, so Kubernetes could pack
pods differently from Fluxion). A device match lands on one top-level virtual
vertex: its name is the backend and its ``fluxion.flux-framework.org/<k>=<v>``
properties are the attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fluence import names
from fluence.group_jobspec import Shape
from fluxion_nb.graph import Allocation


class PlacementError(RuntimeError):
    """An allocation does not decompose into whole pods; a matcher fault worth reporting."""


@dataclass(frozen=True)
class BackendChoice:
    name: str
    path: str
    attributes: Mapping[str, str]


def slots_per_node(by_node: Mapping[str, Mapping[str, int]], shape: Shape, count: int) -> list[str]:
    """One node name per slot, in the matcher's node order; checks the totals add up."""
    if not shape:
        return []
    per_slot = dict(shape)
    out: list[str] = []
    for node, held in by_node.items():
        counts = {held.get(t, 0) // n for t, n in per_slot.items() if n > 0}
        exact = all(held.get(t, 0) % n == 0 for t, n in per_slot.items() if n > 0)
        if len(counts) != 1 or not exact:
            raise PlacementError(
                f"node {node} holds {dict(held)}, which is not a whole number of slots {per_slot}"
            )
        out += [node] * counts.pop()
    if len(out) != count:
        raise PlacementError(f"the allocation holds {len(out)} slots, {count} were asked for")
    return out


def assign(pods: Sequence[str], nodes: Sequence[str]) -> dict[str, str]:
    """Pair pods (keys, in a stable order) with slot nodes."""
    if len(pods) != len(nodes):
        raise PlacementError(f"{len(pods)} pods but {len(nodes)} slots")
    return dict(zip(sorted(pods), nodes, strict=True))


def backends_of(alloc: Allocation) -> list[BackendChoice]:
    """Each ``virtual=true`` node vertex of a device allocation, in the matcher's order, with
    its attributes: a pod asking for two qpus gets two backends."""
    return [
        BackendChoice(v.name, v.path, attributes_of(v.properties))
        for v in alloc.vertices
        if v.type == "node" and names.PROPERTY_VIRTUAL_TRUE in v.properties
    ]


def attributes_of(properties: Mapping[str, str]) -> dict[str, str]:
    """``fluxion.flux-framework.org/<k>=<v>`` property keys -> {k: v} (``backend`` included)."""
    out: dict[str, str] = {}
    for key in properties:
        if key.startswith(names.PROPERTY_ATTR_PREFIX) and "=" in key:
            k, v = key[len(names.PROPERTY_ATTR_PREFIX) :].split("=", 1)
            out[k] = v
    return dict(sorted(out.items()))
