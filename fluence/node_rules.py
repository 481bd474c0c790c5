"""Which nodes a pod may use by kube-scheduler's node rules that fluence can check in advance.

Cordons, taints and tolerations, nodeSelector, required node affinity, and
the node's allocatable amount of resources the graph does not hold per node
(extended resources such as the device plugin's ``fluxion.flux-framework.org/*``):
a pod the queue pins to a node these rule out would be refused there by
kube-scheduler, so the graph never offers it such a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from fluence import names
from fluence.pods import (
    LabelSelectorRequirement,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    QuantityError,
    parse_quantity,
)

GRAPH_RESOURCES = frozenset((names.RESOURCE_CPU, names.RESOURCE_MEMORY, names.RESOURCE_GPU))
"""Resources the graph holds per node: Fluxion's match already keeps within them."""

TAINT_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep new pods off a node (PreferNoSchedule only discourages)."""


def schedulable(node: Node) -> bool:
    """Cordoned nodes take no new pods from anyone."""
    return not node.spec.unschedulable


def untolerated(node: Node, pod: Pod) -> bool:
    """Does the node carry a NoSchedule/NoExecute taint this pod does not tolerate?"""
    return any(t.effect in TAINT_EFFECTS and not pod.tolerates(t) for t in node.spec.taints)


def unselected(node: Node, pod: Pod) -> bool:
    """Does the pod's nodeSelector or required node affinity rule this node out?"""
    labels = node.metadata.labels
    if any(labels.get(k) != v for k, v in pod.spec.node_selector.items()):
        return True
    terms = required_terms(pod)
    return terms is not None and not any(term_admits(t, node) for t in terms)


def required_terms(pod: Pod) -> list[NodeSelectorTerm] | None:
    """The pod's required node affinity terms (any one must admit a node); None: no such rule."""
    affinity = pod.spec.affinity
    required = affinity.node_affinity.required if affinity and affinity.node_affinity else None
    if required is None or not required.node_selector_terms:
        return None
    return required.node_selector_terms


def term_admits(term: NodeSelectorTerm, node: Node) -> bool:
    """All of a term's requirements hold (an empty term admits nothing, as kube-scheduler's)."""
    if not term.match_expressions and not term.match_fields:
        return False
    labels = node.metadata.labels
    fields = {names.NODE_NAME_FIELD: node.name}
    return all(requirement_holds(r, labels) for r in term.match_expressions) and all(
        r.key in fields and requirement_holds(r, fields) for r in term.match_fields
    )


def requirement_holds(
    r: NodeSelectorRequirement | LabelSelectorRequirement, values: Mapping[str, str]
) -> bool:
    """Does one selector requirement hold for ``values`` (labels, or a node's fields)?
    Label selectors have no ``Gt``/``Lt``: :func:`fluence.pod_affinity.selects` keeps
    them out."""
    have = values.get(r.key)
    if r.operator == "In":
        return have is not None and have in r.values
    if r.operator == "NotIn":
        return have is None or have not in r.values
    if r.operator == "Exists":
        return have is not None
    if r.operator == "DoesNotExist":
        return have is None
    if r.operator in ("Gt", "Lt") and have is not None and len(r.values) == 1:
        try:
            mine, theirs = int(have), int(r.values[0])
        except ValueError:
            return False
        return mine > theirs if r.operator == "Gt" else mine < theirs
    return False


def unmodelled_requests(pod: Pod) -> dict[str, Decimal]:
    """What the pod asks of its node beyond the graph's resources, as kube-scheduler sums it
    (containers added, each init container on its own, a limit standing in for a request)."""
    total: dict[str, Decimal] = {}
    for c in pod.spec.containers:
        for name, q in _asked(c.resources.requests, c.resources.limits).items():
            total[name] = total.get(name, Decimal(0)) + q
    for c in pod.spec.init_containers:
        for name, q in _asked(c.resources.requests, c.resources.limits).items():
            total[name] = max(total.get(name, Decimal(0)), q)
    return {n: q for n, q in total.items() if q > 0}


def _asked(
    requests: Mapping[str, str | int | float], limits: Mapping[str, str | int | float]
) -> dict[str, Decimal]:
    raw = {**limits, **requests}
    out = {}
    for name, q in raw.items():
        if name in GRAPH_RESOURCES:
            continue
        try:
            out[name] = parse_quantity(q)
        except QuantityError:
            out[name] = Decimal("Infinity")  # the API server admits none: nothing can hold it
    return out


def allocatable(node: Node, name: str) -> Decimal:
    """How much of resource ``name`` the node offers pods (0 when it says nothing)."""
    have = node.status.allocatable or node.status.capacity
    try:
        return parse_quantity(have.get(name, 0))
    except QuantityError:
        return Decimal(0)


def short_of(node: Node, asked: Mapping[str, Decimal]) -> bool:
    """Does the node's allocatable lack some of ``asked`` (:func:`unmodelled_requests`)?"""
    have = node.status.allocatable or node.status.capacity
    for name, q in asked.items():
        try:
            if parse_quantity(have.get(name, 0)) < q:
                return True
        except QuantityError:
            return True
    return False
