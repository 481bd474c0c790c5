"""Filter latency of the extender with 5,000 candidate node names, in process.

Builds a 5,000-node graph (plus the example quantum backends), then sends
filter requests exactly as kube-scheduler does with ``nodeCacheCapable: true``
(every node name in the body): single pods, and gangs of 8 where the first
member's request matches the whole group and the others are answered from the
ledger. Each placed pod is bound through the fake binder, so the cluster fills
up as the run goes.

Requests go straight into the ASGI app (the bytes an HTTP server would hand
it), so the numbers are the extender's own cost, not an HTTP client's. Each
request is timed twice: wall clock, and CPU time of the whole process, which a
busy shared machine disturbs far less. Telemetry is set up as in the real
binary (tracer provider, INFO logs formatted as JSON, sent to /dev/null).
Prints one JSON document and draws ``bench/out/extender.png``. Usage::

    python bench/extender.py [--nodes 5000] [--pods 1600] [--gang 8] [--out bench/out]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.plots import new_figure, save_figure  # noqa: E402
from fluence import resources, telemetry  # noqa: E402
from fluence.cluster_graph import ClusterGraph  # noqa: E402
from fluence.groups import GroupRef, PodsByGroup  # noqa: E402
from fluence.ledger import Ledger  # noqa: E402
from fluence.pods import Pod, PodGroup, decode_node  # noqa: E402
from scheduler_extender.app import create_app  # noqa: E402
from scheduler_extender.binder import NullBinder  # noqa: E402
from scheduler_extender.cluster_watch import freeze_startup_heap, thaw_heap  # noqa: E402
from scheduler_extender.scheduling import Scheduler  # noqa: E402
from tests.support.asgi import post  # noqa: E402


class Pods:
    """The pods the benchmark has created (the reflector cache of a real run)."""

    def __init__(self) -> None:
        self.by_ns: dict[str, list[Pod]] = {}
        self.by_group = PodsByGroup()

    def add(self, pod: Pod) -> None:
        self.by_ns.setdefault(pod.metadata.namespace, []).append(pod)
        self.by_group.update(pod)

    def pods_in(self, namespace: str) -> Sequence[Pod]:
        return self.by_ns.get(namespace, [])

    def group_pods(self, ref: GroupRef) -> Sequence[Pod]:
        return self.by_group.members(ref)

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
        return None


def node(name: str) -> Any:
    doc = {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}}}
    return decode_node(json.dumps(doc))


def pod_doc(name: str, group: str | None, size: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "bench", "uid": f"uid-{name}"}
    if group:
        meta["labels"] = {"fluence.flux-framework.org/group": group}
        meta["annotations"] = {"fluence.flux-framework.org/group-size": str(size)}
    return {
        "metadata": meta,
        "spec": {
            "schedulerName": "fluence",
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
            ],
        },
        "status": {"phase": "Pending"},
    }


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def call(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    """One POST through the ASGI app, as an HTTP server would deliver it."""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    return await post(app, path, receive, len(body))


def stats(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50_ms": round(percentile(xs, 0.50) * 1000, 3),
        "p99_ms": round(percentile(xs, 0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(xs) * 1000, 3),
    }


def quiet_telemetry() -> None:
    """Telemetry as the binary sets it up, with the JSON log lines going to /dev/null."""
    telemetry.setup("fluence-extender-bench", level="INFO")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process


async def run(n_nodes: int, n_pods: int, gang: int) -> dict[str, Any]:
    from fluence.pods import decode_pod

    quiet_telemetry()
    names = [f"node-{i:05d}" for i in range(n_nodes)]
    t0 = time.perf_counter()
    graph = ClusterGraph(resources.load(ROOT / "examples" / "resources.yaml"), map(node, names))
    build_s = time.perf_counter() - t0
    ledger = Ledger(graph)
    freeze_startup_heap()  # as the binary does once its ledger is rebuilt
    view = Pods()
    scheduler = Scheduler(graph, ledger, view, NullBinder())
    app = create_app(scheduler, metrics=False)
    series = ("single", "gang-first", "gang-member")
    wall: dict[str, list[float]] = {k: [] for k in series}
    cpu: dict[str, list[float]] = {k: [] for k in series}
    count = 0
    while count < n_pods:
        kind = "single" if (count // gang) % 2 == 0 else "gang"
        members = (
            [pod_doc(f"s{count}", None, 1)]
            if kind == "single"
            else [pod_doc(f"g{count}-{i}", f"g{count}", gang) for i in range(gang)]
        )
        for m in members:
            view.add(decode_pod(json.dumps(m)))
        for i, m in enumerate(members):
            body = json.dumps({"Pod": m, "Nodes": None, "NodeNames": names}).encode()
            c0, w0 = time.process_time(), time.perf_counter()
            status, raw = await call(app, "/filter", body)
            w1, c1 = time.perf_counter(), time.process_time()
            out = json.loads(raw)
            assert status == 200 and len(out["NodeNames"]) == 1, out
            k = "single" if kind == "single" else ("gang-first" if i == 0 else "gang-member")
            wall[k].append(w1 - w0)
            cpu[k].append(c1 - c0)
            bind = {
                "PodName": m["metadata"]["name"],
                "PodNamespace": "bench",
                "PodUID": m["metadata"]["uid"],
                "Node": out["NodeNames"][0],
            }
            status, raw = await call(app, "/bind", json.dumps(bind).encode())
            assert status == 200 and json.loads(raw) == {"Error": ""}, raw
        count += len(members)
    every_wall = [x for v in wall.values() for x in v]
    every_cpu = [x for v in cpu.values() for x in v]
    return {
        "nodes": n_nodes,
        "pods": count,
        "gang_size": gang,
        "graph_build_s": round(build_s, 3),
        "filter_all": {"cpu": stats(every_cpu), "wall": stats(every_wall)},
        "filter": {k: {"cpu": stats(cpu[k]), "wall": stats(wall[k])} for k in series if cpu[k]},
        "samples_ms": {k: [round(x * 1000, 3) for x in v] for k, v in cpu.items()},
    }


def draw(result: dict[str, Any], out: Path) -> Path:
    fig, ax = new_figure()
    for k, v in result["samples_ms"].items():
        if v:
            ax.plot(range(len(v)), v, ".", markersize=3, label=k)
    ax.set_yscale("log")
    ax.set_xlabel("request (in order; the cluster fills up)")
    ax.set_ylabel("filter CPU time (ms)")
    ax.set_title(f"fluence-extender filter, {result['nodes']} candidate nodes per request")
    return save_figure(fig, ax, out / "extender.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=1600)
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args.nodes, args.pods, args.gang))
    thaw_heap()
    result["png"] = str(draw(result, args.out))
    samples = result.pop("samples_ms")
    (args.out / "extender.json").write_text(json.dumps({**result, "samples_ms": samples}))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
