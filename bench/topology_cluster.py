"""Gangs and racks through a real kube-scheduler on KWOK nodes: native gang + TAS vs fluence.

``bench/topology.py`` places its stream with fluence's ledger directly; this sends a
stream of the same shape through a local control plane whose nodes KWOK plays, under
four rules, each on a fresh control plane with the same nodes (racks x nodes of
``--cpu`` cpus, racks dealt round ``--zones`` zones, labelled with
``topology.kubernetes.io/zone`` and ``topology.kubernetes.io/rack``):

- ``native``: kube-scheduler 1.37's own gang scheduling and topology-aware workload
  scheduling (gate ``TopologyAwareWorkloadScheduling``): a gang that requires one
  rack says so in its PodGroup's ``schedulingConstraints.topology``; the others say
  nothing;
- ``native-packed``: ``native`` scoring nodes ``MostAllocated``, as a user who wants
  gangs packed into few racks configures kube-scheduler;
- ``fluence``: the same PodGroups and pods for a kube-scheduler whose profile calls
  ``fluence-extender`` (which packs gangs without a constraint into the fewest racks);
- ``queue``: ``fluence``'s scheduler and extender, the pods created behind the queue's
  scheduling gate (as fluence's webhook makes them): the extender's queue places the
  gang whole and releases its pods pinned to their nodes, kube-scheduler binds them;
- ``queue-only``: ``queue`` with a ``fluence`` profile that calls no extender (as the
  chart's ``scheduler.extenderCalls=false``): kube-scheduler binds the pinned pods itself;
- ``null``: ``native`` calling an extender that decides nothing (every candidate passes,
  it binds): the time any extender adds, so that "null / native" shows how much of
  "fluence / native" the extender protocol alone takes;
- ``null-queue``: ``native``, but the pods carry the queue's gate and
  ``bench/null_queue.py`` lifts it from each as it comes (no decision, no pin): what
  gating at admission costs in itself, so that "queue-only / null-queue" is what
  fluence's queue adds to it.

kube-scheduler runs with client QPS and burst 5,000 (``--client-qps``; 0: its
defaults); ``native`` scores its adaptive share of the nodes, the extender rules all of
them (``bench/cluster_rules.py``). Each row says which settings it ran with.

Gangs come one at a time (sizes 2 to 128 one-cpu pods, seeded, a share requiring one
rack). A gang whose pods are not all bound within ``--wait`` seconds is counted as
waiting and deleted; after each placed gang a running one ends with chance
``--churn`` (its pods and PodGroup deleted), leaving holes as a busy cluster does.
Each of ``--runs`` runs runs every rule once, in an order rotated per run. Printed as
JSON (each rule's runs, and per rule the median and range over them) and drawn into
``bench/out/topology-cluster.png`` (the first run): gangs placed, racks spanned per gang
(mean, max, share at the ideal ``ceil(size / rack cpus)``), racks left wholly free,
seconds from a gang's creation to its last bind (sum, and pods bound per second of it),
those seconds by step (``steps_seconds``: creating the pods; for the queue rules, from the
last create to the match that placed the gang and from that match to its last release
written, read from the extender's log; then to the last bind seen, polled every
``POLL_S``), kube-scheduler's refusals (``FailedScheduling`` Events: under ``queue``, of
pods it released), and the time ratios paired run by run.

Usage: python bench/topology_cluster.py [--racks 8] [--nodes 16] [--gangs 100] [--runs 3]
    [--rules native native-packed fluence queue queue-only null null-queue]
    [--client-qps 5000]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cluster_rules import NodeSet, RuleCluster, one_cpu_pod, podgroup, rule_cluster  # noqa: E402
from bench.extender_throughput import CLIENT_QPS, median_range  # noqa: E402
from bench.plots import racks_spanned  # noqa: E402
from bench.topology import RACK, ZONE, workload  # noqa: E402

OUT = ROOT / "bench" / "out"
RULES = ("native", "native-packed", "fluence", "queue", "queue-only", "null", "null-queue")
NS = "gangs"
POLL_S = 0.1


class Gangs:
    """Creates, waits for and deletes gangs on one rule's cluster."""

    def __init__(self, cluster: RuleCluster, rack_of: dict[str, str]) -> None:
        self.cluster = cluster
        self.rest = cluster.cp.rest
        self.rack_of = rack_of
        self.pods_path = cluster.pods_path(NS)
        self.groups_path = cluster.groups_path(NS)

    def create(self, name: str, size: int, rack: bool) -> None:
        self.rest.create(self.groups_path, podgroup(name, size, RACK if rack else ""))
        for i in range(size):
            body = one_cpu_pod(f"{name}-{i}", self.cluster.scheduler_name, name, {"gang": name})
            self.rest.create(self.pods_path, self.cluster.pod(body))

    def nodes_of(self, name: str) -> list[str]:
        items = self.rest.get(self.pods_path, labelSelector=f"gang={name}").get("items") or []
        return [p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")]

    def delete(self, name: str) -> None:
        self.rest.delete(self.pods_path, labelSelector=f"gang={name}", gracePeriodSeconds=0)
        self.rest.delete(f"{self.groups_path}/{name}")
        deadline = time.monotonic() + 60
        while self.rest.get(self.pods_path, labelSelector=f"gang={name}").get("items"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pods of gang {name} were not deleted within 60s")
            time.sleep(POLL_S)

    def busy_racks(self) -> set[str]:
        items = self.rest.get(self.pods_path).get("items") or []
        return {self.rack_of[p["spec"]["nodeName"]] for p in items if p["spec"].get("nodeName")}


QUEUE_RULES = ("queue", "queue-only")
"""The rules whose extender log times each gang's match and release."""


def queue_times(log: Path) -> dict[str, tuple[float, float]]:
    """Per gang (name), when the queue last matched it and wrote its last release (wall
    clock, from the extender's log)."""
    placed: dict[str, float] = {}
    released: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        group = str(entry.get("group", "")).rpartition("/")[2]
        if entry.get("msg") == "group placed":
            placed[group] = entry["ts"]
        elif entry.get("msg") == "pod released":
            released[group] = max(released.get(group, 0.0), entry["ts"])
    return {g: (placed[g], released[g]) for g in released if g in placed}


def steps(
    times: Mapping[str, tuple[float, float, float]],
    queued: Mapping[str, tuple[float, float]] | None,
) -> dict[str, float]:
    """Seconds placing, summed over the gangs placed, by step: ``times`` is per gang its
    first create, last create and last bind seen; ``queued`` (queue rules) its match and
    last release."""
    out = {"creating": 0.0, "to_match": 0.0, "match_to_released": 0.0, "to_bound": 0.0}
    for gang, (first, last, bound) in times.items():
        out["creating"] += last - first
        if queued is not None and gang in queued:
            matched, released = queued[gang]
            out["to_match"] += matched - last
            out["match_to_released"] += released - matched
            out["to_bound"] += bound - released
        else:
            out["to_bound"] += bound - last
    return {k: round(v, 2) for k, v in out.items()}


def run_rule(
    rule: str,
    node_sets: list[NodeSet],
    rack_of: dict[str, str],
    gangs: list[tuple[int, bool]],
    rack_slots: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    spans: list[int] = []
    placed = waited = ideal = 0
    seconds = 0.0
    pods_placed = 0
    running: list[str] = []
    times: dict[str, tuple[float, float, float]] = {}
    with rule_cluster(
        rule,
        node_sets,
        NS,
        OUT,
        topology=True,
        client_qps=args.client_qps,
        label=f"topology-{rule}",
    ) as cluster:
        driver = Gangs(cluster, rack_of)
        for g, (size, must) in enumerate(gangs):
            name = f"g{g:03d}"
            started, first = time.monotonic(), time.time()
            driver.create(name, size, must)
            last = time.time()
            deadline = started + args.wait
            while len(nodes := driver.nodes_of(name)) < size and time.monotonic() < deadline:
                time.sleep(POLL_S)
            if len(nodes) < size:
                waited += 1
                driver.delete(name)
                continue
            seconds += time.monotonic() - started
            times[name] = (first, last, time.time())
            placed += 1
            pods_placed += size
            racks = {rack_of[n] for n in nodes}
            spans.append(len(racks))
            ideal += len(racks) == math.ceil(size / rack_slots)
            running.append(name)
            if rng.random() < args.churn:  # a gang ends, leaving holes behind
                driver.delete(running.pop(rng.randrange(len(running))))
        free = len(set(rack_of.values()) - driver.busy_racks())
        refused = cluster.refusals(NS)
    log = OUT / f"extender-topology-{rule}.log"
    queued = queue_times(log) if rule in QUEUE_RULES else None
    return {
        "rule": rule,
        "gangs_placed": placed,
        "gangs_waiting": waited,
        "racks_per_gang_mean": round(sum(spans) / len(spans), 3) if spans else 0,
        "racks_per_gang_max": max(spans, default=0),
        "share_at_ideal_racks": round(ideal / placed, 3) if placed else 0,
        "racks_wholly_free": free,
        "placing_seconds": round(seconds, 1),
        "steps_seconds": steps(times, queued),
        "pods_per_second": round(pods_placed / seconds, 1) if seconds else None,
        "scheduling_refusals": refused,
        "scheduler": cluster.settings,
        "spans": spans,
    }


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    series = [(row["rule"], row["spans"]) for row in rows]
    return racks_spanned(series, "racks spanned per gang, real kube-scheduler on KWOK nodes", path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--racks", type=int, default=8)
    p.add_argument("--nodes", type=int, default=16, help="nodes per rack")
    p.add_argument("--cpu", type=int, default=4, help="cpus per node")
    p.add_argument("--zones", type=int, default=2, help="racks are dealt round the zones")
    p.add_argument("--gangs", type=int, default=100)
    p.add_argument("--required", type=float, default=0.3, help="share requiring one rack")
    p.add_argument("--churn", type=float, default=0.9, help="chance a gang ends after each")
    p.add_argument("--wait", type=float, default=10.0, help="seconds a gang may take to bind")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rules", nargs="+", default=list(RULES), choices=RULES)
    p.add_argument(
        "--client-qps",
        type=int,
        default=CLIENT_QPS,
        help="kube-scheduler's client QPS and burst (0: its defaults, 50 and 100)",
    )
    p.add_argument("--runs", type=int, default=1, help="runs of every rule, rotated")
    args = p.parse_args()
    capacity = {"cpu": str(args.cpu), "memory": "64Gi", "pods": "110"}
    node_sets: list[NodeSet] = []
    rack_of: dict[str, str] = {}
    for r in range(args.racks):
        prefix = f"r{r:02d}n"
        labels = {ZONE: f"z{r % args.zones}", RACK: f"rack{r:02d}"}
        node_sets.append(NodeSet(prefix, args.nodes, capacity, labels))
        rack_of |= {f"{prefix}{i}": labels[RACK] for i in range(args.nodes)}
    gangs = workload(args.gangs, args.required, args.seed)
    rules = tuple(args.rules)
    runs: list[dict[str, dict[str, Any]]] = []
    for i in range(args.runs):
        order = rules[i % len(rules) :] + rules[: i % len(rules)]
        runs.append(
            {
                rule: run_rule(rule, node_sets, rack_of, gangs, args.nodes * args.cpu, args)
                for rule in order
            }
        )
    OUT.mkdir(exist_ok=True)
    figure = plot([runs[0][r] for r in rules], OUT / "topology-cluster.png")
    summary: dict[str, Any] = {
        "racks": args.racks,
        "nodes_per_rack": args.nodes,
        "zones": args.zones,
        "gangs": args.gangs,
        "required_share": args.required,
        "churn": args.churn,
        "runs": args.runs,
        "results": {
            rule: {
                **{
                    key: median_range([run[rule][key] for run in runs])
                    for key in (
                        "gangs_placed",
                        "gangs_waiting",
                        "racks_per_gang_mean",
                        "racks_per_gang_max",
                        "share_at_ideal_racks",
                        "racks_wholly_free",
                        "placing_seconds",
                        "pods_per_second",
                        "scheduling_refusals",
                    )
                },
                "steps_seconds": {
                    step: median_range([run[rule]["steps_seconds"][step] for run in runs])
                    for step in runs[0][rule]["steps_seconds"]
                },
                "scheduler": runs[0][rule]["scheduler"],
            }
            for rule in rules
        },
        "plot": str(figure),
    }
    pairs = (
        ("native-packed", "native"),
        ("fluence", "native"),
        ("queue", "native"),
        ("queue-only", "native"),
        ("queue", "native-packed"),
        ("queue", "fluence"),
        ("null", "native"),
        ("fluence", "null"),
        ("queue", "null"),
        ("null-queue", "native"),
        ("queue", "null-queue"),
        ("queue-only", "null-queue"),
    )
    for a, b in pairs:
        if {a, b} <= set(rules):
            summary[f"ratio_time_{a}_vs_{b}"] = median_range(
                [
                    run[a]["placing_seconds"] / run[b]["placing_seconds"]
                    if run[b]["placing_seconds"]
                    else None
                    for run in runs
                ]
            )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
