"""The pressure stream through a real kube-scheduler on KWOK nodes, under five rules.

``bench/pressure.py`` decides every fit with fluence's ledger in simulated time; this
runs the same seeded stream (``pressure.workload``) on a local control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from the pinned
modules) whose nodes KWOK plays, in wall-clock time scaled by ``--scale``. Each rule
gets a control plane of its own with the same nodes:

- ``default``: kube-scheduler's default profile; the pods carry no group (each is
  placed as it fits), high-priority pods preempt as kube-scheduler does;
- ``native``: kube-scheduler's own gang scheduling (a ``scheduling.k8s.io`` PodGroup
  with ``minCount`` = the group's size, the pods naming it in ``spec.schedulingGroup``);
- ``fluence``: the same PodGroups and pods for a kube-scheduler whose profile calls
  ``fluence-extender`` (filter and bind for every pod);
- ``queue``: ``fluence``'s scheduler and extender, the pods created behind the queue's
  scheduling gate (as fluence's webhook makes them): the extender's queue places whole
  groups and releases their pods pinned to their nodes, kube-scheduler binds them;
- ``null``: ``native`` calling an extender that decides nothing (``bench/null_extender.py``:
  every candidate passes): what any extender's round trips cost on this stream, the
  baseline ``fluence`` is read against.

kube-scheduler runs at its strongest (client QPS and burst 5,000; without an extender,
its adaptive share of nodes scored): ``bench/cluster_rules.py``; ``--client-qps 0``
runs it with its default client limits. Every row says which settings it ran with.
Each rule runs ``--runs`` times on the same seeded stream, the rules in an order rotated
per run; the JSON gives per rule the median and range (min, max) over the runs of the
makespan, its ratio to the lower bound, the biggest gang's wait and the mean group wait,
and the makespan ratios (``queue_vs_native`` ...) pairing run i of one rule with run i of
the other.

A group starts when all its pods run (an MPI job needs every rank); the driver then
has KWOK end each of its pods after the group's runtime. A pod removed before its
group ends (preempted) restarts the group: its other pods are deleted and the group
is created again, as a Job with a failure policy of "restart all" would. Pods bound
while their group has not started hold cores for nothing; those core-seconds are split
in two: "bind spread" when the group started within ``--spread`` seconds of its first
bind (binding a whole gang is not instant), "held" otherwise (pods holding cores while
their group cannot run: what clogs a cluster). Pods get ``activeDeadlineSeconds`` = the
group's scaled runtime, the expected runtime fluence's reservations use.

Prints JSON per node count (per run and rule: completed groups, makespan and its ratio
to the lower bound, the biggest gang's wait, the mean group wait, high-priority waits,
held core-seconds, group restarts; then the summary over runs and the ratios) and draws
``bench/out/pressure-cluster-<nodes>.png`` (cores bound over time, each rule's first run).
Extender logs: ``bench/out/extender-pressure-<nodes>-<rule>-<back-off>s-<run>.log``.

Usage: python bench/pressure_cluster.py [--nodes 8] [--groups 40] [--scale 0.25] [--runs 3]
    [--rules default native fluence queue null] [--client-qps 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cluster_rules import (  # noqa: E402
    RULES,
    NodeSet,
    RuleCluster,
    one_cpu_pod,
    podgroup,
    rule_cluster,
)
from bench.extender_throughput import CLIENT_QPS, median_range  # noqa: E402
from bench.plots import cores_over_time  # noqa: E402
from bench.pressure import CPU, workload  # noqa: E402
from testbed.kwok import ANNOTATION_EXIT_AFTER, ANNOTATION_EXIT_CODE  # noqa: E402
from testbed.rest import KubeApiError  # noqa: E402

OUT = ROOT / "bench" / "out"
VARIANT_RULES = ("fluence", "queue")
"""Rules that take extender settings: ``fluence:NAME=VALUE,...``."""
NS = "pressure"
HIGH = "pressure-high"
POLL_S = 0.25


@dataclass
class Run:
    """One group as the driver sees it on the cluster."""

    name: str
    size: int
    runtime: float
    arrival: float
    priority: int
    generation: int = 0
    created: bool = False
    bound_at: dict[str, float] = field(default_factory=dict)
    start: float | None = None
    end: float | None = None
    restarts: int = 0
    pending_s: float = 0.0
    """Core-seconds this generation's pods have held while the group has not started."""
    held_s: float = 0.0
    """Core-seconds held by generations that never started or took long to."""
    spread_s: float = 0.0
    """Core-seconds held by generations that started within the spread of their first bind."""

    def settle(self, started_in: float | None, spread: float) -> None:
        """File this generation's held time as bind spread or as holding."""
        if started_in is not None and started_in <= spread:
            self.spread_s += self.pending_s
        else:
            self.held_s += self.pending_s
        self.pending_s = 0.0

    def group_name(self) -> str:
        return f"{self.name}-{self.generation}"

    def pod_names(self) -> list[str]:
        return [f"{self.name}-{self.generation}-{i}" for i in range(self.size)]


def _pods(cluster: RuleCluster, grouped: bool, run: Run) -> list[dict[str, Any]]:
    out = []
    for name in run.pod_names():
        body = one_cpu_pod(
            name,
            cluster.scheduler_name,
            run.group_name() if grouped else "",
            {"pressure/group": run.name},
        )
        body["spec"]["activeDeadlineSeconds"] = max(1, math.ceil(run.runtime))
        if run.priority:
            body["spec"]["priorityClassName"] = HIGH
        out.append(cluster.pod(body))
    return out


class Driver:
    """Creates the stream's groups on time, starts and ends them, restarts preempted ones."""

    def __init__(self, cluster: RuleCluster, runs: list[Run], spread: float) -> None:
        self.rest = cluster.cp.rest
        self.cluster = cluster
        self.grouped = cluster.rule != "default"
        self.runs = runs
        self.spread = spread
        self.pods_path = cluster.pods_path(NS)
        self.groups_path = cluster.groups_path(NS)
        self.busy: list[tuple[float, int]] = []

    def create(self, run: Run) -> None:
        if self.grouped:
            priority_class = HIGH if run.priority else ""
            body = podgroup(run.group_name(), run.size, priority_class=priority_class)
            self.rest.create(self.groups_path, body)
        for body in _pods(self.cluster, self.grouped, run):
            self.rest.create(self.pods_path, body)
        run.created = True

    def restart(self, run: Run, pods: dict[str, dict[str, Any]]) -> None:
        """A member was removed before the group ended: the whole group starts over."""
        for name in run.pod_names():
            if name in pods:
                with contextlib.suppress(KubeApiError):
                    self.rest.delete(f"{self.pods_path}/{name}", gracePeriodSeconds=0)
        if self.grouped:
            with contextlib.suppress(KubeApiError):
                self.rest.delete(f"{self.groups_path}/{run.group_name()}")
        run.settle(None, self.spread)
        run.restarts += 1
        run.generation += 1
        run.bound_at.clear()
        run.start = None
        self.create(run)

    def step(self, now: float, dt: float) -> None:
        items = self.rest.get(self.pods_path).get("items") or []
        pods = {p["metadata"]["name"]: p for p in items}
        bound_cores = 0
        for run in self.runs:
            if not run.created:
                if run.arrival <= now:
                    self.create(run)
                continue
            if run.end is not None:
                continue
            members = [pods.get(n) for n in run.pod_names()]
            if any(p is None or p["metadata"].get("deletionTimestamp") for p in members):
                self.restart(run, pods)
                continue
            phases = [(p.get("status") or {}).get("phase") for p in members if p]
            for p in members:
                assert p is not None
                if p["spec"].get("nodeName"):
                    run.bound_at.setdefault(p["metadata"]["name"], now)
            bound = len(run.bound_at)
            bound_cores += bound if phases.count("Succeeded") < run.size else 0
            if run.start is None:
                run.pending_s += bound * dt
                if phases.count("Running") == run.size:
                    run.start = now
                    run.settle(now - min(run.bound_at.values()), self.spread)
                    after = f"{int(run.runtime * 1000)}ms"
                    annotations = {ANNOTATION_EXIT_CODE: "0", ANNOTATION_EXIT_AFTER: after}
                    for name in run.pod_names():
                        # A pod preempted since the listing restarts the group next step.
                        with contextlib.suppress(KubeApiError):
                            self.rest.merge_patch(
                                f"{self.pods_path}/{name}",
                                {"metadata": {"annotations": annotations}},
                            )
            elif phases.count("Succeeded") == run.size:
                run.end = now
        self.busy.append((now, bound_cores))


def run_rule(
    rule: str,
    nodes: int,
    stream: list[Run],
    limit: float,
    spread: float,
    log_dir: Path,
    max_backoff_s: int = 2,
    client_qps: int = CLIENT_QPS,
    label: str = "",
) -> dict[str, Any]:
    """``rule``, or ``fluence:NAME=VALUE,...`` (or ``queue:``): with those extender settings."""
    runs = [Run(r.name, r.size, r.runtime, r.arrival, r.priority) for r in stream]
    node_set = NodeSet("p-", nodes, {"cpu": str(CPU), "memory": "16Gi", "pods": "110"})
    base, _, settings = rule.partition(":")
    env = dict(kv.split("=", 1) for kv in settings.split(",")) if settings else None
    with rule_cluster(
        base,
        [node_set],
        NS,
        log_dir,
        max_backoff_s=max_backoff_s,
        extender_env=env,
        client_qps=client_qps,
        label=label,
    ) as cluster:
        cluster.cp.rest.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": HIGH},
                "value": 1000,
            },
        )
        driver = Driver(cluster, runs, spread)
        t0 = last = time.monotonic()
        while True:
            now = time.monotonic() - t0
            driver.step(now, now - last)
            last = now
            if all(r.end is not None for r in runs) or now > limit:
                break
            time.sleep(POLL_S)
        left = left_over(cluster) if cluster.gated else {}
        refused = cluster.refusals(NS)
    row = summarize(rule, nodes, runs, driver.busy)
    row["scheduler"] = cluster.settings
    row["scheduling_refusals"] = refused
    if cluster.gated:
        row["pods_left"] = left
    return row


def left_over(cluster: RuleCluster) -> dict[str, int]:
    """The pods left at the end that were not bound: gated by the queue, or released."""
    items = cluster.cp.rest.get(cluster.pods_path(NS)).get("items") or []
    out = {"gated": 0, "released_unbound": 0}
    for pod in items:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or (pod.get("status") or {}).get("phase") == "Succeeded":
            continue
        gated = any(g.get("name") for g in spec.get("schedulingGates") or ())
        out["gated" if gated else "released_unbound"] += 1
    return out


def summarize(
    rule: str, nodes: int, runs: list[Run], busy: list[tuple[float, int]]
) -> dict[str, Any]:
    for r in runs:
        if r.start is None:
            r.settle(None, 0.0)
    done = [r for r in runs if r.end is not None]
    biggest = max(runs, key=lambda r: (r.size, -r.arrival))
    high = [r.start - r.arrival for r in runs if r.priority and r.start is not None]
    waits = [r.start - r.arrival for r in runs if r.start is not None]
    return {
        "rule": rule,
        "nodes": nodes,
        "groups": len(runs),
        "completed": len(done),
        "clogged": len(done) < len(runs),
        "makespan": round(max(r.end or 0 for r in done), 1) if len(done) == len(runs) else None,
        "biggest_gang": biggest.size,
        "biggest_gang_wait": round(biggest.start - biggest.arrival, 1)
        if biggest.start is not None
        else None,
        "mean_group_wait": round(sum(waits) / len(waits), 1) if waits else None,
        "groups_started": len(waits),
        "high_priority": sum(1 for r in runs if r.priority),
        "high_priority_started": len(high),
        "high_priority_mean_wait": round(sum(high) / len(high), 1) if high else None,
        "held_core_seconds": round(sum(r.held_s for r in runs), 1),
        "bind_spread_core_seconds": round(sum(r.spread_s for r in runs), 1),
        "group_restarts": sum(r.restarts for r in runs),
        "unfinished": [
            {"group": r.name, "size": r.size, "priority": r.priority, "bound": len(r.bound_at)}
            for r in runs
            if r.end is None
        ],
        "timeline": [
            [r.name, r.size, r.priority, round(r.arrival, 1)]
            + [round(t, 1) if t is not None else None for t in (r.start, r.end)]
            for r in runs
        ],
        "busy": busy,
    }


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Cores bound over time: each rule's (and back-off's) first run."""
    series = [
        (
            f"{row['rule']}, back-off {row['max_backoff_s']} s "
            f"({row['completed']}/{row['groups']} groups)",
            row["busy"],
        )
        for row in rows
        if row["run"] == 0
    ]
    qps = rows[0]["scheduler"].get("client_qps", "?") if rows else "?"
    title = (
        "cores bound over time, same stream, real kube-scheduler on KWOK nodes"
        f"\n(first run of each rule; kube-scheduler client QPS {qps})"
    )
    return cores_over_time(series, title, path)


SUMMED = (
    "makespan",
    "makespan_vs_bound",
    "biggest_gang_wait",
    "mean_group_wait",
    "scheduling_refusals",
)
PAIRS = (
    ("queue", "native"),
    ("queue-only", "native"),
    ("fluence", "native"),
    ("queue", "fluence"),
    ("null", "native"),
    ("fluence", "null"),
    ("queue", "null"),
)


def summary(rows: list[dict[str, Any]], rules: list[str], backoffs: list[int]) -> list[Any]:
    """Per rule and back-off: the median and range over runs of the headline numbers."""
    out = []
    for backoff in backoffs:
        for rule in rules:
            mine = [r for r in rows if r["rule"] == rule and r["max_backoff_s"] == backoff]
            mine.sort(key=lambda r: r["run"])
            entry: dict[str, Any] = {
                "rule": rule,
                "max_backoff_s": backoff,
                "runs": len(mine),
                "runs_completed": sum(1 for r in mine if r["makespan"] is not None),
                "scheduler": mine[0]["scheduler"] if mine else {},
            }
            for key in SUMMED:
                entry[key] = median_range([r[key] for r in mine], 2)
            out.append(entry)
    return out


def makespan_ratios(
    rows: list[dict[str, Any]], rules: list[str], backoffs: list[int], runs: int
) -> dict[str, Any]:
    """``a_vs_b@<back-off>s``: makespan of a over b, run i with run i (median, range)."""
    ratios: dict[str, Any] = {}
    for backoff in backoffs:
        by = {(r["rule"], r["run"]): r for r in rows if r["max_backoff_s"] == backoff}
        variants = [(base, r) for r in rules for base in VARIANT_RULES if r.startswith(base + ":")]
        for a, b in list(PAIRS) + variants:
            if a not in rules or b not in rules:
                continue
            values: list[float | None] = []
            for i in range(runs):
                ma = (by.get((a, i)) or {}).get("makespan")
                mb = (by.get((b, i)) or {}).get("makespan")
                values.append(ma / mb if ma and mb else None)
            ratios[f"{a}_vs_{b}@{backoff}s"] = median_range(values)
    return ratios


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[8])
    p.add_argument("--groups", type=int, default=40)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--scale", type=float, default=0.25, help="wall seconds per stream second")
    p.add_argument("--limit", type=float, default=3.0, help="stop at this x (bound + last arrival)")
    p.add_argument(
        "--spread",
        type=float,
        default=5.0,
        help="seconds from first bind to start that count as binding",
    )
    p.add_argument(
        "--max-backoff",
        type=int,
        nargs="+",
        default=[2],
        help="kube-scheduler podMaxBackoffSeconds; several: each rule once per value",
    )
    p.add_argument(
        "--rules",
        nargs="+",
        default=list(RULES),
        help=f"of {', '.join(RULES)}; fluence:NAME=VALUE,... (or queue:...) runs that rule "
        "with those extender settings beside the others (e.g. fluence:FLUENCE_REQUEUE_INTERVAL=0)",
    )
    p.add_argument("--runs", type=int, default=3, help="runs of every rule on the same stream")
    p.add_argument(
        "--client-qps",
        type=int,
        default=CLIENT_QPS,
        help="kube-scheduler's client QPS and burst (0: its defaults, 50 and 100)",
    )
    args = p.parse_args()
    for rule in args.rules:
        base, _, settings = rule.partition(":")
        if base not in RULES or settings and (base not in VARIANT_RULES or "=" not in settings):
            p.error(
                f"--rules: {rule!r} is not one of {RULES} or fluence:NAME=VALUE,... "
                "(queue:NAME=VALUE,...)"
            )
    if args.runs < 1:
        p.error("--runs must be at least 1")
    OUT.mkdir(exist_ok=True)
    results = []
    for nodes in args.nodes:
        cores = nodes * CPU
        stream = [
            Run(g.name, g.size, g.runtime * args.scale, g.arrival * args.scale, g.priority)
            for g in workload(args.groups, cores, args.seed)
        ]
        work = sum(r.size * r.runtime for r in stream)
        bound = max(work / cores, max(r.runtime for r in stream))
        last = max(r.arrival for r in stream)
        limit = args.limit * (bound + last)
        rows = []
        for run in range(args.runs):
            shift = run % len(args.rules)
            order = args.rules[shift:] + args.rules[:shift]
            for backoff in args.max_backoff:
                for rule in order:
                    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", rule)
                    label = f"pressure-{nodes}-{safe}-{backoff}s-{run}"
                    row = run_rule(
                        rule,
                        nodes,
                        stream,
                        limit,
                        args.spread,
                        OUT,
                        backoff,
                        args.client_qps,
                        label,
                    )
                    row["max_backoff_s"] = backoff
                    row["run"] = run
                    row["makespan_vs_bound"] = (
                        round(row["makespan"] / bound, 2) if row["makespan"] else None
                    )
                    rows.append(row)
                    print(
                        f"[{nodes} nodes, run {run}] {rule} back-off {backoff}s: "
                        f"{row['completed']}/{row['groups']} groups, makespan {row['makespan']}",
                        file=sys.stderr,
                    )
        figure = plot(rows, OUT / f"pressure-cluster-{nodes}.png")
        results.append(
            {
                "nodes": nodes,
                "scale": args.scale,
                "runs": args.runs,
                "lower_bound": round(bound, 1),
                "last_arrival": round(last, 1),
                "limit": round(limit, 1),
                "summary": summary(rows, args.rules, args.max_backoff),
                "makespan_ratios": makespan_ratios(rows, args.rules, args.max_backoff, args.runs),
                "rules": [{k: v for k, v in r.items() if k != "busy"} for r in rows],
                "plot": str(figure),
            }
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
