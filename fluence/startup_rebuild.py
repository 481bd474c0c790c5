"""Startup rebuild: the graph and the ledger made again from what the API server says.

The extender keeps no state of its own on disk. After a start or a restart the
reflectors list every Node and Pod; the graph is built from the nodes and every
pod is observed, so bound pods' allocation records are replayed and other
schedulers' pods are accounted, before the extender answers a scheduling call.
Each object is taken in on its own: one that fails is reported and skipped, so
no tenant's object can keep the extender from becoming ready.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.reflectors import ClusterReflectors
from fluence.untrusted import UntrustedObjects, node_ref, pod_ref

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    """What a recovery found: counts for the log line and for tests."""

    nodes: int
    pods: int
    holdings: int


def recover_from_cluster(
    reflectors: ClusterReflectors,
    graph: ClusterGraph,
    ledger: Ledger,
    skipped: UntrustedObjects | None = None,
) -> Recovered:
    """Take the synced reflectors' nodes and pods into the graph and the ledger."""
    skipped = skipped if skipped is not None else UntrustedObjects()
    nodes = reflectors.nodes.items()
    try:
        lost = graph.reset_nodes(nodes)
    except Exception:  # noqa: BLE001 - find the node at fault, keep the others
        log.warning("the graph could not be built from all nodes at once; adding them one by one")
        lost = graph.reset_nodes([])
        for node in nodes:
            skipped.each(node_ref(node.name, node.metadata.uid), node, graph.upsert_node)
    ledger.drop_lost(lost)
    pods = reflectors.pods.items()
    # Sealed records first: what this scheduler placed is held before any pod that only
    # names a backend (and might name someone else's) is taken in.
    for pod in sorted(pods, key=lambda p: not ledger.sealed(p)):
        meta = pod.metadata
        skipped.each(pod_ref(meta.namespace, meta.name, meta.uid), pod, ledger.observe)
    # Records name gang members that were still pending; those gone since hold nothing.
    ledger.drop_absent({pod.key for pod in pods})
    recovered = Recovered(len(graph.node_names()), len(pods), len(ledger.holdings()))
    log.info(
        "ledger rebuilt from the cluster",
        extra={"nodes": recovered.nodes, "pods": recovered.pods, "holdings": recovered.holdings},
    )
    return recovered
