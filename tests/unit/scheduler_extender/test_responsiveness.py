"""The event loop keeps answering while a rebuild of a 5,000-node graph holds the graph.

How long a probe waits then, against the rebuild, is measured by ``bench/responsiveness.py``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx

from fluence import resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from scheduler_extender.app import create_app
from scheduler_extender.cluster_watch import freeze_startup_heap, thaw_heap
from scheduler_extender.scheduling import Scheduler
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import FakeBinder, FakeCluster

NODES = 5000


async def test_probes_and_filters_answer_during_a_rebuild() -> None:
    nodes = [make_node(f"n{i}") for i in range(NODES)]
    graph = ClusterGraph(resources.load("examples/resources.yaml"), nodes)
    cluster = FakeCluster()
    scheduler = Scheduler(graph, Ledger(graph), cluster, FakeBinder())
    app = create_app(scheduler, metrics=False)
    bigger = [make_node(f"n{i}", cpu="8") for i in range(NODES)]  # an allocatable change
    # As the binary does after startup: what exists now (here also everything earlier
    # tests left in this process) stays out of the full collections a rebuild triggers.
    freeze_startup_heap()
    try:
        await _measure(graph, cluster, app, nodes, bigger)
    finally:
        thaw_heap()


async def _measure(
    graph: ClusterGraph, cluster: FakeCluster, app: Any, nodes: list[Any], bigger: list[Any]
) -> None:
    pod = make_pod("p", cpu="1", raw=True)
    cluster.add(pod)
    body = {"Pod": pod, "Nodes": None, "NodeNames": ["n0", "n1"]}
    probes = 0
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        rebuild = threading.Thread(target=graph.reset_nodes, args=(bigger,))
        rebuild.start()
        while rebuild.is_alive() and not graph.busy():
            await asyncio.sleep(0)
        filtered = asyncio.create_task(client.post("/filter", json=body))
        answered_during = False
        while rebuild.is_alive():
            r = await client.get("/healthz")
            assert r.status_code == 200
            probes += 1
            answered_during |= rebuild.is_alive() and not filtered.done()
            await asyncio.sleep(0.005)
        rebuild.join()
        answer = await filtered
    assert answer.status_code == 200 and answer.json()["NodeNames"] in (["n0"], ["n1"])
    # Blocked behind the filter, the loop would answer no probe until the rebuild ended.
    assert answered_during, f"{probes} probes, none answered while the filter waited"
