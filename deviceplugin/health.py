"""HTTP app for the DaemonSet's probes and Prometheus: ``/healthz`` and ``/metrics``."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from deviceplugin.manager import PluginManager
from fluence import telemetry


def create_app(manager: PluginManager) -> Starlette:
    """``/healthz`` is 200 while the manager loop turns (also when nothing is advertised)."""

    async def healthz(_: Request) -> JSONResponse:
        body = manager.status()
        return JSONResponse(body, status_code=200 if manager.alive() else 503)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Mount("/metrics", app=telemetry.metrics_app()),
        ]
    )
