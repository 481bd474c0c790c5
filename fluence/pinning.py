"""The one write that releases a gated pod to kube-scheduler, pinned to its node.

A JSON Patch of the pod: the allocation annotations (sealed record, backend,
a QRMI acquisition's token and the finalizer that holds it) go on, the pod's
required node affinity is narrowed to the node Fluxion chose (``metadata.name
In [node]`` added to every term, which the API server allows on a gated pod),
and the queue's gate comes off, all at once: kube-scheduler never sees the
pod ungated without its node. ``test`` ops make the patch fail rather than
apply to a recreated pod or to a gate list that changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fluence import names
from fluence.json_patch import PatchBuilder, PatchOp
from fluence.pods import NodeSelectorTerm, Pod

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pin(node: str) -> dict[str, object]:
    """The node selector requirement that admits ``node`` alone."""
    return {"key": names.NODE_NAME_FIELD, "operator": "In", "values": [node]}


def release_ops(
    pod: Pod, node: str, annotations: Mapping[str, str], finalizers: Sequence[str] = ()
) -> list[PatchOp]:
    """The patch that releases ``pod`` (gated by the queue) to ``node``, adding ``finalizers``.

    ValueError when the pod does not carry the queue's gate: it is not the queue's
    to release.
    """
    gates = [g.name for g in pod.spec.scheduling_gates]
    if names.QUEUE_GATE not in gates:
        raise ValueError(f"pod {pod.key} is not gated by {names.QUEUE_GATE}")
    index = gates.index(names.QUEUE_GATE)
    patch = PatchBuilder()
    patch.ops.append({"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid})
    for key, value in sorted(annotations.items()):
        patch.put("/metadata/annotations", bool(pod.metadata.annotations), key, value)
    for finalizer in finalizers:
        if finalizer not in pod.metadata.finalizers:
            patch.append("/metadata/finalizers", bool(pod.metadata.finalizers), finalizer)
    if node:  # a pod that asks for nothing held has no node to keep to
        _narrow(pod, node, patch)
    gate = f"/spec/schedulingGates/{index}"
    patch.ops.append({"op": "test", "path": gate, "value": {"name": names.QUEUE_GATE}})
    patch.ops.append({"op": "remove", "path": gate})
    return patch.ops


def _narrow(pod: Pod, node: str, patch: PatchBuilder) -> None:
    only = {"nodeSelectorTerms": [{"matchFields": [pin(node)]}]}
    affinity = pod.spec.affinity
    if affinity is None:
        patch.add("/spec/affinity", {"nodeAffinity": {REQUIRED: only}})
        return
    if affinity.node_affinity is None:
        patch.add("/spec/affinity/nodeAffinity", {REQUIRED: only})
        return
    required = affinity.node_affinity.required
    base = f"/spec/affinity/nodeAffinity/{REQUIRED}"
    if required is None or not required.node_selector_terms:
        patch.add(base, only)
        return
    for i, term in enumerate(required.node_selector_terms):
        if _matches_nothing(term):
            continue  # an empty term admits no node, and may not be added to
        path = f"{base}/nodeSelectorTerms/{i}/matchFields"
        patch.append(path, bool(term.match_fields), pin(node))


def _matches_nothing(term: NodeSelectorTerm) -> bool:
    return not term.match_expressions and not term.match_fields
