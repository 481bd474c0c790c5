"""POST /preempt: never let kube-scheduler take part of a gang.

kube-scheduler's preemption evicts the victims on the one node it picks; for a
gang that spans nodes it would leave the rest of the group holding capacity
for nothing. fluence preempts whole groups itself (:mod:`scheduler_extender.eviction`,
started from filter), so this verb answers every request with no victims,
which ends kube-scheduler's own preemption for pods of this profile.
"""

from __future__ import annotations

from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.verbs.body import decode, read_body


async def handle(request: Request, limit: int) -> bytes:
    # Read and check the body all the same: a malformed request gets its clear error.
    decode(wire.preemption_args, await read_body(request, limit), "ExtenderPreemptionArgs")
    return wire.encoder.encode(wire.ExtenderPreemptionResult(node_name_to_meta_victims={}))
