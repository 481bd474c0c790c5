"""The cluster as a Fluxion resource graph, kept in step with the API server.

How nodes and configured resources become vertices is :mod:`fluence.graph_layout`;
a node's topology labels put it under zone and rack vertices, so jobspecs may
ask for one rack holding a whole gang (:meth:`ClusterGraph.domains` lists them).

Live updates without restart: a new node is attached as a subgraph; a deleted
node is removed (or marked down until the jobs on it end); a cordoned node is
marked down; a node whose allocatable or topology labels changed, or a new
resources config, makes
the graph rebuild and replay every held job (jobs that no longer fit are
reported back to the caller).

Time. The graph's clock counts seconds since it was made; matches are made at
:meth:`ClusterGraph.now`. A job may be held for an expected runtime, so the
planner knows when its capacity frees and a waiting group can be *reserved*
there (:meth:`ClusterGraph.reserve`). A pod that outlives its estimate keeps
its capacity: before every match, jobs that reached their planned end are
held on a little longer (1 s, then twice as long each time, up to
:data:`EXTENSION`), and the reservations (which may sit on that capacity) are
dropped for their owner to make again.

This unit owns the matcher graph and every job held on it. Of a pod it asks only
which nodes it may use (:mod:`fluence.node_rules`); groups, holdings and the
queue are the scheduling core's, which maps them onto jobs.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fluence.graph_layout import (
    CLUSTER,
    Backend,
    GraphLayout,
    jgf_text,
    level_type,
    virtual_names,
)
from fluence.group_jobspec import JobspecError, with_duration
from fluence.node_rules import (
    TAINT_EFFECTS,
    required_terms,
    schedulable,
    short_of,
    unmodelled_requests,
    unselected,
    untolerated,
)
from fluence.pods import (
    COMPUTE_TYPES,
    CORE,
    GPU,
    MEMORY,
    Node,
    Pod,
    QuantityError,
    node_capacity,
    parse_quantity,
)
from fluence.resources import ResourcesConfig
from fluxion_nb import Graph
from fluxion_nb.errors import InputError, NotFoundError, StateError
from fluxion_nb.graph import Allocation, MatchOp
from fluxion_nb.jobspec import to_json

log = logging.getLogger(__name__)

PARTIAL_POOLS = frozenset({CORE, MEMORY, GPU})
HOLD_DURATION = 3153600000
"""How long a ``duration: 0`` job is held: the graph's whole horizon (until cancelled)."""
EXTENSION = 10
"""The most seconds a job that reached its planned end is held on for at once.

Short, because it is a guess: while a job overruns, only groups expected to end
within this much may be placed on capacity a reservation waits for."""
FIRST_EXTENSION = 1
"""Seconds of a job's first hold-on; each next one doubles, up to :data:`EXTENSION`.

Most overruns are the moment between a deadline and the kubelet ending the pod: a
reservation behind one moves by about that moment, not by a whole :data:`EXTENSION`."""
PROBE_JOBS = 1 << 61
"""Job ids from here up are probes, cancelled at once: far above any id the holdings
store gives. The first is a what-if reservation's (:data:`WHAT_IF_JOB`), the next ones
the matches of :meth:`ClusterGraph.fits_now`."""
WHAT_IF_JOB = PROBE_JOBS
SATISFIABLE_KEPT = 1024
"""Answers of the empty copy kept (distinct jobspecs asked since the nodes last changed)."""
DEFAULT_TOPOLOGY_KEYS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/rack")
"""Node label keys that become graph levels, outermost first."""


class GraphUpdateError(ValueError):
    """A change of nodes or config could not be applied; the graph is as it was before."""


@dataclass(frozen=True)
class HeldJob:
    """What one job holds, replayable on a rebuilt graph.

    Either the vertex amounts it was given (``holdings``: path -> units) or,
    for a matched job kept as it is, the R the match wrote.
    """

    holdings: Mapping[str, int] | None = None
    R: str | None = None
    end: int = HOLD_DURATION
    """Graph time its capacity is planned to free (the horizon: when it is released)."""
    extensions: int = 0
    """How many times it was held on past its planned end."""

    def extended(self, now: int) -> HeldJob:
        """Held on from ``now``: 1 s the first time, twice the last each next time."""
        step = min(EXTENSION, FIRST_EXTENSION << min(self.extensions, 8))
        return replace(self, end=now + step, extensions=self.extensions + 1)


class ClusterGraph:
    """Owner of capacity: the matcher graph, its vertex index, and every job held on it.

    Thread-safe; every public method takes the same lock, so a caller that needs
    several steps to be atomic (match, then split into per-pod jobs) holds
    :attr:`lock` around them.
    """

    def __init__(
        self,
        config: ResourcesConfig,
        nodes: Iterable[Node] = (),
        *,
        policy: str = "first",
        topology: Iterable[str] = DEFAULT_TOPOLOGY_KEYS,
        clock: Callable[[], float] = time.monotonic,
        device_backed: Callable[[], Collection[str]] = tuple,
    ) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.device_backed = device_backed
        """Extended resources DeviceClasses back: kube-scheduler allocates devices for them
        on a node whose allocatable lacks them, so such a node is not short of them."""
        self._epoch = clock()
        self._ends: list[tuple[int, int]] = []
        """(planned end, job id) of every job that ends before the horizon: a min-heap."""
        self._reserved: dict[int, Allocation] = {}
        self.reservations_dropped = 0
        """Counts the times every reservation was dropped (a rebuild, a job held on)."""
        self.policy = policy
        self.topology_keys = tuple(topology)
        """Node label keys that are graph levels, outermost first."""
        types = [level_type(k) for k in self.topology_keys]
        if len(set(types)) != len(types) or set(types) & {CLUSTER, "node", *COMPUTE_TYPES}:
            raise ValueError(
                f"topology keys {list(self.topology_keys)} give level types {types}: each must "
                "end in its own name, other than cluster, node, core, memory or gpu"
            )
        self._config = config
        self._known_types = frozenset(config.types())
        self._jobs: dict[int, HeldJob] = {}
        self._job_nodes: dict[int, str] = {}
        self._rebuild({n.name: n for n in nodes})

    @property
    def config(self) -> ResourcesConfig:
        """The resources config the graph is built from now."""
        return self._config

    # ---- building ----------------------------------------------------------------------

    def _rebuild(self, nodes: Mapping[str, Node]) -> list[int]:
        """Build a fresh graph from ``nodes`` and the config, replay held jobs; return lost ones.

        All or nothing: when the new graph cannot be built (a resource named like
        a node, say), everything stays as it was and GraphUpdateError says why.
        """
        saved = {k: getattr(self, k) for k in self._STATE if hasattr(self, k)}
        saved["_jobs"] = dict(self._jobs)
        saved["_job_nodes"] = dict(self._job_nodes)
        try:
            return self._rebuild_unsafe(nodes)
        except (InputError, ValueError) as exc:
            for k, v in saved.items():
                setattr(self, k, v)
            raise GraphUpdateError(f"the cluster graph was left as it was: {exc}") from exc

    _STATE = ("_layout", "_nodes", "_tainted", "_backends", "jgf", "_empty", "_g")

    def _rebuild_unsafe(self, nodes: Mapping[str, Node]) -> list[int]:
        layout = GraphLayout(self._config, self.topology_keys)
        self._layout = layout
        self._nodes = layout.nodes
        self._backends = layout.backends
        self.jgf = layout.jgf
        self._tainted: set[str] = set()
        self._names: tuple[Any, list[str]] = ((), [])
        self._domain_cache: dict[str, tuple[Any, dict[str, list[str]]]] = {}
        """Per level: (the nodes' state it was built from, its domains)."""
        self._moves = getattr(self, "_moves", 0) + 1
        virtual = virtual_names(self._config)
        for name in sorted(nodes):
            if name in virtual:
                log.error(
                    "node has the name of a configured resource; it is left out of the graph",
                    extra={"node": name},
                )
                continue
            layout.add_node(nodes[name])
            self._index_taints(nodes[name])
        layout.add_virtual_resources()
        self._empty: Graph | None = None
        self._fits_empty: tuple[Graph | None, dict[str, bool]] = (None, {})
        """The empty copy and, per jobspec text, whether it fits there."""
        self._g = Graph(
            jgf_text(self.jgf),
            policy=self.policy,
            partial_pools=set(PARTIAL_POOLS),
            keep_canceled=False,
            remember_failures=True,
        )
        for nv in self._nodes.values():
            if nv.down:
                self._g.set_status(nv.path, False)
        lost: list[int] = []
        self._drop_reservations()
        now = self.now()
        for jobid, held in list(self._jobs.items()):
            try:
                # The past does not matter to a match made now: replay from now on.
                end = max(held.end, now + 1)
                self._replay(jobid, held, now, end)
                if end != held.end:
                    self._jobs[jobid] = replace(held, end=end)
                    heapq.heappush(self._ends, (end, jobid))
            except (StateError, NotFoundError) as exc:
                log.warning(
                    "held job no longer fits the rebuilt graph; releasing it",
                    extra={"jobid": jobid, "error": str(exc)},
                )
                lost.append(jobid)
                del self._jobs[jobid]
                self._job_nodes.pop(jobid, None)
        return lost

    def level_of(self, key: str) -> str:
        """The graph level (vertex type) of topology key ``key``; JobspecError if none."""
        if key not in self.topology_keys:
            raise JobspecError(
                f"topology key {key!r} is not a level of the cluster graph "
                f"({', '.join(self.topology_keys) or 'none configured'}); "
                "set FLUENCE_TOPOLOGY_KEYS to include it"
            )
        return level_type(key)

    def level_types(self) -> list[str]:
        """The graph's level types, outermost first (``["zone", "rack"]``)."""
        return [level_type(k) for k in self.topology_keys]

    def domains(self, level: str) -> dict[str, list[str]]:
        """The nodes in each vertex of type ``level``, by its path (nodes without it: none).

        Cached until a node is added, removed or moved.
        """
        with self.lock:
            key = (id(self._nodes), len(self._nodes), self._moves)
            cached = self._domain_cache.get(level)
            if cached is not None and cached[0] == key:
                return cached[1]
            found: dict[str, list[str]] = {}
            for name, nv in sorted(self._nodes.items()):
                if nv.node is None or nv.deleted:
                    continue
                parts = nv.path.split("/")  # "", cluster, level values..., node
                levels = self.level_path(nv.node)
                for depth, (typ, _) in enumerate(levels):
                    if typ == level:
                        found.setdefault("/".join(parts[: depth + 3]), []).append(name)
                        break
            self._domain_cache[level] = (key, found)
            return found

    def capacity_of(self, nodes: Iterable[str]) -> dict[str, int]:
        """The summed pool sizes (core, memory, gpu) of ``nodes``."""
        with self.lock:
            total: dict[str, int] = {}
            for name in nodes:
                nv = self._nodes.get(name)
                for t, p in nv.pools.items() if nv is not None else ():
                    total[t] = total.get(t, 0) + p.size
            return total

    def level_path(self, node: Node) -> list[tuple[str, str]]:
        """(type, label value) of each topology level the node has, outermost first."""
        return self._layout.level_path(node)

    # ---- live updates ------------------------------------------------------------------

    def upsert_node(self, node: Node) -> list[int]:
        """Add or update a node; returns jobids dropped because they no longer fit."""
        with self.lock:
            nv = self._nodes.get(node.name)
            if nv is None or nv.deleted:
                if nv is not None:
                    return self._rebuild(self._live_nodes() | {node.name: node})
                path = f"/{CLUSTER}/{node.name}"
                if path in self._backends:
                    raise GraphUpdateError(
                        f"node {node.name!r} has the name of a configured resource ({path}); "
                        "it is left out of the graph until one of them is renamed"
                    )
                sub = self._layout.add_node(node)
                self._moves += 1
                self._index_taints(node)
                self._g.attach(jgf_text(sub))
                self._drop_reservations()  # they may start earlier on the new node
                self._empty = None
                if self._nodes[node.name].down:
                    self._g.set_status(self._nodes[node.name].path, False)
                return []
            old = nv.node
            moved = old is not None and self.level_path(old) != self.level_path(node)
            if node_capacity(node) != nv.capacity or moved:
                nodes = self._live_nodes()
                nodes[node.name] = node
                return self._rebuild(nodes)
            nv.node = node
            self._index_taints(node)
            down = not schedulable(node)
            if down != nv.down:
                nv.down = down
                self._drop_reservations()  # some may sit on it, or start earlier now
                self._g.set_status(nv.path, not down)
            return []

    def delete_node(self, name: str) -> None:
        """Drop a node; when pods still hold it, mark it down and drop it once they are gone."""
        with self.lock:
            nv = self._nodes.get(name)
            if nv is None:
                return
            self._drop_reservations()
            if any(n == name for n in self._job_nodes.values()):
                nv.deleted = True
                nv.down = True
                self._moves += 1
                self._g.set_status(nv.path, False)
                return
            self._remove(name)

    def _remove(self, name: str) -> None:
        self._drop_reservations()  # the matcher removes no vertex a reservation holds
        self._moves += 1
        nv = self._layout.remove_node(name)
        self._tainted.discard(name)
        self._g.remove(nv.path)
        self._empty = None

    def _index_taints(self, node: Node) -> None:
        if any(t.effect in TAINT_EFFECTS for t in node.spec.taints):
            self._tainted.add(node.name)
        else:
            self._tainted.discard(node.name)

    def _live_nodes(self) -> dict[str, Node]:
        return {n: v.node for n, v in self._nodes.items() if v.node is not None and not v.deleted}

    def reset_nodes(self, nodes: Iterable[Node]) -> list[int]:
        """Rebuild from a full node list (startup, re-list); returns jobids that no longer fit."""
        with self.lock:
            return self._rebuild({n.name: n for n in nodes})

    def busy(self) -> bool:
        """Would a match now wait for another thread (a rebuild holding the graph)?"""
        if not self.lock.acquire(blocking=False):
            return True
        self.lock.release()
        return False

    def prepare_satisfiability(self) -> None:
        """Build the empty copy the satisfiability check uses, ahead of the first failed match.

        Called off the event loop after the graph changed, so a filter does not
        pay for loading a copy of the whole graph.
        """
        with self.lock:
            if self._empty is None:
                self._empty = self._empty_copy()

    def set_config(self, config: ResourcesConfig) -> list[int]:
        """Grow or shrink the virtual resources; returns jobids that no longer fit.

        GraphUpdateError (nothing changed) when the config does not fit the cluster.
        """
        with self.lock:
            taken = sorted(virtual_names(config) & set(self._live_nodes()))
            if taken:
                raise GraphUpdateError(
                    f"resources {taken} have the names of nodes; the resources config was "
                    "not applied (rename them)"
                )
            before = self._config, self._known_types
            self._config = config
            self._known_types = frozenset(config.types())
            try:
                return self._rebuild(self._live_nodes())
            except GraphUpdateError:
                self._config, self._known_types = before
                raise

    # ---- time -------------------------------------------------------------------------

    def now(self) -> int:
        """The graph's time: whole seconds since it was made."""
        return int(self.clock() - self._epoch)

    def wall_time(self, at: int) -> float:
        """Graph time ``at`` as a Unix time (for people: "reserved from 14:05")."""
        return time.time() + (at - (self.clock() - self._epoch))

    def _replay(self, jobid: int, held: HeldJob, at: int, end: int) -> None:
        if held.holdings is not None:
            if held.holdings:
                self._g.hold(jobid, held.holdings, at=at, duration=end - at)
        else:
            assert held.R is not None
            self._g.update_allocate(jobid, held.R, at=at, duration=end - at)

    def _span(self, duration: int) -> tuple[int, int]:
        """[now, end) of a job held ``duration`` seconds from now (0: until released)."""
        now = self.now()
        if duration <= 0 or now + duration >= HOLD_DURATION:
            return now, HOLD_DURATION
        return now, now + duration

    def _track(self, jobid: int, held: HeldJob) -> None:
        self._jobs[jobid] = held
        if held.end < HOLD_DURATION:
            heapq.heappush(self._ends, (held.end, jobid))

    def hold_on(self) -> int:
        """Hold on every job that reached its planned end and is still held; returns how many.

        Such a job's pod is still running: its capacity stays taken a little
        longer (:meth:`HeldJob.extended`). Reservations may sit on that capacity, so
        all of them are dropped first (:attr:`reservations_dropped` tells their owner).
        """
        with self.lock:
            now = self.now()
            due: list[int] = []
            while self._ends and self._ends[0][0] <= now:
                end, jobid = heapq.heappop(self._ends)
                held = self._jobs.get(jobid)
                if held is not None and held.end == end:
                    due.append(jobid)
            if not due:
                return 0
            self._drop_reservations()
            for jobid in due:
                self._retime(jobid, self._jobs[jobid].extended(now), now)
            log.debug("jobs held past their planned end", extra={"jobs": len(due)})
            return len(due)

    def end_soon(self, jobids: Iterable[int]) -> int:
        """Plan ``jobids`` to end :data:`FIRST_EXTENSION` seconds from now; returns how many.

        Their pods are being evicted: the room they hold is what a preempting group
        waits for, and it should be planned (and reserved) as coming free now, not at
        the jobs' estimated ends, or groups behind could be placed into it while the
        pods go. A pod slower to go is held on as any overrun is (:meth:`hold_on`).
        """
        with self.lock:
            now = self.now()
            moved = 0
            for jobid in jobids:
                held = self._jobs.get(jobid)
                if held is None or held.end <= now + FIRST_EXTENSION:
                    continue
                self._retime(jobid, replace(held, end=now + FIRST_EXTENSION, extensions=0), now)
                moved += 1
            return moved

    def _retime(self, jobid: int, held: HeldJob, now: int) -> None:
        """Hold ``jobid`` again from ``now`` to ``held.end`` (its vertices as before)."""
        self._g.cancel(jobid, missing_ok=True)
        self._replay(jobid, held, now, held.end)
        self._track(jobid, held)

    @contextlib.contextmanager
    def without(self, jobids: Iterable[int]) -> Iterator[None]:
        """For the duration of the block, the graph as if ``jobids`` were released.

        What-if questions only (would a group fit once these pods are gone?): on
        leaving, each job is held again exactly as before. The caller holds
        :attr:`lock` and leaves the graph as it found it inside the block.
        """
        with self.lock:
            now = self.now()
            gone = [(j, self._jobs[j]) for j in jobids if j in self._jobs]
            for jobid, _ in gone:
                self._g.cancel(jobid, missing_ok=True)
            try:
                yield
            finally:
                for jobid, held in gone:
                    self._replay(jobid, held, now, max(held.end, now + 1))

    def planned_ends(self) -> dict[str, list[float]]:
        """Per node, the graph time each job held there is planned to end (inf: held until
        released)."""
        with self.lock:
            out: dict[str, list[float]] = {}
            for jobid, node in self._job_nodes.items():
                held = self._jobs.get(jobid)
                if held is not None:
                    end = math.inf if held.end >= HOLD_DURATION else float(held.end)
                    out.setdefault(node, []).append(end)
            return out

    def fits_now(self, jobspecs: Iterable[Mapping[str, Any]]) -> bool:
        """Would these jobspecs, matched one after another, all fit now? Changes nothing."""
        with self.lock:
            made: list[int] = []
            try:
                for i, js in enumerate(jobspecs):
                    jid = PROBE_JOBS + 1 + i
                    alloc = self._g.match(dict(js), "allocate", jobid=jid, now=self.now())
                    if not alloc.ok:
                        return False
                    made.append(jid)
                return True
            finally:
                for jid in made:
                    self._g.cancel(jid, missing_ok=True)

    # ---- reservations ------------------------------------------------------------------

    def reserve(self, jobspec: Mapping[str, Any], jobid: int) -> Allocation:
        """Allocate now, or else reserve at the earliest time the request fits.

        A reservation is a job in the planner that later matches made now cannot
        overlap; it is held by no pod and is dropped by :meth:`cancel_reservations`
        (or a rebuild, or :meth:`hold_on`, which the caller runs first). One that
        fits now holds the capacity from now on for the group it was made for.
        """
        with self.lock:
            now = self.now()
            alloc = self._g.match(dict(jobspec), "allocate_orelse_reserve", jobid=jobid, now=now)
            if alloc.ok:
                self._reserved[jobid] = alloc
                return alloc
            status = "busy" if self.satisfiable(jobspec) else "unsatisfiable"
            return replace(alloc, status=status)

    def reserve_open_ended(self, jobspec: Mapping[str, Any], jobid: int) -> Allocation:
        """As :meth:`reserve`, starting at the earliest time nothing is in the way for good.

        For a group whose runtime is only an estimate, which may start only where no
        reservation ahead of it begins later on the same resources: the start comes
        from a match with no end, and the vertices it chose are then reserved for
        the estimate alone, so the groups behind still plan from its expected end.
        """
        with self.lock:
            estimate = int(jobspec["attributes"]["system"].get("duration") or 0)
            # Not 0 (the rest of the horizon from now, which no later start can fit).
            alloc = self.reserve(with_duration(jobspec, HOLD_DURATION // 2), jobid)
            if not alloc.ok or estimate <= 0:
                return alloc
            self.cancel_reservations([jobid])
            booked = self._g.update_allocate(
                jobid, alloc.R, at=alloc.at, duration=estimate, reserve=alloc.at > self.now()
            )
            self._reserved[jobid] = booked
            return booked

    def reserved_nodes(self, jobids: Iterable[int]) -> set[str]:
        """The nodes the reservations ``jobids`` take part of."""
        with self.lock:
            return {n for jid in jobids if jid in self._reserved for n in self._reserved[jid].nodes}

    def cancel_reservations(self, jobids: Iterable[int]) -> None:
        with self.lock:
            for jid in jobids:
                if self._reserved.pop(jid, None) is not None:
                    self._g.cancel(jid, missing_ok=True)

    def _drop_reservations(self) -> None:
        for jid in self._reserved:
            self._g.cancel(jid, missing_ok=True)
        self._reserved.clear()
        self.reservations_dropped += 1

    # ---- matching and holding ----------------------------------------------------------

    def match(self, jobspec: Mapping[str, Any], op: MatchOp, jobid: int) -> Allocation:
        with self.lock:
            self.hold_on()
            return self._g.match(dict(jobspec), op, jobid=jobid, now=self.now())

    def allocate(self, jobspec: Mapping[str, Any], jobid: int) -> Allocation:
        """Allocate now; a failure comes back as status ``busy`` or ``unsatisfiable``.

        Whether a failed request could ever fit is decided on an empty copy of the
        graph with every node up: cordoned or not-ready nodes come back, while the
        matcher's satisfiability check fails fast when a request needs more nodes
        than are up now.
        """
        with self.lock:
            self.hold_on()
            alloc = self._g.match(dict(jobspec), "allocate", jobid=jobid, now=self.now())
            if alloc.ok:
                return alloc
            status = "busy" if self.satisfiable(jobspec) else "unsatisfiable"
            return replace(alloc, status=status)

    def satisfiable(self, jobspec: Mapping[str, Any]) -> bool:
        """Would the request fit the cluster with nothing held and every node up?

        The answer holds until the nodes change (a new empty copy): a queue asks it of
        many alike groups each round."""
        with self.lock:
            if self._empty is None:
                self._empty = self._empty_copy()
            copy, answers = self._fits_empty
            if copy is not self._empty:
                answers = {}
                self._fits_empty = (self._empty, answers)
            text = to_json(jobspec)
            known = answers.get(text)
            if known is not None:
                return known
            probe = self._empty.match(text, "allocate", jobid=1)
            if probe.ok:
                self._empty.cancel(1, missing_ok=True)
            if len(answers) >= SATISFIABLE_KEPT:
                answers.clear()
            answers[text] = probe.ok
            return probe.ok

    def _empty_copy(self) -> Graph:
        return Graph(
            jgf_text(self.jgf),
            policy=self.policy,
            partial_pools=set(PARTIAL_POOLS),
            keep_canceled=False,
        )

    def cancel_match(self, jobid: int) -> None:
        with self.lock:
            self._g.cancel(jobid, missing_ok=True)

    def hold_compute(
        self, jobid: int, node: str, amounts: Mapping[str, int], duration: int = 0
    ) -> None:
        """Hold ``amounts`` of ``node``'s pools as job ``jobid``; StateError when not free.

        ``duration``: seconds the capacity is planned to stay taken (0: until released);
        it is held on past that while the job is not released.
        """
        with self.lock:
            self.hold_on()
            holdings = self._compute_holdings(node, amounts)
            at, end = self._span(duration)
            if holdings:  # requests of zero hold nothing, but the job is still known
                self._g.hold(jobid, holdings, at=at, duration=end - at)
            self._track(jobid, HeldJob(holdings=holdings, end=end))
            self._job_nodes[jobid] = node

    def adopt(self, jobid: int, alloc: Allocation, node: str) -> None:
        """Keep a matched job as a held one (a group member that got the whole match).

        Saves cancelling the match and holding the same resources again; the
        match's R is what a rebuild replays.
        """
        with self.lock:
            end = alloc.at + alloc.duration if alloc.at + alloc.duration < HOLD_DURATION else 0
            self._track(jobid, HeldJob(R=alloc.R, end=end or HOLD_DURATION))
            if node:
                self._job_nodes[jobid] = node

    def hold_backend(self, jobid: int, path: str, duration: int = 0) -> None:
        """Hold the backend vertex at ``path`` exclusively as job ``jobid`` (as hold_compute)."""
        with self.lock:
            if path not in self._backends:
                raise NotFoundError(f"backend {path!r} is not in the graph")
            self.hold_on()
            holdings = {path: 1}
            at, end = self._span(duration)
            self._g.hold(jobid, holdings, at=at, duration=end - at)
            self._track(jobid, HeldJob(holdings=holdings, end=end))

    def release(self, jobid: int) -> None:
        with self.lock:
            self._g.cancel(jobid, missing_ok=True)
            self._jobs.pop(jobid, None)
            node = self._job_nodes.pop(jobid, None)
            if node is None or node not in self._nodes or not self._nodes[node].deleted:
                return
            if not any(n == node for n in self._job_nodes.values()):
                self._remove(node)

    def holds(self, jobid: int) -> bool:
        return jobid in self._jobs

    def _compute_holdings(self, node: str, amounts: Mapping[str, int]) -> dict[str, int]:
        """Pool path -> units for ``amounts`` (type -> units) on ``node``."""
        nv = self._nodes.get(node)
        if nv is None:
            raise NotFoundError(f"node {node!r} is not in the graph")
        holdings: dict[str, int] = {}
        for t, amount in sorted(amounts.items()):
            if amount <= 0:
                continue
            pool = nv.pools.get(t)
            if pool is None:
                raise StateError(f"node {node!r} has no {t} to hold {amount} of")
            if amount > pool.size:
                # Also keeps amounts past the matcher's 64-bit counts out of it.
                raise StateError(f"node {node!r} has {pool.size} {t}, fewer than {amount}")
            holdings[pool.path] = amount
        return holdings

    def backends(self) -> dict[str, Backend]:
        return dict(self._backends)

    def node_count(self) -> int:
        """Nodes in the graph, counting deleted ones still held by pods (cheap)."""
        return len(self._nodes)

    def node_names(self) -> list[str]:
        """The nodes not deleted (cached until a node is added, removed or deleted: a queue
        round asks once a group)."""
        with self.lock:
            key = (id(self._nodes), len(self._nodes), self._moves)
            if self._names[0] != key:
                self._names = (key, [n for n, v in self._nodes.items() if not v.deleted])
            return list(self._names[1])

    def nodes(self) -> dict[str, Node]:
        """The nodes as the API server last showed them (for the rules the graph does not hold)."""
        with self.lock:
            return {
                n: v.node for n, v in self._nodes.items() if v.node is not None and not v.deleted
            }

    def pod_limits(self) -> dict[str, int]:
        """Each node's allocatable pod count (kube-scheduler's limit; the graph holds no pods)."""
        with self.lock:
            out = {}
            for n, v in self._nodes.items():
                if v.node is None or v.deleted:
                    continue
                raw = v.node.status.allocatable or v.node.status.capacity
                if "pods" in raw:
                    try:
                        out[n] = int(parse_quantity(raw["pods"]))
                    except QuantityError:
                        out[n] = 0
            return out

    def excluded_for(self, pod: Pod) -> list[str]:
        """Nodes this pod may not use by :mod:`fluence.node_rules` (cordoned ones are down)."""
        with self.lock:
            # Only tainted nodes can be ruled out by taints; look at all only for a selector.
            asked = unmodelled_requests(pod)
            if asked:
                backed = self.device_backed()
                asked = {n: q for n, q in asked.items() if n not in backed}
            selects = pod.spec.node_selector or asked or required_terms(pod) is not None
            nodes = self._nodes if selects else self._tainted
            out = []
            for n in nodes:
                node = self._nodes[n].node
                if node is not None and (
                    untolerated(node, pod) or unselected(node, pod) or short_of(node, asked)
                ):
                    out.append(n)
            return sorted(out)

    def known_types(self) -> set[str]:
        return set(self._known_types)

    def _used_now(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per vertex path: units held by jobs now, and units kept now for waiting groups."""
        now = self.now()
        kept: dict[str, int] = {}
        for alloc in self._reserved.values():
            if alloc.at <= now < alloc.at + alloc.duration:
                for v in alloc.vertices:
                    kept[v.path] = kept.get(v.path, 0) + v.amount
        used = {}
        for u in self._g.usage(now):
            used[u.path] = int(u.used) - kept.get(u.path, 0)
        return used, kept

    def usage(self) -> dict[str, tuple[int, int]]:
        """Per vertex path: (size, used) of pools and backends, for state and metrics."""
        with self.lock:
            used, _ = self._used_now()
            return {u.path: (int(u.size), used[u.path]) for u in self._g.usage(self.now())}

    def node_usage(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per node: per type {capacity, allocated, free}, and ``reserved`` when some of it
        is kept now for a waiting group (not free for others, not held by any pod)."""
        with self.lock:
            used, kept = self._used_now()
            out: dict[str, dict[str, dict[str, int]]] = {}
            for name, nv in sorted(self._nodes.items()):
                per: dict[str, dict[str, int]] = {}
                for t, p in nv.pools.items():
                    a = used.get(p.path, 0)
                    r = kept.get(p.path, 0)
                    per[t] = {"capacity": p.size, "allocated": a, "free": p.size - a - r}
                    if r:
                        per[t]["reserved"] = r
                out[name] = per
            return out

    def free_units(self) -> dict[str, dict[str, int]]:
        """Per node: per type, the units free now (neither held nor kept for a waiting
        group); a new map each call, the caller's to change."""
        with self.lock:
            used, kept = self._used_now()
            return {
                name: {
                    t: p.size - used.get(p.path, 0) - kept.get(p.path, 0)
                    for t, p in nv.pools.items()
                }
                for name, nv in self._nodes.items()
            }

    def backend_usage(self) -> dict[str, bool]:
        """Per backend name: is it held by a pod?"""
        with self.lock:
            used, _ = self._used_now()
            return {b.name: used.get(p, 0) > 0 for p, b in sorted(self._backends.items())}
