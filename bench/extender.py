"""Filter latency of the extender with 5,000 candidate node names, over the in-process ASGI app.

Builds a 5,000-node graph (plus the example quantum backends), then sends
filter requests exactly as kube-scheduler does with ``nodeCacheCapable: true``
(every node name in the body): single pods, and gangs of 8 where the first
member's request matches the whole group and the others are answered from the
ledger. Each placed pod is bound through the fake binder, so the cluster fills
up as the run goes. Prints one JSON document and draws ``bench/out/extender.png``.
Usage::

    python bench/extender.py [--nodes 5000] [--pods 400] [--gang 8] [--out bench/out]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fluence import resources  # noqa: E402
from fluence.graph import ClusterGraph  # noqa: E402
from fluence.ledger import Ledger  # noqa: E402
from fluence.pods import Pod, PodGroup, decode_node  # noqa: E402
from scheduler_extender.app import create_app  # noqa: E402
from scheduler_extender.scheduling import Scheduler  # noqa: E402


class Pods:
    """The pods the benchmark has created (the reflector cache of a real run)."""

    def __init__(self) -> None:
        self.by_ns: dict[str, list[Pod]] = {}

    def pods_in(self, namespace: str) -> Sequence[Pod]:
        return self.by_ns.get(namespace, [])

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
        return None


class Binder:
    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        return None

    def node_of(self, namespace: str, name: str) -> str | None:
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


async def run(n_nodes: int, n_pods: int, gang: int) -> dict[str, Any]:
    from fluence.pods import decode_pod

    names = [f"node-{i:05d}" for i in range(n_nodes)]
    t0 = time.perf_counter()
    graph = ClusterGraph(resources.load(ROOT / "examples" / "resources.yaml"), map(node, names))
    build_s = time.perf_counter() - t0
    ledger = Ledger(graph)
    view = Pods()
    scheduler = Scheduler(graph, ledger, view, Binder())
    app = create_app(scheduler, metrics=False)
    transport = httpx.ASGITransport(app=app)
    results: dict[str, list[float]] = {"single": [], "gang-first": [], "gang-member": []}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        count = 0
        while count < n_pods:
            kind = "single" if (count // gang) % 2 == 0 else "gang"
            members = (
                [pod_doc(f"s{count}", None, 1)]
                if kind == "single"
                else [pod_doc(f"g{count}-{i}", f"g{count}", gang) for i in range(gang)]
            )
            view.by_ns.setdefault("bench", []).extend(decode_pod(json.dumps(m)) for m in members)
            for i, m in enumerate(members):
                body = json.dumps({"Pod": m, "Nodes": None, "NodeNames": names}).encode()
                start = time.perf_counter()
                r = await client.post("/filter", content=body)
                elapsed = time.perf_counter() - start
                out = r.json()
                assert r.status_code == 200 and len(out["NodeNames"]) == 1, out
                series = (
                    "single" if kind == "single" else ("gang-first" if i == 0 else "gang-member")
                )
                results[series].append(elapsed)
                bind = {
                    "PodName": m["metadata"]["name"],
                    "PodNamespace": "bench",
                    "PodUID": m["metadata"]["uid"],
                    "Node": out["NodeNames"][0],
                }
                assert (await client.post("/bind", json=bind)).json() == {"Error": ""}
            count += len(members)
    summary = {
        k: {
            "n": len(v),
            "p50_ms": round(percentile(v, 0.50) * 1000, 3),
            "p99_ms": round(percentile(v, 0.99) * 1000, 3),
            "mean_ms": round(statistics.fmean(v) * 1000, 3),
        }
        for k, v in results.items()
        if v
    }
    every = [x for v in results.values() for x in v]
    return {
        "nodes": n_nodes,
        "pods": count,
        "gang_size": gang,
        "graph_build_s": round(build_s, 3),
        "filter_all": {
            "p50_ms": round(percentile(every, 0.50) * 1000, 3),
            "p99_ms": round(percentile(every, 0.99) * 1000, 3),
        },
        "filter": summary,
        "samples_ms": {k: [round(x * 1000, 3) for x in v] for k, v in results.items()},
    }


def draw(result: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, v in result["samples_ms"].items():
        if v:
            ax.plot(range(len(v)), v, ".", markersize=3, label=k)
    ax.set_yscale("log")
    ax.set_xlabel("request (in order; the cluster fills up)")
    ax.set_ylabel("filter latency (ms)")
    ax.set_title(f"fluence-extender filter, {result['nodes']} candidate nodes per request")
    ax.legend()
    fig.tight_layout()
    path = out / "extender.png"
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args.nodes, args.pods, args.gang))
    result["png"] = str(draw(result, args.out))
    samples = result.pop("samples_ms")
    (args.out / "extender.json").write_text(json.dumps({**result, "samples_ms": samples}))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
