"""10,000 pods created, placed, bound, run and deleted through the extender: nothing accumulates.

Every pod ever scheduled used to leave its record (R text, vertex lists) in the
matcher after its release. Now the matcher holds no job once the pods are gone.
What that means for the process's memory is measured by ``bench/churn.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from fluence import names
from tests.unit.fluence.test_ledger import bound
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env

WARM_UP = 5_000
"""More than the ledger's bounded caches hold (the last match of 4,096 groups)."""
CYCLES = 10_000


@pytest.mark.slow
def test_create_delete_churn_returns_every_allocation() -> None:
    env = Env([make_node(f"n{i}", cpu="8") for i in range(16)])
    qpu = {names.resource_name("qpu"): "1"}

    candidates = [f"n{j}" for j in range(16)]
    loop = asyncio.new_event_loop()

    def cycle(i: int) -> None:
        # The extender's verbs as its handlers call them (HTTP framing is tested elsewhere).
        pod = make_pod(f"p{i}", cpu="100m", extra=qpu if i % 10 == 0 else None)
        env.cluster.pods[pod.key] = pod
        (node,) = env.scheduler.filter(pod, candidates).nodes
        error = loop.run_until_complete(
            env.scheduler.bind("default", pod.metadata.name, pod.metadata.uid, node)
        )
        assert error == ""
        _, annotations = env.binder.bound.pop(pod.key)
        env.ledger.observe(bound(pod, node, annotations))  # the watch: Running
        env.ledger.forget(pod.key)  # the watch: deleted
        env.cluster.pods.pop(pod.key, None)

    env.graph.prepare_satisfiability()
    for i in range(WARM_UP + CYCLES):
        cycle(i)
    assert env.ledger.holdings() == {}
    assert all(u["core"]["allocated"] == 0 for u in env.graph.node_usage().values())
    assert not any(env.graph.backend_usage().values())
    assert env.graph._g.jobs() == []
    loop.close()
