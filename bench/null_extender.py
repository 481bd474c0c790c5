"""The smallest correct scheduler extender: filter keeps the first candidate, bind binds.

It is the baseline of ``bench/extender_throughput.py``: kube-scheduler pays for
the filter and bind round trips, and the Binding is created by a Python client,
whatever the extender decides. It is served the way fluence serves (Starlette
through :func:`fluence.serving.serve_app` on uvloop) and binds with fluence's own
:class:`~scheduler_extender.binder.ApiBinder` (aiohttp on the loop, the
kubernetes client's credentials), with no graph, no ledger, no watches and no
annotations. So
"fluence / null" is what fluence's placement costs on top of being an extender
at all. Usage::

    python bench/null_extender.py --bind 127.0.0.1:PORT --kubeconfig FILE
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fluence.kube_client import api_client  # noqa: E402
from fluence.serving import run, serve_app  # noqa: E402
from scheduler_extender import wire  # noqa: E402
from scheduler_extender.binder import ApiBinder  # noqa: E402
from scheduler_extender.scheduling import BindConflict, BindError  # noqa: E402

BIND_CONCURRENCY = 16


class FilterArgs(msgspec.Struct):
    node_names: list[str] | None = msgspec.field(default=None, name="NodeNames")


filter_args = msgspec.json.Decoder(FilterArgs)


def create_app(binder: ApiBinder) -> Starlette:
    async def filter_(request: Request) -> Response:
        names = filter_args.decode(await request.body()).node_names or []
        result = wire.ExtenderFilterResult(node_names=names[:1])
        return Response(wire.encoder.encode(result), media_type="application/json")

    async def bind(request: Request) -> Response:
        args = wire.binding_args.decode(await request.body())
        error = ""
        try:
            await binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node, {})
        except (BindConflict, BindError) as exc:
            error = str(exc) or type(exc).__name__
        result = wire.ExtenderBindingResult(error=error)
        return Response(wire.encoder.encode(result), media_type="application/json")

    async def readyz(_: Request) -> Response:
        return Response("ready", media_type="text/plain")

    return Starlette(
        routes=[
            Route("/filter", filter_, methods=["POST"]),
            Route("/bind", bind, methods=["POST"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True)
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args()
    binder = ApiBinder(
        api_client(args.kubeconfig, connections=1).configuration, connections=BIND_CONCURRENCY
    )
    run(serve_app(create_app(binder), args.bind))


if __name__ == "__main__":
    main()
