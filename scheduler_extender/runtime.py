"""Wiring the shared reflectors to the graph and the ledger, and the startup rebuild.

Startup: the reflectors list everything; then the graph is built from the
nodes, every pod is observed (bound pods' records replayed, foreign pods
accounted), and only then is the extender ready. From there on every watch
event flows into the graph (nodes) or the ledger (pods), which also keeps a
standby replica's ledger current.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from pathlib import Path
from typing import Any

from fluence import resources
from fluence.cluster import DELETED, ClusterCache
from fluence.graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import Node, Pod

log = logging.getLogger(__name__)


def freeze_startup_heap() -> None:
    """Keep what startup built (graph JGF, caches, ledger) out of later garbage collections.

    Python's full collections walk every tracked object; with a 5,000-node graph
    loaded they took 80-230 ms, stalling whatever filter ran into one.
    Frozen, the startup objects are skipped: 36-60 ms (bench/extender.py).
    :func:`thaw_heap` undoes it at shutdown, so everything is released in order.
    """
    gc.collect()
    gc.freeze()


def thaw_heap() -> None:
    gc.unfreeze()
    gc.collect()


class Runtime:
    def __init__(self, cache: ClusterCache, graph: ClusterGraph, ledger: Ledger) -> None:
        self.cache = cache
        self.graph = graph
        self.ledger = ledger
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        cache.nodes.add_handler(self._on_node)
        cache.pods.add_handler(self._on_pod)

    def rebuild(self) -> None:
        """Take the synced caches into the graph and ledger; then follow the watch."""
        with self._lock:
            lost = self.graph.reset_nodes(self.cache.nodes.items())
            self.ledger.drop_lost(lost)
            pods = self.cache.pods.items()
            for pod in pods:
                self.ledger.observe(pod)
            self._started = True
        log.info(
            "ledger rebuilt from the cluster",
            extra={
                "nodes": len(self.graph.node_names()),
                "pods": len(pods),
                "holdings": len(self.ledger.holdings()),
            },
        )
        self.ready.set()

    def _on_node(self, kind: str, node: Node) -> None:
        with self._lock:
            if not self._started:
                return
            if kind == DELETED:
                self.graph.delete_node(node.name)
                return
            lost = self.graph.upsert_node(node)
            self.ledger.drop_lost(lost)
            self.ledger.retry_unaccounted()

    def _on_pod(self, kind: str, pod: Pod) -> None:
        with self._lock:
            if not self._started:
                return
            if kind == DELETED:
                self.ledger.forget(pod.key)
            else:
                self.ledger.observe(pod)


class ConfigWatcher:
    """Reloads the resources config when its file changes (a ConfigMap update)."""

    def __init__(self, path: str, graph: ClusterGraph, ledger: Ledger) -> None:
        self.path = path
        self.graph = graph
        self.ledger = ledger
        self._stamp = self._current()

    def _current(self) -> Any:
        try:
            st = os.stat(self.path)
            return (st.st_mtime_ns, st.st_size, Path(self.path).resolve())
        except OSError:
            return None

    def check(self) -> bool:
        stamp = self._current()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            config = resources.load(self.path)
        except (resources.ResourcesConfigError, OSError) as exc:
            log.error(
                "resources config change ignored: it cannot be used",
                extra={"path": self.path, "error": str(exc)},
            )
            return False
        lost = self.graph.set_config(config)
        self.ledger.drop_lost(lost)
        log.info("resources config reloaded", extra={"path": self.path, "types": config.types()})
        return True
