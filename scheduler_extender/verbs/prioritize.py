"""POST /prioritize: the allocated node scores 10, every other candidate 0."""

from __future__ import annotations

from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs.body import decode, offered_names, pod_of, read_body


async def handle(request: Request, scheduler: Scheduler, limit: int) -> bytes:
    args = decode(wire.filter_args, await read_body(request, limit), "ExtenderArgs")
    pod = pod_of(args.pod)
    with offered_names(args) as candidates:
        scores = scheduler.prioritize(pod, candidates)
    return wire.encoder.encode([wire.HostPriority(host=h, score=s) for h, s in scores])
