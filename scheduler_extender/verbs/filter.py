"""POST /filter: the node(s) a pod may go to, per its group's allocation.

The decision runs on the event loop, not in a worker thread: kube-scheduler
sends one filter at a time per scheduling cycle, so there is nothing to run
beside it, and handing a sub-millisecond decision to a thread and back costs
more than the decision (the waiting thread also needs the GIL back). Bind
awaits the API server on the loop as well (:mod:`scheduler_extender.binder`).
Only when the decision would wait (a graph rebuild holds the graph, or the
empty copy for the satisfiability check must be built) does it go to a thread,
so probes and other requests are answered meanwhile.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs.body import decode, offered_names, pod_of, read_body


async def handle(request: Request, scheduler: Scheduler, limit: int) -> bytes:
    args = decode(wire.filter_args, await read_body(request, limit), "ExtenderArgs")
    pod = pod_of(args.pod)
    with offered_names(args) as candidates:
        if scheduler.would_block():
            out = await asyncio.to_thread(scheduler.filter, pod, candidates)
        else:
            out = scheduler.filter(pod, candidates)
    result = wire.ExtenderFilterResult(
        failed_nodes=out.failed, failed_and_unresolvable=out.unresolvable, error=out.error
    )
    if args.nodes is not None and not args.has_node_names:
        keep = set(out.nodes)
        # The names were read from these items, in their order (candidates_of).
        pairs = zip(args.nodes.items, candidates, strict=True)
        items = [raw for raw, name in pairs if name in keep]
        result.nodes = wire.NodeList(items=items, metadata={}, api_version="v1", kind="NodeList")
    else:
        result.node_names = out.nodes
    return wire.encoder.encode(result)
