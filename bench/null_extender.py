"""The smallest correct scheduler extender: it decides nothing, and binds.

Its filter passes every candidate kube-scheduler offers through (the names are
handed back as they came, not even decoded), its prioritize scores nothing and its
preempt accepts kube-scheduler's victims on every node, so kube-scheduler's own
plugins decide placement and preemption exactly as without an extender. Only its bind
acts: it creates the Binding.

It is the baseline of ``bench/extender_throughput.py`` and the cluster benches:
kube-scheduler pays for the round trips (filter and bind for every pod; prioritize
whenever more than one node is feasible; preempt when it preempts), and the Binding
is created by a Python client. It is served the way fluence serves (Starlette
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


_NULL = msgspec.Raw(b"null")


class FilterArgs(msgspec.Struct):
    """The candidates only, kept raw: names (``nodeCacheCapable``) or whole nodes."""

    node_names: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL, name="NodeNames")
    nodes: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL, name="Nodes")


class FilterResult(msgspec.Struct):
    """ExtenderFilterResult with the candidates handed back as they came."""

    node_names: msgspec.Raw = msgspec.field(name="NodeNames")
    nodes: msgspec.Raw = msgspec.field(name="Nodes")
    failed_nodes: dict[str, str] = msgspec.field(default_factory=dict, name="FailedNodes")
    error: str = msgspec.field(default="", name="Error")


filter_args = msgspec.json.Decoder(FilterArgs)
NO_SCORES = b"[]"


def meta_victims(args: wire.ExtenderPreemptionArgs) -> dict[str, wire.MetaVictims]:
    """kube-scheduler's victims on every node it offers, unchanged (by UID)."""
    if args.node_name_to_meta_victims is not None:
        return args.node_name_to_meta_victims
    return {
        node: wire.MetaVictims(
            pods=[wire.MetaPod(uid=wire.pod_uid(p)) for p in victims.pods],
            num_pdb_violations=victims.num_pdb_violations,
        )
        for node, victims in (args.node_name_to_victims or {}).items()
    }


def create_app(binder: ApiBinder) -> Starlette:
    async def filter_(request: Request) -> Response:
        args = filter_args.decode(await request.body())
        result = FilterResult(node_names=args.node_names, nodes=args.nodes)
        return Response(wire.encoder.encode(result), media_type="application/json")

    async def prioritize(_: Request) -> Response:
        return Response(NO_SCORES, media_type="application/json")

    async def preempt(request: Request) -> Response:
        args = wire.preemption_args.decode(await request.body())
        result = wire.ExtenderPreemptionResult(node_name_to_meta_victims=meta_victims(args))
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
            Route("/prioritize", prioritize, methods=["POST"]),
            Route("/preempt", preempt, methods=["POST"]),
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
