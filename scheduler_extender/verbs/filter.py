"""POST /filter: the node(s) a pod may go to, per its group's allocation."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs.body import decode, pod_of, read_body


async def handle(request: Request, scheduler: Scheduler, limit: int) -> bytes:
    args = decode(wire.filter_args, await read_body(request, limit), "ExtenderArgs")
    pod = pod_of(args.pod)
    out = await run_in_threadpool(scheduler.filter, pod, args.candidates())
    result = wire.ExtenderFilterResult(
        failed_nodes=out.failed, failed_and_unresolvable=out.unresolvable, error=out.error
    )
    if args.nodes is not None and args.node_names is None:
        keep = set(out.nodes)
        items = [raw for raw in args.nodes.items if wire.node_name(raw) in keep]
        result.nodes = wire.NodeList(items=items, metadata={}, api_version="v1", kind="NodeList")
    else:
        result.node_names = out.nodes
    return wire.encoder.encode(result)
