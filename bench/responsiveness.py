"""Probe latency while a rebuild of a large graph holds it, against the same probes idle.

Builds the extender app over a graph of ``--nodes`` nodes, then changes every
node's allocatable (a rebuild, in a thread) while probes and one filter call run on
the event loop. The null baseline, in the same run, is the same probes with no
rebuild under way. Each round is measured ``--rounds`` times; prints JSON (rebuild
seconds, probes answered during it, worst and median probe milliseconds, and the
worst probe as a share of the rebuild: near 0 means the loop never waited for the
graph) and draws ``bench/out/responsiveness.png``::

    python bench/responsiveness.py [--nodes 5000] [--rounds 3] [--out bench/out]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.plots import new_figure, save_figure  # noqa: E402
from fluence import resources  # noqa: E402
from fluence.cluster_graph import ClusterGraph  # noqa: E402
from fluence.ledger import Ledger  # noqa: E402
from scheduler_extender.app import create_app  # noqa: E402
from scheduler_extender.cluster_watch import freeze_startup_heap, thaw_heap  # noqa: E402
from scheduler_extender.scheduling import Scheduler  # noqa: E402
from tests.unit.fluence.test_pods import make_node, make_pod  # noqa: E402
from tests.unit.scheduler_extender.test_app import FakeBinder, FakeCluster  # noqa: E402

IDLE_PROBES = 50


async def one_round(nodes: int, cpu: str) -> dict[str, Any]:
    listed = [make_node(f"n{i}") for i in range(nodes)]
    graph = ClusterGraph(resources.load(str(ROOT / "examples/resources.yaml")), listed)
    cluster = FakeCluster()
    app = create_app(Scheduler(graph, Ledger(graph), cluster, FakeBinder()), metrics=False)
    bigger = [make_node(f"n{i}", cpu=cpu) for i in range(nodes)]
    pod = make_pod("p", cpu="1", raw=True)
    cluster.add(pod)
    body = {"Pod": pod, "Nodes": None, "NodeNames": ["n0", "n1"]}
    freeze_startup_heap()
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as c:
            idle = []
            for _ in range(IDLE_PROBES):
                t = time.perf_counter()
                await c.get("/healthz")
                idle.append(time.perf_counter() - t)
            started = time.perf_counter()
            rebuild = threading.Thread(target=graph.reset_nodes, args=(bigger,))
            rebuild.start()
            while rebuild.is_alive() and not graph.busy():
                await asyncio.sleep(0)
            filtered = asyncio.create_task(c.post("/filter", json=body))
            during = []
            while rebuild.is_alive():
                t = time.perf_counter()
                await c.get("/healthz")
                during.append(time.perf_counter() - t)
                await asyncio.sleep(0.005)
            rebuild.join()
            rebuild_s = time.perf_counter() - started
            answer = await filtered
    finally:
        thaw_heap()
    assert answer.status_code == 200
    return {
        "rebuild_s": round(rebuild_s, 3),
        "probes_during": len(during),
        "worst_probe_ms": round(max(during, default=0) * 1000, 2),
        "median_probe_ms": round(statistics.median(during) * 1000, 3) if during else None,
        "idle_worst_probe_ms": round(max(idle) * 1000, 2),
        "worst_share_of_rebuild": round(max(during, default=0) / rebuild_s, 4),
    }


def summary(rounds: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in rounds]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    rounds = [
        asyncio.run(one_round(args.nodes, cpu="8" if i % 2 == 0 else "16"))
        for i in range(args.rounds)
    ]
    keys = ("rebuild_s", "probes_during", "worst_probe_ms", "idle_worst_probe_ms")
    doc = {
        "nodes": args.nodes,
        "rounds": rounds,
        **{k: summary(rounds, k) for k in (*keys, "worst_share_of_rebuild")},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    fig, ax = new_figure()
    x = range(len(rounds))
    ax.bar([i - 0.2 for i in x], [r["rebuild_s"] * 1000 for r in rounds], 0.4, label="rebuild")
    ax.bar([i + 0.2 for i in x], [r["worst_probe_ms"] for r in rounds], 0.4, label="worst probe")
    ax.set_xticks(list(x), [str(i + 1) for i in x])
    ax.set_xlabel("round")
    ax.set_ylabel("milliseconds")
    ax.set_title(f"Probes while a {args.nodes}-node rebuild holds the graph")
    doc["plot"] = str(save_figure(fig, ax, args.out / "responsiveness.png"))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
