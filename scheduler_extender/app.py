"""The extender's HTTP surface: ``create_app`` with every route listed in one place."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import msgspec
from opentelemetry.metrics import CallbackOptions, Observation
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from fluence import telemetry
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from scheduler_extender import state
from scheduler_extender.access import AccessReviewer, RemoteAccess
from scheduler_extender.gated_queue import Waiting
from scheduler_extender.inspect import inspect_routes
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs import bind, filter, preempt, prioritize
from scheduler_extender.verbs.body import BadRequest

JSON = "application/json"
_meter = telemetry.meter("fluence.extender")
_latency = _meter.create_histogram(
    "fluence_extender_request_seconds", unit="s", description="Extender request latency per verb."
)


def _register_gauges(graph: ClusterGraph, ledger: Ledger) -> None:
    def held(_: CallbackOptions) -> Iterable[Observation]:
        hs = ledger.holdings().values()
        by_state: dict[str, int] = {}
        for h in hs:
            by_state[h.state] = by_state.get(h.state, 0) + 1
        return [Observation(n, {"state": s}) for s, n in by_state.items()] or [Observation(0)]

    def utilization(_: CallbackOptions) -> Iterable[Observation]:
        cap: dict[str, int] = {}
        used: dict[str, int] = {}
        for per in graph.node_usage().values():
            for t, u in per.items():
                cap[t] = cap.get(t, 0) + u["capacity"]
                used[t] = used.get(t, 0) + u["allocated"]
        backends = graph.backend_usage()
        if backends:
            cap["backend"] = len(backends)
            used["backend"] = sum(backends.values())
        return [Observation(used[t] / cap[t] if cap[t] else 0.0, {"type": t}) for t in cap]

    _meter.create_observable_gauge(
        "fluence_allocations_held", [held], description="Pods holding resources, by state."
    )
    _meter.create_observable_gauge(
        "fluence_graph_utilization", [utilization], description="Allocated share per resource type."
    )


NOT_READY = (
    "fluence-extender is still rebuilding its allocations from the cluster; "
    "retry after the back-off"
)
_not_ready = _meter.create_counter(
    "fluence_extender_not_ready_answers",
    description="Scheduling calls answered 503 because the startup rebuild was not done",
)


def create_app(
    scheduler: Scheduler,
    *,
    max_body_bytes: int = 64 << 20,
    ready: Callable[[], bool] = lambda: True,
    alive: Callable[[], bool] = lambda: True,
    metrics: bool = True,
    remote: AccessReviewer | None = None,
    queued: Callable[[], Sequence[Waiting]] = lambda: (),
) -> Starlette:
    """Build the app; ``ready`` says when the ledger is rebuilt and scheduling may start.

    ``remote``: callers from beyond loopback must then present a token that it
    accepts and authorises (see :mod:`scheduler_extender.access`); the binary
    always passes one, tests without an API server none.

    Until then every scheduling verb answers 503 with an ``Error``: kube-scheduler
    takes that as a failed attempt and retries the pod after its back-off, where
    an answer from a half-built graph could double-book what running pods hold
    or mark pods unschedulable. ``alive`` turns false when startup failed, so
    the liveness probe restarts the container instead of leaving it unready.
    """
    graph, ledger = scheduler.graph, scheduler.ledger
    if metrics:
        _register_gauges(graph, ledger)

    def verb(name: str, fn: Callable[[Request], Awaitable[bytes]]) -> Route:
        async def endpoint(request: Request) -> Response:
            if not ready():
                _not_ready.add(1, {"verb": name})
                return JSONResponse({"Error": NOT_READY}, status_code=503)
            watch = telemetry.Stopwatch()
            try:
                body = await fn(request)
                return Response(body, media_type=JSON)
            except BadRequest as exc:
                return JSONResponse({"Error": exc.message}, status_code=exc.status)
            finally:
                _latency.record(watch.seconds, {"verb": name})

        return Route(f"/{name}", endpoint, methods=["POST"])

    async def healthz(_: Request) -> Response:
        if alive():
            return Response("ok", media_type="text/plain")
        return Response("startup failed; see the log", status_code=503)

    async def readyz(_: Request) -> Response:
        if ready():
            return Response("ready", media_type="text/plain")
        return Response("rebuilding the ledger from the cluster", status_code=503)

    async def state_doc(_: Request) -> Response:
        doc: dict[str, Any] = await run_in_threadpool(state.snapshot, graph, ledger, queued())
        return Response(msgspec.json.encode(doc), media_type=JSON)

    limit = max_body_bytes
    routes: list[Route | Mount] = [
        verb("filter", lambda r: filter.handle(r, scheduler, limit)),
        verb("prioritize", lambda r: prioritize.handle(r, scheduler, limit)),
        verb("bind", lambda r: bind.handle(r, scheduler, limit)),
        verb("preempt", lambda r: preempt.handle(r, scheduler, limit)),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/state", state_doc, methods=["GET"]),
        *inspect_routes(scheduler, limit),
    ]
    if metrics:
        routes.append(Mount("/metrics", app=telemetry.metrics_app()))
    middleware = [Middleware(RemoteAccess, reviewer=remote)] if remote is not None else []
    return Starlette(routes=routes, middleware=middleware)
