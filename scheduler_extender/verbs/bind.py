"""POST /bind: commit the allocation and create the Binding with its annotations."""

from __future__ import annotations

from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs.body import BadRequest, decode, read_body


async def handle(request: Request, scheduler: Scheduler, limit: int) -> bytes:
    args = decode(wire.binding_args, await read_body(request, limit), "ExtenderBindingArgs")
    if not (args.pod_name and args.pod_namespace and args.node and args.pod_uid):
        # The UID makes the Binding refer to this very pod, not one recreated under its name.
        raise BadRequest(400, "ExtenderBindingArgs needs PodName, PodNamespace, PodUID and Node")
    error = await scheduler.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    return wire.encoder.encode(wire.ExtenderBindingResult(error=error))
