"""POST /preempt: accept the scheduler's victims, reported by UID.

Fluence does not pick victims itself; a preempted pod's allocation is released
by the watch when it ends, and its preemptor is placed through filter again.
"""

from __future__ import annotations

from starlette.requests import Request

from scheduler_extender import wire
from scheduler_extender.verbs.body import decode, read_body


async def handle(request: Request, limit: int) -> bytes:
    args = decode(wire.preemption_args, await read_body(request, limit), "ExtenderPreemptionArgs")
    out: dict[str, wire.MetaVictims] = {}
    if args.node_name_to_meta_victims is not None:
        out = dict(args.node_name_to_meta_victims)
    elif args.node_name_to_victims is not None:
        for node, v in args.node_name_to_victims.items():
            out[node] = wire.MetaVictims(
                pods=[wire.MetaPod(uid=wire.pod_uid(p)) for p in v.pods],
                num_pdb_violations=v.num_pdb_violations,
            )
    return wire.encoder.encode(wire.ExtenderPreemptionResult(node_name_to_meta_victims=out))
