"""Matcher speed: graph load, memory and per-match latency, against flux-sched resource-query.

Two graph shapes: ``dense``, the baseline's (node = 2 sockets x (32 cores + 4
GPUs + memory)), and ``pooled``, the Kubernetes graph's (node = one core pool
of 64,000 milli-CPUs, one memory pool in MiB, one pool of 8 GPUs, matched in
partial-pool mode; jobspec core counts scaled to milli-CPUs). Clusters of 100,
1,000, 5,000 and 10,000 nodes; jobspecs node1x, core4, gang16, node64x; every
policy. Each case runs in its own process so RSS is the case's own. Prints one
JSON document and draws ``bench/out/matcher.png``.

The baseline numbers are resource-query's (dense shape, up to 5,000 nodes, the
policies it was measured with), from a machine of the same kind and kept in the
reference notes; those rows print the ratio baseline/ours (above 1 means
fluence is faster) and run ``--repeat`` times, the others ``--extra-repeat``
times. Usage::

    python bench/matcher.py [--sizes 100,1000,5000,10000] [--shapes dense,pooled]
        [--policies first,low,high,lonode,hinode,locality] [--quick]
        [--repeat 5] [--extra-repeat 1] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("FLUENCE_SHARED", ROOT.parent / "shared"))
INPUTS = SHARED / "bench-inputs"

# resource-query (flux-sched v0.54, -O3) on the same kind of machine: p50 ms per match,
# graph load seconds and max RSS MB (one run each, read as +-10-20 %).
BASELINE: dict[tuple[int, str, str], float] = {
    (100, "first", "node1x"): 0.567,
    (100, "low", "node1x"): 7.295,
    (100, "lonode", "node1x"): 6.944,
    (100, "high", "node1x"): 5.21,
    (100, "first", "core4"): 0.22,
    (100, "low", "core4"): 5.51,
    (100, "high", "core4"): 6.282,
    (100, "first", "gang16"): 1.44,
    (100, "high", "gang16"): 6.259,
    (100, "first", "node64x"): 8.062,
    (1000, "first", "node1x"): 0.345,
    (1000, "low", "node1x"): 117.677,
    (1000, "lonode", "node1x"): 104.919,
    (1000, "high", "node1x"): 92.627,
    (1000, "first", "core4"): 0.217,
    (1000, "low", "core4"): 149.558,
    (1000, "high", "core4"): 153.977,
    (1000, "first", "gang16"): 41.087,
    (1000, "high", "gang16"): 88.806,
    (1000, "first", "node64x"): 8.038,
    (5000, "first", "node1x"): 0.604,
    (5000, "low", "node1x"): 652.765,
    (5000, "lonode", "node1x"): 848.402,
    (5000, "high", "node1x"): 1014.126,
    (5000, "first", "core4"): 0.372,
    (5000, "low", "core4"): 1213.959,
    (5000, "high", "core4"): 914.417,
    (5000, "first", "gang16"): 63.864,
    (5000, "high", "gang16"): 613.35,
    (5000, "first", "node64x"): 7.264,
}
BASELINE_LOAD_S = {100: 0.18, 1000: 2.59, 5000: 16.5}
BASELINE_RSS_MB = {100: 54.4, 1000: 535.0, 5000: 2404.3}

# Match counts: enough to fill the graph for `first`, fewer for the whole-graph policies.
POLICIES = ("first", "low", "high", "lonode", "hinode", "locality")
JOBSPECS = ("node1x", "core4", "gang16", "node64x")
CAPS = {"first": 1000}
OTHER_CAP = 50
# The pooled node: what a dense node holds, as the Kubernetes graph models it.
POOLED_NODE = {"cpus_milli": 64_000, "memory_mib": 512 * 1024, "gpus": 8}


def graph_file(shape: str, nodes: int, out: Path) -> Path:
    path = out / (f"c{nodes}.json" if shape == "dense" else f"p{nodes}.json")
    if path.exists():
        return path
    if shape == "dense":
        subprocess.run(
            [sys.executable, str(INPUTS / "gen_jgf.py"), str(nodes), str(path)], check=True
        )
    else:
        from fluxion_nb.examples import pooled_cluster

        path.write_text(json.dumps(pooled_cluster(nodes=nodes, **POOLED_NODE)))
    return path


def pooled_jobspec(text: str) -> str:
    """The jobspec with core counts in milli-CPUs, as the extender writes them."""
    import yaml

    doc = yaml.safe_load(text)

    def scale(resources: list[dict[str, Any]]) -> None:
        for r in resources:
            if r["type"] == "core":
                r["count"] = r["count"] * 1000
            scale(r.get("with", []))

    scale(doc["resources"])
    return json.dumps(doc)


def run_case(graph: Path, policy: str, jobspec: Path, count: int, shape: str) -> dict[str, Any]:
    """In a child process: load, then `count` allocate matches, timing each."""
    import psutil

    from fluxion_nb import Graph

    text = graph.read_text()
    t0 = time.perf_counter()
    g = Graph(text, policy=policy, match_format="rv1_nosched", partial_pools=shape == "pooled")
    load_s = time.perf_counter() - t0
    del text
    spec = jobspec.read_text()
    if shape == "pooled":
        spec = pooled_jobspec(spec)
    ok_ms: list[float] = []
    failed_ms: list[float] = []
    for _ in range(count):
        t = time.perf_counter()
        a = g.match(spec)
        ms = (time.perf_counter() - t) * 1000
        (ok_ms if a.ok else failed_ms).append(ms)
        if not a.ok:
            break
    rss_mb = psutil.Process().memory_info().rss / 2**20
    return {"load_s": load_s, "ok_ms": ok_ms, "failed_ms": failed_ms, "rss_mb": rss_mb}


def percentile(values: list[float], p: float) -> float | None:
    ok = sorted(values)
    return round(ok[min(len(ok) - 1, int(p * len(ok)))], 4) if ok else None


def summarize(
    shape: str, nodes: int, policy: str, js: str, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """One row from the case's runs: the run with the median p50 stands for the case.

    The machine's speed drifts by a factor of two over minutes, so every case
    runs several times, the runs spread over the whole benchmark; the other
    runs' p50 are listed so the spread is visible.
    """
    p50s = [percentile(r["ok_ms"], 0.5) for r in runs]
    order = sorted(range(len(runs)), key=lambda i: p50s[i] or 0.0)
    raw = runs[order[len(order) // 2]]
    ok = sorted(raw["ok_ms"])

    def pct(p: float) -> float | None:
        return percentile(ok, p)

    p50 = pct(0.5)
    # The quickest run: the nearest to the quiet machine the baseline had.
    best = min((p for p in p50s if p), default=None)
    # Each run's first match walks a fresh graph with nothing to replay (later
    # matches of the repeated jobspec replay memoized subtrees): median over runs.
    firsts = sorted(r["ok_ms"][0] for r in runs if r["ok_ms"])
    first = round(firsts[len(firsts) // 2], 4) if firsts else None
    base = BASELINE.get((nodes, policy, js)) if shape == "dense" else None
    base_load = BASELINE_LOAD_S.get(nodes) if shape == "dense" else None
    base_rss = BASELINE_RSS_MB.get(nodes) if shape == "dense" else None
    return {
        "runs": len(runs),
        "p50_ms_runs": p50s,
        "shape": shape,
        "graph": f"c{nodes}" if shape == "dense" else f"p{nodes}",
        "policy": policy,
        "jobspec": js,
        "matches_ok": len(ok),
        "matches_failed": len(raw["failed_ms"]),
        "mean_ms": round(statistics.fmean(ok), 4) if ok else None,
        "p50_ms": p50,
        "p99_ms": pct(0.99),
        "max_ms": round(ok[-1], 4) if ok else None,
        "load_s": round(raw["load_s"], 3),
        "rss_mb": round(raw["rss_mb"], 1),
        "baseline_p50_ms": base,
        "speedup_p50": round(base / p50, 1) if base and p50 else None,
        "p50_ms_best": best,
        "speedup_best": round(base / best, 1) if base and best else None,
        "first_ms": first,
        "speedup_first": round(base / first, 1) if base and first else None,
        "load_speedup": round(base_load / raw["load_s"], 1) if base_load else None,
        "rss_ratio": round(base_rss / raw["rss_mb"], 1) if base_rss else None,
    }


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["p50_ms"] and r["baseline_p50_ms"]]
    labels = [f"{r['graph']} {r['policy']} {r['jobspec']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 5))
    ax.bar([i - 0.2 for i in x], [r["baseline_p50_ms"] for r in rows], 0.4, label="resource-query")
    ax.bar([i + 0.2 for i in x], [r["p50_ms"] for r in rows], 0.4, label="fluxion_nb")
    ax.set_yscale("log")
    ax.set_ylabel("p50 ms per match (log)")
    ax.set_xticks(list(x), labels, rotation=70, ha="right", fontsize=7)
    ax.legend()
    ax.set_title("Match latency: fluxion_nb vs flux-sched resource-query")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100,1000,5000,10000")
    ap.add_argument("--shapes", default="dense,pooled")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--quick", action="store_true", help="first policy and 100 matches only")
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="runs of a case with a baseline (the median is reported)",
    )
    ap.add_argument("--extra-repeat", type=int, default=1, help="runs of the other cases")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    # In a child: graph policy jobspec K shape.
    ap.add_argument("--case", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.case:
        g, policy, js, k, shape = a.case
        print(json.dumps(run_case(Path(g), policy, Path(js), int(k), shape)))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    policies = ["first"] if a.quick else a.policies.split(",")
    cases = []
    for shape in a.shapes.split(","):
        for nodes in (int(s) for s in a.sizes.split(",")):
            graph = graph_file(shape, nodes, a.out)
            for js in JOBSPECS:
                for policy in policies:
                    baseline = shape == "dense" and (nodes, policy, js) in BASELINE
                    cases.append(
                        (shape, nodes, graph, policy, js, a.repeat if baseline else a.extra_repeat)
                    )
    # Round-robin: every case once per pass, so a slow spell of the machine
    # hits one run of many cases rather than every run of one case.
    runs: dict[tuple[str, int, str, str], list[dict[str, Any]]] = {}
    for turn in range(max(c[-1] for c in cases)):
        for shape, nodes, graph, policy, js, repeat in cases:
            if turn >= repeat:
                continue
            k = 100 if a.quick else CAPS.get(policy, OTHER_CAP)
            spec = INPUTS / "jobspecs" / f"{js}.yaml"
            # The child runs like this process (e.g. -S, so PYTHONPATH picks the tree).
            flags = ["-S"] if sys.flags.no_site else []
            proc = subprocess.run(
                [
                    sys.executable,
                    *flags,
                    __file__,
                    "--case",
                    str(graph),
                    policy,
                    str(spec),
                    str(k),
                    shape,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.setdefault((shape, nodes, policy, js), []).append(json.loads(proc.stdout))
    rows = []
    for shape, nodes, _graph, policy, js, _repeat in cases:
        row = summarize(shape, nodes, policy, js, runs[(shape, nodes, policy, js)])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    doc = {"benchmark": "matcher", "rows": rows}
    (a.out / "matcher.json").write_text(json.dumps(doc, indent=1))
    plot(rows, a.out / "matcher.png")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
