"""One pod's life through the extender's verbs, as a churn repeats it (tests and bench/churn.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fluence import names
from tests.unit.fluence.test_ledger import bound
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env

QPU = {names.resource_name("qpu"): "1"}


def extender_churn(nodes: int = 16) -> tuple[Env, Callable[[int], None], Callable[[], None]]:
    """(the extender, one cycle of pod ``i``, close). A cycle creates the pod (every tenth
    asks for a qpu), filters and binds it, then shows it running and deleted to the ledger,
    as the watch would."""
    # Every node advertises qpu, as the device plugin does on every node.
    env = Env(
        [
            make_node(f"n{i}", cpu="8", extra={names.resource_name("qpu"): "100"})
            for i in range(nodes)
        ]
    )
    candidates = [f"n{j}" for j in range(nodes)]
    loop = asyncio.new_event_loop()
    env.graph.prepare_satisfiability()

    def cycle(i: int) -> None:
        pod = make_pod(f"p{i}", cpu="100m", extra=QPU if i % 10 == 0 else None)
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

    return env, cycle, loop.close
