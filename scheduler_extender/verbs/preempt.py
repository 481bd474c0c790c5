"""POST /preempt: preempt whole groups, never let kube-scheduler take part of a gang.

kube-scheduler asks here when its own filters found no node for a pod (a full
cluster never reaches /filter). Its preemption evicts the victims on the one
node it picks; for a gang that spans nodes that would leave the rest of the
group holding capacity for nothing. So the pod's group is matched as filter
would, which starts fluence's own whole-group preemption when a what-if shows
it then fits (:mod:`scheduler_extender.eviction`), and kube-scheduler gets no
victims, which ends its own preemption for pods of this profile.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.verbs.body import decode, pod_of, read_body


async def handle(request: Request, scheduler: Scheduler, limit: int) -> bytes:
    args = decode(wire.preemption_args, await read_body(request, limit), "ExtenderPreemptionArgs")
    await asyncio.to_thread(scheduler.preempt, pod_of(args.pod))
    return wire.encoder.encode(wire.ExtenderPreemptionResult(node_name_to_meta_victims={}))
