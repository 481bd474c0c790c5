"""The typed Python face of the matcher: a resource graph you match jobspecs against."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from fluxion_nb import _core
from fluxion_nb.errors import InputError
from fluxion_nb.jobspec import JobspecLike, to_json

MatchOp = Literal[
    "allocate",
    "allocate_orelse_reserve",
    "allocate_with_satisfiability",
    "satisfiability",
    "without_allocating",
    "without_allocating_future",
]
_CHANGING: frozenset[str] = frozenset(
    ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability")
)
"""The operations that hold what they match when they succeed."""
REMEMBERED_FAILURES = 1024
"""Failed matches a graph that remembers them keeps between two changes of its state."""
MatchFormat = Literal["simple", "pretty_simple", "jgf", "rlite", "rv1", "rv1_nosched"]
# "flexible" also accepts sibling slots (or-slots) and xor_slot alternatives.
TraverserKind = Literal["simple", "flexible"]


@dataclass(frozen=True)
class AllocatedVertex:
    """One vertex of an allocation and how much of it the job holds."""

    path: str
    type: str
    name: str
    id: int
    rank: int
    amount: int
    exclusive: bool
    node: str
    properties: Mapping[str, str] = field(default_factory=dict)


class AllocatedVertices(Sequence[AllocatedVertex]):
    """An allocation's vertices, described by the core on first use.

    A match of many nodes emits thousands of vertices; most callers only read
    the status and R, so they are not converted unless asked for.
    """

    def __init__(self, m: Any = None, r: Any = None) -> None:
        self._m = m
        self._r = r

    @cached_property
    def _items(self) -> tuple[AllocatedVertex, ...]:
        if self._r is None or not self._r.emitted:
            return ()
        return tuple(
            AllocatedVertex(
                path=v.path,
                type=v.type,
                name=v.name,
                id=v.id,
                rank=v.rank,
                amount=v.amount,
                exclusive=v.exclusive,
                node=v.node,
                properties=dict(v.properties),
            )
            for v in self._m.describe(self._r)
        )

    def by_node(self) -> dict[str, dict[str, int]]:
        """See :meth:`Allocation.by_node`; summed by the core, unless described already."""
        if "_items" in self.__dict__ or self._r is None or not self._r.emitted:
            return _sum_by_node(self._items)
        return {node: dict(per) for node, per in self._m.held_by_node(self._r)}

    def __len__(self) -> int:
        return 0 if self._r is None else int(self._r.emitted)

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __iter__(self) -> Iterator[AllocatedVertex]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return self._items == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return repr(self._items)

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and pickles hold the described vertices, not the matcher.
        return (tuple, (self._items,))


@dataclass(frozen=True)
class Allocation:
    """The outcome of one match.

    ``status`` is one of allocated, reserved, matched, satisfiable, busy,
    unsatisfiable. ``busy`` means "not now, but it could fit later";
    ``unsatisfiable`` means it can never fit on this graph.
    """

    status: str
    jobid: int
    at: int
    duration: int
    R: str
    vertices: Sequence[AllocatedVertex]
    overhead: float

    @property
    def ok(self) -> bool:
        return self.status in ("allocated", "reserved", "matched", "satisfiable")

    @property
    def reserved(self) -> bool:
        return self.status == "reserved"

    @property
    def nodes(self) -> list[str]:
        """Names of the ``node`` vertices holding part of the job, in emission order."""
        seen: dict[str, None] = {}
        for v in self.vertices:
            if v.node:
                seen.setdefault(v.node, None)
        return list(seen)

    def by_node(self) -> dict[str, dict[str, int]]:
        """Per node: resource type -> units held exclusively (node vertices left out)."""
        if isinstance(self.vertices, AllocatedVertices):
            return self.vertices.by_node()
        return _sum_by_node(self.vertices)


def _sum_by_node(vertices: Iterable[AllocatedVertex]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for v in vertices:
        if v.node and v.exclusive and v.type != "node":
            per = out.setdefault(v.node, {})
            per[v.type] = per.get(v.type, 0) + v.amount
    return out


def _with_jobid(a: Allocation, jobid: int | None) -> Allocation:
    copy = object.__new__(Allocation)
    copy.__dict__.update(a.__dict__, jobid=a.jobid if jobid is None else jobid)
    return copy


def _allocation(m: Any, r: Any) -> Allocation:
    # Every match ends here: filling the instance's dict directly spares the
    # frozen dataclass __init__ (one object.__setattr__ per field, about a
    # microsecond per match).
    a = object.__new__(Allocation)
    a.__dict__.update(
        status=r.status,
        jobid=r.jobid,
        at=r.at,
        duration=r.duration,
        R=r.R,
        vertices=AllocatedVertices(m, r),
        overhead=r.overhead,
    )
    return a


class Graph:
    """A Fluxion resource graph with its jobs.

    Safe to share between threads: every call is serialised inside the core,
    and the GIL is released while a match runs.
    """

    def __init__(
        self,
        jgf: str | bytes | Mapping[str, Any],
        *,
        policy: str = "first",
        prune_filters: str = "ALL:core,ALL:node",
        match_format: MatchFormat = "jgf",
        partial_pools: bool | Iterable[str] = False,
        traverser: TraverserKind = "simple",
        subsystems: str = "CA",
        keep_canceled: bool = True,
        remember_failures: bool = False,
    ) -> None:
        """``subsystems`` is resource-query's ``-S`` name (``CA``, ``PA``, ``C+PA``, ...):
        the first subsystem named is the tree matching walks.

        ``keep_canceled``: as resource-query, a cancelled job's record stays for
        ``info`` and ``jobs()``; a service that schedules a job per pod passes
        False so that a cancelled job is forgotten and nothing accumulates.

        ``remember_failures``: a match that failed is answered again from memory
        while nothing has changed the graph (same jobspec, operation, format and
        time): a queue trying many alike groups on a full cluster walks it once.
        The answer is the one the matcher gave, its ``overhead`` included."""
        # Text (str, or UTF-8 bytes) is read by the core in place, without a copy.
        text = jgf if isinstance(jgf, (str, bytes)) else json.dumps(jgf)
        if isinstance(text, bytes) and not text.isascii():
            try:
                text = text.decode()
            except UnicodeDecodeError as exc:
                raise InputError(f"JGF: not valid UTF-8: {exc}") from None
        if partial_pools is True:
            pools = {"*"}
        elif partial_pools is False:
            pools = set()
        else:
            pools = set(partial_pools)
        self._m = _core.Matcher(
            text, policy, prune_filters, match_format, pools, traverser, subsystems, keep_canceled
        )
        self._remember = remember_failures
        self._count = itertools.count(1)
        self._changes = 0
        """Renumbered after every call that may change what a match finds."""
        self._failed: dict[tuple[str, str, str, int], tuple[int, Allocation]] = {}
        """(jobspec, op, format, now) -> (changes then, the failed match)."""

    @classmethod
    def from_jgf(cls, jgf: str | bytes | Mapping[str, Any], **kwargs: Any) -> Graph:
        """Build from JGF text or a parsed JGF document."""
        return cls(jgf, **kwargs)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> Graph:
        # The bytes go to the core as they are: no decoding, no copy.
        return cls(Path(path).read_bytes(), **kwargs)

    @property
    def policy(self) -> str:
        return str(self._m.policy)

    @property
    def traverser(self) -> TraverserKind:
        return self._m.traverser

    def match(
        self,
        jobspec: JobspecLike,
        op: MatchOp = "allocate",
        *,
        jobid: int | None = None,
        format: MatchFormat | None = None,
        now: int = 0,
    ) -> Allocation:
        """Match a jobspec at time ``now``. Failure to fit is a result (busy/unsatisfiable).

        A job that can start at ``now`` is ``allocated``; ``allocate_orelse_reserve``
        makes one that can only start later ``reserved`` at its earliest start.
        """
        text = to_json(jobspec)
        if not self._remember:
            return _allocation(self._m, self._m.match(text, op, jobid, format or "", now))
        key = (text, op, format or "", now)
        changes = self._changes
        known = self._failed.get(key)
        if known is not None and known[0] == changes:
            failed = known[1]
            return failed if failed.jobid == jobid else _with_jobid(failed, jobid)
        result = _allocation(self._m, self._m.match(text, op, jobid, format or "", now))
        if result.ok:
            if op in _CHANGING:
                self._changed()
            return result
        if len(self._failed) >= REMEMBERED_FAILURES:
            self._failed = {}
        # Kept with the count seen before the match: a change made meanwhile (another
        # thread) leaves it stale, never wrong.
        self._failed[key] = (changes, result)
        return result

    def _changed(self) -> None:
        # A number no change had before (the count is atomic where ``+= 1`` is not): a
        # failure kept under an older one is never taken for a current one.
        self._changes = next(self._count)
        if self._failed:
            self._failed = {}

    def satisfiable(self, jobspec: JobspecLike) -> bool:
        """Could this jobspec ever fit on the graph (all resources free)?"""
        return self.match(jobspec, "satisfiability").status == "satisfiable"

    def update_allocate(
        self,
        jobid: int,
        R: str,
        *,
        at: int = 0,
        duration: int,
        reserve: bool = False,
        reader: str = "",
        now: int = 0,
    ) -> Allocation:
        """Replay an allocation recorded earlier, e.g. after a restart.

        ``reader``: ``"jgf"`` reads the JGF graph of R (as the jgf and rv1 writers
        write it), ``"rv1exec"`` its R_lite ranks, hosts and child ids (RFC 20
        R without a graph); ``""`` picks JGF when R has one. R's own start and
        expiration are ignored: the job holds ``[at, at + duration)``. The status
        is "reserved" when it starts after ``now`` or ``reserve`` books it as a
        reservation (which the vertices then record as one), else "allocated".
        """
        try:
            return _allocation(
                self._m, self._m.update_allocate(jobid, R, at, duration, reserve, "", reader, now)
            )
        finally:
            self._changed()

    def hold(self, jobid: int, holdings: Mapping[str, int], *, at: int = 0, duration: int) -> None:
        """Hold ``amount`` units of each vertex path in ``holdings`` as job ``jobid``.

        The same as :meth:`update_allocate` with an R naming those vertices (held
        exclusively) and their ancestors, without writing or parsing any R: for a
        caller that already knows what a job holds. StateError when they are not free.
        """
        try:
            self._m.hold(jobid, list(holdings.items()), at, duration)
        finally:
            self._changed()

    def cancel(self, jobid: int, *, missing_ok: bool = False) -> bool:
        """Release a job; returns False only when it did not exist and missing_ok is set."""
        try:
            return bool(self._m.cancel(jobid, missing_ok))
        finally:
            self._changed()

    def partial_cancel(self, jobid: int, paths: Iterable[str]) -> bool:
        """Release the part of a job under the given vertex paths; True once nothing is left."""
        try:
            return bool(self._m.partial_cancel(jobid, list(paths)))
        finally:
            self._changed()

    def info(self, jobid: int) -> Any:
        return self._m.info(jobid)

    def jobs(self) -> list[Any]:
        return list(self._m.jobs())

    def stat(self) -> dict[str, int]:
        return dict(self._m.stat())

    def usage(self, at: int = 0) -> list[Any]:
        """Per vertex: path, type, size and the amount held at time ``at``."""
        return list(self._m.usage(at))

    def find(self, criteria: str, format: MatchFormat | None = None) -> str:
        """Vertices matching a resource-query ``find`` expression, written as R.

        Predicates: ``status=up|down``, ``sched-now=allocated|free``,
        ``sched-future=reserved|free``, ``agfilter=true|false``,
        ``names=<hostlist>``, ``jobid-alloc|jobid-span|jobid-tag|jobid-reserved=<id>``,
        ``property=<name>``; joined by ``and``/``or`` (left to right) and parentheses.
        Matching vertices come with the ancestors leading to them.
        """
        return str(self._m.find(criteria, format or ""))

    def set_status(self, path: str, up: bool) -> None:
        try:
            self._m.set_status(path, up)
        finally:
            self._changed()

    def get_status(self, path: str) -> bool:
        return bool(self._m.get_status(path))

    def set_property(self, path: str, key: str, value: str = "") -> None:
        try:
            self._m.set_property(path, key, value)
        finally:
            self._changed()

    def get_property(self, path: str) -> dict[str, str]:
        return dict(self._m.get_property(path))

    def attach(self, jgf: str | Mapping[str, Any]) -> None:
        """Grow the graph with a JGF subgraph whose top vertex hangs under an existing one."""
        try:
            self._m.attach(jgf if isinstance(jgf, str) else json.dumps(jgf))
        finally:
            self._changed()

    def remove(self, path: str) -> None:
        """Shrink the graph: drop the subtree at path.

        Jobs running there keep the rest of their allocation; a reservation
        on the subtree must be cancelled first (StateError).
        """
        try:
            self._m.remove(path)
        finally:
            self._changed()
