"""Volume node affinity: the nodes a pod's bound volumes can be reached from.

A PersistentVolume may say which nodes reach it (``spec.nodeAffinity.required``: a local
disk, a zonal volume), and kube-scheduler's VolumeBinding filter refuses a pod on a node
one of its bound claims' volumes does not admit. The queue pins pods to nodes, so it
keeps to the same rule. Claims not bound yet (``WaitForFirstConsumer``, or a claim that
does not exist) are left to kube-scheduler, which binds or provisions them for the node
the pod is pinned to, or refuses it (the gang timeout then requeues the group).
"""

from __future__ import annotations

from collections.abc import Callable

from fluence.node_rules import term_admits
from fluence.pods import Node, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod

ClaimOf = Callable[[str], PersistentVolumeClaim | None]
"""``namespace/name`` -> the claim, if the cluster has it."""
VolumeOf = Callable[[str], PersistentVolume | None]
"""Name -> the volume, if the cluster has it."""


def volume_terms(pod: Pod, claim_of: ClaimOf, volume_of: VolumeOf) -> list[list[NodeSelectorTerm]]:
    """Per bound volume of the pod with a node affinity: its terms (any one admits a node)."""
    out = []
    for v in pod.spec.volumes:
        source = v.persistent_volume_claim
        if source is None or not source.claim_name:
            continue
        claim = claim_of(f"{pod.metadata.namespace}/{source.claim_name}")
        if claim is None or not claim.spec.volume_name:
            continue
        volume = volume_of(claim.spec.volume_name)
        affinity = volume.spec.node_affinity if volume is not None else None
        if affinity is not None and affinity.required is not None:
            out.append(affinity.required.node_selector_terms)
    return out


def unreachable(node: Node, terms: list[list[NodeSelectorTerm]]) -> bool:
    """Does one of the volumes (its terms) not admit ``node``?"""
    return any(not any(term_admits(t, node) for t in volume) for volume in terms)
