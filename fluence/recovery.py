"""Startup recovery: the graph and the ledger rebuilt from what the API server says.

The extender keeps no state of its own on disk. After a start or a restart the
reflectors list every Node and Pod; the graph is built from the nodes and every
pod is observed, so bound pods' allocation records are replayed and other
schedulers' pods are accounted, before the extender answers a scheduling call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.reflectors import ClusterReflectors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    """What a recovery found: counts for the log line and for tests."""

    nodes: int
    pods: int
    holdings: int


def recover_from_cluster(
    reflectors: ClusterReflectors, graph: ClusterGraph, ledger: Ledger
) -> Recovered:
    """Take the synced reflectors' nodes and pods into the graph and the ledger."""
    lost = graph.reset_nodes(reflectors.nodes.items())
    ledger.drop_lost(lost)
    pods = reflectors.pods.items()
    for pod in pods:
        ledger.observe(pod)
    # Records name gang members that were still pending; those gone since hold nothing.
    ledger.drop_absent({pod.key for pod in pods})
    recovered = Recovered(len(graph.node_names()), len(pods), len(ledger.holdings()))
    log.info(
        "ledger rebuilt from the cluster",
        extra={"nodes": recovered.nodes, "pods": recovered.pods, "holdings": recovered.holdings},
    )
    return recovered
