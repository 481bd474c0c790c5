"""Read-only inspection routes: ``/explain``, ``/graph`` and the what-ifs ``/match``, ``/plan``.

Mounted next to the verbs (``routes.extend(inspect_routes(scheduler))``).
Handlers only parse and encode; the work runs in a thread on copies, holding
the graph lock for one match at most, so asking never stalls scheduling.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fluence.group_jobspec import JobspecError
from fluence.pods import Pod, decode_pod
from scheduler_extender.explain import explain
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs.body import MAX_BODY_SETTING, BadRequest, read_body
from scheduler_extender.whatif import JobspecInputError, parse_jobspec, plan_group, what_if

JSON = "application/json"
MAX_JOBSPEC_BYTES = 1 << 20
"""Cap on a /match or /plan body (or FLUENCE_MAX_BODY_BYTES, if smaller): a jobspec is a few KiB."""


MAX_PLAN_PODS = 10_000


class PlanInputError(ValueError):
    """The /plan body is not ``{"pods": [Pod, ...]}``; the message says what to fix."""


def decode_plan(body: bytes) -> list[Pod]:
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise PlanInputError(f"the body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise PlanInputError("the body is nested too deeply") from exc
    items = doc.get("pods") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise PlanInputError('expected {"pods": [Pod, ...]} with at least one pod')
    if len(items) > MAX_PLAN_PODS:
        raise PlanInputError(f"{len(items)} pods; at most {MAX_PLAN_PODS} are planned at once")
    try:
        return [decode_pod(json.dumps(p)) for p in items]
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PlanInputError(f"a pod cannot be read: {exc}") from exc


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def inspect_routes(scheduler: Scheduler, max_body_bytes: int = MAX_JOBSPEC_BYTES) -> list[Route]:
    """The inspection routes over the scheduler's graph, ledger and pod cache."""
    graph = scheduler.graph
    limit = min(max_body_bytes, MAX_JOBSPEC_BYTES)
    setting = f"{MAX_JOBSPEC_BYTES >> 20} MiB on /match and /plan, or {MAX_BODY_SETTING} if less"

    async def explain_pod(request: Request) -> Response:
        ref = request.query_params.get("pod", "")
        ns, sep, name = ref.partition("/")
        if not sep or not ns or not name:
            return _error(
                400, f"pod={ref!r}: give the pod as namespace/name, e.g. ?pod=default/web-0"
            )
        doc = await run_in_threadpool(explain, scheduler, ns, name)
        return Response(msgspec.json.encode(doc), media_type=JSON)

    async def graph_doc(request: Request) -> Response:
        fmt = request.query_params.get("format", "jgf")
        if fmt != "jgf":
            return _error(400, f"format={fmt!r} is not served: use format=jgf")

        def render() -> bytes:
            # Vertex and edge dicts are never changed once built (the graph replaces or
            # extends its lists), so copying the lists under the lock is a snapshot.
            with graph.lock:
                jgf = graph.jgf["graph"]
                nodes, edges = list(jgf["nodes"]), list(jgf["edges"])
            return json.dumps({"graph": {"nodes": nodes, "edges": edges}}).encode()

        return Response(await run_in_threadpool(render), media_type=JSON)

    def match_body(body: bytes) -> dict[str, Any]:
        spec = parse_jobspec(body)
        doc = what_if(graph, spec)
        doc["jobspec"] = spec
        return doc

    async def match(request: Request) -> Response:
        try:
            body = await read_body(request, limit, setting)
            # Parsing YAML is pure Python: a large body is parsed off the event loop too.
            doc = await run_in_threadpool(match_body, body)
        except BadRequest as exc:
            return _error(exc.status, exc.message)
        except JobspecInputError as exc:
            return _error(400, str(exc))
        return Response(msgspec.json.encode(doc), media_type=JSON)

    async def plan(request: Request) -> Response:
        try:
            body = await read_body(request, limit, setting)
        except BadRequest as exc:
            return _error(exc.status, exc.message)
        try:
            pods = decode_plan(body)
        except PlanInputError as exc:
            return _error(400, str(exc))
        try:
            doc = await run_in_threadpool(plan_group, graph, pods, scheduler.ledger.default_runtime)
        except JobspecError as exc:
            return _error(400, str(exc))
        return Response(msgspec.json.encode(doc), media_type=JSON)

    return [
        Route("/explain", explain_pod, methods=["GET"]),
        Route("/plan", plan, methods=["POST"]),
        Route("/graph", graph_doc, methods=["GET"]),
        Route("/match", match, methods=["POST"]),
    ]
