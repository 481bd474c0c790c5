"""Under pressure: does every group finish, how close to the bound, and who waits how long.

A stream of groups (seeded: 1-32 pods of 1 cpu, runtimes of seconds, some of
high priority) arrives faster than the cluster (8 or 64 nodes of 4 cpu) can run
it. Three placement rules take the same stream in one run, on the same fluence
ledger and Fluxion graph, with simulated time (each pod runs for its runtime
once its whole group is placed, as an MPI job does):

- ``per-pod``: pods are placed one at a time as they fit, in arrival order, with
  no notion of a group (kube-scheduler's default): a group starts only when its
  last pod is placed, and the pods placed before hold their cores meanwhile;
- ``gang``: a group is placed whole or not at all, any group that fits now goes
  (all-or-nothing with retries, no reservations: native gang scheduling);
- ``fluence``: the ledger's queue: priority then arrival, reservations for the
  waiting groups, conservative backfill.

This is a model of the first two rules, not kube-scheduler itself: it shows
what each rule does to the same stream, with the matcher deciding every fit.
Printed as JSON and drawn into bench/out/pressure.png (cores busy over time):

- groups completed (a rule that stops with groups left has clogged), makespan,
  the lower bound (total pod-seconds / cores, and the longest group's runtime),
  the biggest gang's wait, core-seconds held by partly placed groups, core-seconds
  idle, and how the groups that need the whole cluster ran (each run of them
  back to back drains the cluster once).

Usage: python bench/pressure.py [--nodes 8 64] [--groups 100] [--seed 3]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fluence import resources  # noqa: E402
from fluence.cluster_graph import ClusterGraph  # noqa: E402
from fluence.ledger import Ledger  # noqa: E402
from fluence.pods import Pod, decode_pod  # noqa: E402
from fluence.scheduling.backfill import NONE, conservative  # noqa: E402
from tests.unit.fluence.test_pods import make_node, make_pod  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
CPU = 4
RULES = ("per-pod", "gang", "fluence")


@dataclass
class Group:
    name: str
    size: int
    runtime: int
    arrival: int
    priority: int
    pods: list[Pod] = field(default_factory=list)
    placed: set[str] = field(default_factory=set)
    start: int | None = None
    end: int | None = None


def workload(count: int, cores: int, seed: int) -> list[Group]:
    """Arrivals about twice as fast as the cluster drains them; 1 in 10 of high priority."""
    rng = random.Random(seed)
    out, t = [], 0
    sizes = [1, 1, 1, 2, 2, 4, 4, 8, 16, 32]
    for i in range(count):
        size = min(rng.choice(sizes), cores)
        runtime = rng.randint(5, 60)
        priority = 1000 if rng.random() < 0.1 else 0
        out.append(Group(f"g{i:03d}", size, runtime, t, priority))
        mean_work = 9 * 30  # pod-seconds per group, about
        t += max(0, int(rng.expovariate(2 * cores / mean_work)))
    return out


def pods_of(g: Group) -> list[Pod]:
    out = []
    for i in range(g.size):
        doc: dict[str, Any] = make_pod(f"{g.name}-{i}", cpu="1", raw=True)
        # Each pod runs its runtime and no longer: a deadline the kubelet would enforce.
        doc["spec"]["activeDeadlineSeconds"] = g.runtime
        if g.priority:
            doc["spec"]["priority"] = g.priority
        out.append(decode_pod(json.dumps(doc)))
    return out


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def simulate(rule: str, nodes: int, stream: list[Group], limit: int) -> dict[str, Any]:
    clock = Clock()
    graph = ClusterGraph(
        resources.parse("resources: []"),
        [make_node(f"n{i:02d}", cpu=str(CPU)) for i in range(nodes)],
        clock=clock,
    )
    ledger = Ledger(graph, clock=clock, backfill=conservative() if rule == "fluence" else NONE)
    groups = [Group(g.name, g.size, g.runtime, g.arrival, g.priority) for g in stream]
    for g in groups:
        g.pods = pods_of(g)
    arrivals = sorted(groups, key=lambda g: g.arrival)
    ends: list[tuple[int, str]] = []
    by_name = {g.name: g for g in groups}
    pending: list[Group] = []
    held_partial = 0.0  # core-seconds held by pods of groups not all placed
    busy: list[tuple[int, int]] = []  # (t, cores in use)
    t, i, started = 0, 0, time.perf_counter()
    while t <= limit:
        while ends and ends[0][0] <= t:
            _, name = heapq.heappop(ends)
            g = by_name[name]
            for p in g.pods:
                ledger.release(p.key, "pod Succeeded")
        while i < len(arrivals) and arrivals[i].arrival <= t:
            pending.append(arrivals[i])
            i += 1
        place(rule, ledger, pending)
        for g in list(pending):
            if len(g.placed) == g.size:
                g.start, g.end = t, t + g.runtime
                heapq.heappush(ends, (g.end, g.name))
                pending.remove(g)
        partial = sum(len(g.placed) for g in pending)
        in_use = sum(g.size for g in groups if g.start is not None and g.end and g.end > t)
        busy.append((t, in_use + partial))
        if i == len(arrivals) and not pending and not ends:
            break
        # Next event: an arrival or an end (a clogged rule has neither: it stops at limit).
        nxt = [e[0] for e in ends[:1]] + ([arrivals[i].arrival] if i < len(arrivals) else [])
        step = (min(nxt) if nxt else limit + 1) - t
        held_partial += partial * max(step, 0)
        t += max(step, 1)
        clock.t = float(t)
    done = [g for g in groups if g.end is not None and g.end <= max(t, 0)]
    biggest = max(groups, key=lambda g: (g.size, -g.arrival))
    return {
        "rule": rule,
        "nodes": nodes,
        "groups": len(groups),
        "completed": len(done),
        "clogged": len(done) < len(groups),
        "makespan": max((g.end or 0 for g in done), default=0)
        if len(done) == len(groups)
        else None,
        "biggest_gang": biggest.size,
        "biggest_gang_wait": (biggest.start - biggest.arrival)
        if biggest.start is not None
        else None,
        "high_priority_mean_wait": _mean(
            [g.start - g.arrival for g in groups if g.priority and g.start is not None]
        ),
        "partial_core_seconds": round(held_partial, 1),
        "idle_core_seconds": idle_core_seconds(busy, nodes * CPU, t),
        "whole_cluster_groups_in_a_row": runs_of_whole_cluster_groups(groups, nodes * CPU),
        "seconds": round(time.perf_counter() - started, 2),
        "busy": busy,
    }


def idle_core_seconds(busy: list[tuple[int, int]], cores: int, until: int) -> int:
    """Cores held by nothing, summed up to ``until``: what keeps a makespan above the bound."""
    ends = [t for t, _ in busy[1:]] + [until]
    return sum(
        (cores - c) * max(0, min(end, until) - t) for (t, c), end in zip(busy, ends, strict=True)
    )


def runs_of_whole_cluster_groups(groups: list[Group], cores: int) -> list[int]:
    """Groups that need every core, counted by how many started back to back.

    Each run of them needs the cluster drained once; a rule that interleaves them
    with other work (in arrival order) drains it more often than one that saves
    them all for the end.
    """
    started = sorted((g for g in groups if g.start is not None), key=lambda g: g.start or 0)
    runs: list[int] = []
    previous_whole = False
    for g in started:
        whole = g.size >= cores
        if whole and previous_whole:
            runs[-1] += 1
        elif whole:
            runs.append(1)
        previous_whole = whole
    return runs


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def place(rule: str, ledger: Ledger, pending: list[Group]) -> None:
    if rule == "per-pod":
        for g in pending:
            for p in g.pods:
                if p.key in g.placed:
                    continue
                if ledger.place(p.key, [p]).status == "allocated":
                    g.placed.add(p.key)
        return
    order = pending if rule == "gang" else sorted(pending, key=lambda g: -g.priority)
    for g in order:
        if not g.placed and ledger.place(g.name, g.pods, priority=g.priority).status == "allocated":
            g.placed = {p.key for p in g.pods}


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from bench.plots import cores_over_time

    series = [(f"{row['rule']} ({row['nodes']} nodes)", row["busy"]) for row in rows]
    return cores_over_time(series, "cores held over time, same stream", path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[8, 64])
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    results = []
    for nodes in args.nodes:
        cores = nodes * CPU
        stream = workload(args.groups, cores, args.seed)
        work = sum(g.size * g.runtime for g in stream)
        bound = max(work / cores, max(g.runtime for g in stream))
        limit = int(20 * (bound + max(g.arrival for g in stream)))
        rows = [simulate(rule, nodes, stream, limit) for rule in RULES]
        OUT.mkdir(exist_ok=True)
        figure = plot(rows, OUT / f"pressure-{nodes}.png")
        fluence = rows[-1]
        results.append(
            {
                "nodes": nodes,
                "lower_bound": round(bound, 1),
                "last_arrival": max(g.arrival for g in stream),
                "rules": [{k: v for k, v in r.items() if k != "busy"} for r in rows],
                "fluence_makespan_vs_bound": round(fluence["makespan"] / bound, 2)
                if fluence["makespan"]
                else None,
                "plot": str(figure),
            }
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
