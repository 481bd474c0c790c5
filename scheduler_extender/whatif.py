"""What-if matching: would a jobspec fit the live graph now, and where, changing nothing.

The live graph is asked with the matcher's ``without_allocating`` op, which
matches at the current time and records no job. When that fails, whether the
request could *ever* fit is decided on :meth:`ClusterGraph.satisfiable` (an
empty copy of the graph with every node up), the same rule filter uses, and an
``allocate_orelse_reserve`` probe, cancelled at once, tells when it would start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from fluence.cluster_graph import WHAT_IF_JOB, ClusterGraph
from fluence.group_jobspec import group_jobspecs
from fluence.pods import Pod
from fluence.runtimes import group_enforced, group_runtime
from fluxion_nb.errors import InputError, StateError

FITS = "fits"
BUSY = "busy"
UNSATISFIABLE = "unsatisfiable"


class JobspecInputError(ValueError):
    """The request body is not a jobspec the matcher can read; the message says what to fix."""


MAX_JOBSPEC_DEPTH = 64
"""Nested mappings and lists a jobspec may have; real ones have about a dozen."""


class _JobspecLoader(yaml.SafeLoader):
    """A safe loader that refuses anchors and aliases, and nesting past MAX_JOBSPEC_DEPTH.

    An alias loads as a second reference to one object, but every JSON encoding
    of the result (the matcher's input, the reply) writes it out in full: a few
    hundred bytes of nested aliases would become hundreds of MiB. Refused when
    the parser meets them, nothing is expanded. The depth bound keeps the
    composer (recursive) far from Python's recursion limit.
    """

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.NodeEvent = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "in the body"
        if event.anchor is not None:  # an alias carries the anchor it refers to
            sigil = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise JobspecInputError(
                f"YAML anchors and aliases are refused ({sigil}{event.anchor} at {where}); "
                "write the repeated parts out in full"
            )
        if self._depth >= MAX_JOBSPEC_DEPTH:
            raise JobspecInputError(
                f"the jobspec nests deeper than {MAX_JOBSPEC_DEPTH} levels ({where})"
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_plain(doc: Any) -> None:
    """Refuse what YAML loads beyond JSON's types (dates, sets, bytes, non-string keys).

    The loader refused aliases, so the document is a tree and this walk is as
    long as the body.
    """
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise JobspecInputError(f"mapping key {key!r:.60} is not a string")
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
        elif value is not None and not isinstance(value, (str, int, float)):
            raise JobspecInputError(
                f"{value!r:.60} is a {type(value).__name__}: a jobspec holds only JSON values"
            )


def parse_jobspec(body: bytes) -> dict[str, Any]:
    """A jobspec given as YAML or JSON (JSON is YAML) -> its mapping."""
    if not body.strip():
        raise JobspecInputError("the request body is empty: send a jobspec as YAML or JSON")
    try:
        doc = yaml.load(body, Loader=_JobspecLoader)
    except JobspecInputError:
        raise
    except (yaml.YAMLError, ValueError) as exc:
        # ValueError: an integer past Python's digit limit for int().
        raise JobspecInputError(f"the body is neither YAML nor JSON: {exc}") from exc
    if not isinstance(doc, dict) or "resources" not in doc:
        raise JobspecInputError(
            "the body is not a jobspec: expected a mapping with 'version', 'resources', "
            "'attributes' and 'tasks' (see docs/observability.md, kubectl fluence match)"
        )
    _check_plain(doc)
    return doc


def _earliest_start(graph: ClusterGraph, spec: Mapping[str, Any]) -> int | None:
    """When the request could start behind what is held and reserved (graph time), or None.

    A jobspec without a duration runs "until released"; it is asked for a second,
    which says when it could start.
    """
    probe = json.loads(json.dumps(spec))
    system = probe.setdefault("attributes", {}).setdefault("system", {})
    if not system.get("duration"):
        system["duration"] = 1
    alloc = graph.reserve(probe, WHAT_IF_JOB)
    if alloc.ok:
        graph.cancel_reservations([WHAT_IF_JOB])
        return alloc.at
    return None


def what_if(graph: ClusterGraph, jobspec: Mapping[str, Any]) -> dict[str, Any]:
    """Where ``jobspec`` would be placed now, or why not; the graph is left as it was.

    Returns ``{"status": fits|busy|unsatisfiable, "nodes": {node: {type: amount}},
    "vertices": [path, ...], "message": str}``. Raises JobspecInputError when the
    matcher rejects the jobspec itself.
    """
    spec = json.loads(json.dumps(jobspec))
    try:
        with graph.lock:
            alloc = graph.match(spec, "without_allocating", WHAT_IF_JOB)
            if alloc.ok:
                return {
                    "status": FITS,
                    "nodes": alloc.by_node(),
                    "vertices": [v.path for v in alloc.vertices],
                    "message": "fits now"
                    + (f" on {', '.join(alloc.nodes)}" if alloc.nodes else ""),
                }
            ever = graph.satisfiable(spec)
            start = _earliest_start(graph, spec) if ever else None
    except (InputError, StateError) as exc:
        raise JobspecInputError(f"the matcher cannot read this jobspec: {exc}") from exc
    if ever:
        doc: dict[str, Any] = {
            "status": BUSY,
            "nodes": {},
            "vertices": [],
            "message": "does not fit now: not enough free capacity; it fits once resources free up",
        }
        if start is not None:
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(graph.wall_time(start)))
            doc["start"] = at
            doc["starts_in"] = start - graph.now()
            doc["message"] = (
                f"does not fit now; it would start at {at} (in {doc['starts_in']}s), after the "
                "running pods' expected ends and the waiting groups' reservations"
            )
        return doc
    return {
        "status": UNSATISFIABLE,
        "nodes": {},
        "vertices": [],
        "message": "can never fit: the request exceeds what the cluster has",
    }


def plan_group(graph: ClusterGraph, pods: Sequence[Pod], default_runtime: int) -> dict[str, Any]:
    """Would these pods, as one group, fit now, start at some time, or never? Changes nothing.

    The group is matched as the extender would (its jobspecs, its expected runtime),
    behind what is held and what the waiting groups have reserved.
    """
    runtime = group_runtime(pods, default_runtime)
    enforced = group_enforced(pods)

    def jobspecs_of(duration: int) -> list[Any]:
        specs = group_jobspecs("plan", pods, graph.known_types(), duration=duration)
        return specs.jobspecs()

    jobspecs = jobspecs_of(runtime)
    now_jobspecs = jobspecs if enforced else jobspecs_of(0)
    reserve = graph.reserve if enforced else graph.reserve_open_ended
    base = {"pods": len(pods), "runtime": runtime}
    with graph.lock:
        if graph.fits_now(now_jobspecs):
            return {**base, "status": FITS, "message": f"fits now ({len(pods)} pod(s))"}
        if not all(graph.satisfiable(js) for js in jobspecs):
            return {
                **base,
                "status": UNSATISFIABLE,
                "message": "can never fit: the group asks for more than the cluster has",
            }
        made: list[int] = []
        start = graph.now()
        try:
            for i, js in enumerate(jobspecs):
                alloc = reserve(js, WHAT_IF_JOB + 1 + i)
                if not alloc.ok:
                    return {
                        **base,
                        "status": BUSY,
                        "message": "does not fit now, and no start can be planned (what it "
                        "needs is held with no expected end)",
                    }
                made.append(WHAT_IF_JOB + 1 + i)
                start = max(start, alloc.at)
        finally:
            graph.cancel_reservations(made)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(graph.wall_time(start)))
    wait = start - graph.now()
    return {
        **base,
        "status": BUSY,
        "start": at,
        "starts_in": wait,
        "message": f"would start at {at} (in {wait}s), after the running pods' expected ends "
        "and the waiting groups' reservations",
    }
