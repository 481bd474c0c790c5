"""How many racks fluence's gangs span, with topology levels vs a flat graph, in one run.

A cluster of racks x nodes (default 50 x 100, 4 cpu each) takes a stream of gangs
(sizes 2-128 pods of 1 cpu, seeded), a share of them requiring one rack. The same
stream goes through two ledgers: fluence's cluster graph with zone/rack levels (the
default preference: one rack if one holds the gang, else one zone, else anywhere;
required gangs: one rack or wait), and the same graph without levels (the baseline,
as fluence was before). Each gang that is placed stays; one that does not fit is
counted as waiting and skipped. Printed as JSON, drawn into bench/out/topology.png:

- gangs placed, racks spanned per gang (mean, max, share at the ideal
  ceil(size / rack capacity), and share at the fewest racks whose free cores could
  hold the gang when it came), racks left wholly free, seconds spent placing.

Usage: python bench/topology.py [--racks 50] [--nodes 100] [--zones 5] [--gangs 400]
       [--required 0.3] [--churn 0]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fluence import resources  # noqa: E402
from fluence.cluster_graph import ClusterGraph  # noqa: E402
from fluence.ledger import Ledger  # noqa: E402
from fluence.pods import Node, decode_node  # noqa: E402
from tests.unit.fluence.test_pods import make_node, make_pod  # noqa: E402

RACK = "topology.kubernetes.io/rack"
ZONE = "topology.kubernetes.io/zone"
OUT = Path(__file__).resolve().parent / "out"


def cluster(racks: int, per_rack: int, cpu: int, zones: int = 5) -> list[Node]:
    nodes = []
    for r in range(racks):
        for i in range(per_rack):
            doc: dict[str, Any] = make_node(f"r{r:03d}n{i:03d}", cpu=str(cpu), raw=True)
            doc["metadata"]["labels"] |= {ZONE: f"z{r % zones}", RACK: f"rack{r:03d}"}
            nodes.append(decode_node(json.dumps(doc)))
    return nodes


def workload(count: int, required: float, seed: int) -> list[tuple[int, bool]]:
    rng = random.Random(seed)
    sizes = [2, 4, 8, 16, 32, 64, 128]
    return [(rng.choice(sizes), rng.random() < required) for _ in range(count)]


def run(
    levels: bool,
    nodes: list[Node],
    gangs: list[tuple[int, bool]],
    rack_slots: int,
    churn: float = 0.0,
    seed: int = 7,
) -> dict[str, Any]:
    graph = ClusterGraph(
        resources.ResourcesConfig(), nodes, topology=(ZONE, RACK) if levels else ()
    )
    ledger = Ledger(graph)
    rack_of = {n.name: n.metadata.labels[RACK] for n in nodes}
    spans: list[int] = []
    ideal = 0
    placed = waited = 0
    seconds = 0.0
    fewest_now = 0
    rng = random.Random(seed)
    running: list[list[str]] = []
    for g, (size, must) in enumerate(gangs):
        # The fewest racks whose free cores could hold it now (one-cpu pods).
        free: dict[str, int] = {}
        for n, u in graph.node_usage().items():
            free[rack_of[n]] = free.get(rack_of[n], 0) + u["core"]["free"] // 1000
        ranked = sorted(free.values(), reverse=True)
        least = next((k + 1 for k in range(len(ranked)) if sum(ranked[: k + 1]) >= size), 0)
        pods = [make_pod(f"g{g}-{i}", cpu="1", memory="64Mi", group=f"g{g}") for i in range(size)]
        started = time.perf_counter()
        res = ledger.place(f"default/g{g}", pods, topology=RACK if (must and levels) else "")
        seconds += time.perf_counter() - started
        if res.status != "allocated":
            waited += 1
            continue
        placed += 1
        for key in res.holdings:
            ledger.commit(key, "", res.holdings[key].node)
        running.append(list(res.holdings))
        if running and rng.random() < churn:  # a gang ends, leaving holes behind
            for key in running.pop(rng.randrange(len(running))):
                ledger.release(key, "ended")
        racks = {rack_of[h.node] for h in res.holdings.values()}
        spans.append(len(racks))
        ideal += len(racks) == math.ceil(size / rack_slots)
        fewest_now += len(racks) <= least
    used = {rack_of[n] for n, u in graph.node_usage().items() if u["core"]["allocated"]}
    return {
        "graph": "zone/rack levels" if levels else "flat (baseline)",
        "gangs_placed": placed,
        "gangs_waiting": waited,
        "racks_per_gang_mean": round(sum(spans) / len(spans), 3) if spans else 0,
        "racks_per_gang_max": max(spans, default=0),
        "share_at_ideal_racks": round(ideal / placed, 3) if placed else 0,
        "share_at_fewest_racks_free_then": round(fewest_now / placed, 3) if placed else 0,
        "racks_wholly_free": len(set(rack_of.values()) - used),
        "seconds": round(seconds, 3),
        "spans": spans,
    }


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from bench.plots import racks_spanned

    return racks_spanned(
        [(row["graph"], row["spans"]) for row in rows], "racks spanned per gang", path
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--racks", type=int, default=50)
    p.add_argument("--nodes", type=int, default=100, help="nodes per rack")
    p.add_argument("--cpu", type=int, default=4, help="cpus per node")
    p.add_argument("--zones", type=int, default=5, help="racks are dealt round the zones")
    p.add_argument("--gangs", type=int, default=400)
    p.add_argument("--required", type=float, default=0.3, help="share requiring one rack")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--churn", type=float, default=0.0, help="chance a running gang ends after each placement"
    )
    args = p.parse_args()
    nodes = cluster(args.racks, args.nodes, args.cpu, args.zones)
    gangs = workload(args.gangs, args.required, args.seed)
    rack_slots = args.nodes * args.cpu
    rows = [
        run(levels, nodes, gangs, rack_slots, args.churn, args.seed) for levels in (False, True)
    ]
    OUT.mkdir(exist_ok=True)
    figure = plot(rows, OUT / "topology.png")
    base, topo = rows
    summary = {
        "racks": args.racks,
        "nodes_per_rack": args.nodes,
        "zones": args.zones,
        "gangs": args.gangs,
        "required_share": args.required,
        "churn": args.churn,
        "results": [{k: v for k, v in r.items() if k != "spans"} for r in rows],
        "ratio_time_levels_vs_flat": round(topo["seconds"] / base["seconds"], 2)
        if base["seconds"]
        else None,
        "plot": str(figure),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
