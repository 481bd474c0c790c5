"""Wiring the shared reflectors to the graph and the ledger, after startup recovery.

Startup: the reflectors list everything; then :func:`fluence.startup_rebuild.recover_from_cluster`
builds the graph and the ledger, and only then is the extender ready. From there
on every watch event flows into the graph (nodes) or the ledger (pods), which
also keeps a standby replica's ledger current.
"""

from __future__ import annotations

import gc
import logging
import threading
from pathlib import Path

from fluence.cluster_graph import ClusterGraph, GraphUpdateError
from fluence.config_watch import ConfigWatcher
from fluence.ledger import Ledger
from fluence.pods import Node, Pod
from fluence.reflectors import DELETED, ClusterReflectors
from fluence.startup_rebuild import recover_from_cluster
from fluence.untrusted import UntrustedObjects, node_ref, pod_ref

log = logging.getLogger(__name__)


def freeze_startup_heap() -> None:
    """Keep what startup built (graph JGF, caches, ledger) out of later garbage collections.

    Python's full collections walk every tracked object, and a large graph makes
    them long enough to stall whatever filter runs into one; frozen, the startup
    objects are skipped (docs/performance.md has the figures).
    :func:`thaw_heap` undoes it at shutdown, so everything is released in order.
    """
    gc.collect()
    gc.freeze()


def thaw_heap() -> None:
    gc.unfreeze()
    gc.collect()


class ClusterWatch:
    """The graph and the ledger rebuilt at start, then kept current by the watch."""

    def __init__(
        self,
        cache: ClusterReflectors,
        graph: ClusterGraph,
        ledger: Ledger,
        skipped: UntrustedObjects | None = None,
    ) -> None:
        self.cache = cache
        self.graph = graph
        self.ledger = ledger
        self.skipped = skipped if skipped is not None else UntrustedObjects()
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        cache.nodes.add_handler(self._on_node)
        cache.pods.add_handler(self._on_pod)

    def rebuild(self) -> None:
        """Recover the graph and ledger from the synced reflectors; then follow the watch."""
        with self._lock:
            recover_from_cluster(self.cache, self.graph, self.ledger, self.skipped)
            self._started = True
        self.ready.set()

    def _on_node(self, kind: str, node: Node) -> None:
        with self._lock:
            if not self._started:
                return
            if kind == DELETED:
                self.graph.delete_node(node.name)
                return
            try:
                lost = self.graph.upsert_node(node)
            except GraphUpdateError as exc:
                log.error("node change not applied", extra={"node": node.name, "error": str(exc)})
                return
            except Exception as exc:  # noqa: BLE001 - one node's fault stays with it
                self.skipped.report(node_ref(node.name, node.metadata.uid), "failed", repr(exc))
                return
            self.ledger.drop_lost(lost)
            self.ledger.retry_unaccounted()

    def _on_pod(self, kind: str, pod: Pod) -> None:
        with self._lock:
            if not self._started:
                return
            meta = pod.metadata
            about = pod_ref(meta.namespace, meta.name, meta.uid)
            if kind == DELETED:
                self.skipped.each(about, pod.key, self.ledger.forget)
            else:
                self.skipped.each(about, pod, self.ledger.observe)


class ConfigReloader:
    """Applies a changed resources config file (a ConfigMap update) to the graph."""

    def __init__(self, path: str, graph: ClusterGraph, ledger: Ledger) -> None:
        self.graph = graph
        self.ledger = ledger
        self.watcher = ConfigWatcher(Path(path))
        self.watcher.poll()  # the config the graph was built with

    def check(self) -> bool:
        config = self.watcher.poll()
        if config is None:
            return False
        try:
            lost = self.graph.set_config(config)
        except GraphUpdateError as exc:
            log.error(
                "resources config change not applied; the previous one stays in force",
                extra={"path": str(self.watcher.path), "error": str(exc)},
            )
            return False
        self.ledger.drop_lost(lost)
        log.info(
            "resources config reloaded",
            extra={"path": str(self.watcher.path), "types": config.types()},
        )
        return True
