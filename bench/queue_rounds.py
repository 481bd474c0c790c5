"""Seconds a queue round takes with many groups waiting on a large, full cluster, and how
soon the group a pod's end lets start is released.

Every round tries each waiting group (in order, for backfill), so a deep queue on a
large cluster makes rounds long. The cluster is ``--nodes`` nodes of 8 cpu, filled one
of two ways: each node's cpu held by one running pod ("cpu"), or each node at its pod
limit of one ("pods", 7 cpu left: the nodes kept off for now); then ``--waiting``
groups of ``--gang`` one-cpu pods wait, none of which fits. A round is
:meth:`GatedQueue.plan`, the first one (which queues every group) left out; the
matcher calls inside the same rounds are timed beside it (answers from memory
included). Then running pods end, making room for the first group, and one whole
:meth:`GatedQueue.round` is timed from its start to the first release written; its
baseline is the same round's length, which every release waited for while they were
written only after the round. ``--runs`` fresh clusters per point; prints JSON (median
and range) and draws ``bench/out/queue_rounds.png``::

    python bench/queue_rounds.py [--nodes 5000] [--waiting 100 500 1000] [--gang 8]
        [--runs 3] [--rounds 3] [--out bench/out]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.extender_throughput import median_range  # noqa: E402
from bench.plots import new_figure, save_figure  # noqa: E402
from fluence import names  # noqa: E402
from fluence.pods import Pod  # noqa: E402
from fluxion_nb.graph import Graph  # noqa: E402
from tests.unit.scheduler_extender.test_gated_queue import (  # noqa: E402
    Api,
    bind,
    finish,
    gated,
    pod_limited,
    round_trip,
)

FILLS = ("cpu", "pods")


class CachedApi(Api):
    """The unit tests' API server, each pod decoded once per change (the extender reads
    pods from its reflectors, decoded once)."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: dict[str, Pod] = {}

    def put(self, doc: dict[str, Any]) -> Pod:
        self.decoded.pop(f"{doc['metadata']['namespace']}/{doc['metadata']['name']}", None)
        return super().put(doc)

    def pod(self, key: str) -> Pod:
        found = self.decoded.get(key)
        if found is None:
            found = self.decoded[key] = super().pod(key)
        return found


@contextmanager
def matcher_timed() -> Iterator[list[float]]:
    """Sum the seconds spent in Fluxion's match (calls, seconds) while in the block."""
    spent = [0.0, 0.0]
    original: Callable[..., Any] = Graph.match

    def timed(self: Graph, *args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return original(self, *args, **kw)
        finally:
            spent[0] += 1
            spent[1] += time.perf_counter() - t

    Graph.match = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        Graph.match = original  # type: ignore[method-assign]


def one_run(nodes: int, waiting: int, gang: int, fill: str, rounds: int) -> dict[str, Any]:
    api = CachedApi()
    limit = 1 if fill == "pods" else 110
    _, ledger, queue = pod_limited(nodes, limit, api)
    running_cpu = "1" if fill == "pods" else "8"
    for i in range(nodes):
        running = gated(f"run{i}", cpu=running_cpu)
        running["spec"]["activeDeadlineSeconds"] = 600 + i % 600  # ends known: reservations
        api.put(running)
    for key in round_trip(queue):  # placed through the queue, one a node
        bind(api, ledger, key)
    for g in range(waiting):
        labels = {names.LABEL_GROUP: f"g{g}"} if gang > 1 else None
        for m in range(gang):
            name = f"g{g}-{m}" if gang > 1 else f"g{g}"
            api.put(
                gated(name, cpu="1", created=g % 60, labels=labels, size=gang if gang > 1 else 0)
            )
    queue.plan()  # queues every group
    seconds, matcher, calls = [], [], []
    for _ in range(rounds):
        # The unit tests' API keeps every pod as a JSON document too, which the extender
        # does not: a full collection of those would land in some rounds and not others.
        gc.collect()
        with matcher_timed() as spent:
            t = time.perf_counter()
            released = queue.plan()
            seconds.append(time.perf_counter() - t)
        assert not released and len(queue.waiting) == waiting, (released, queue.waiting[:1])
        calls.append(spent[0])
        matcher.append(spent[1])
    reason = queue.waiting[0].reason
    assert "can never fit" not in reason, reason
    first_s, whole_s = release_after_ends(api, ledger, queue, 1 if fill == "cpu" else gang)
    return {
        "round_s": statistics.median(seconds),
        "matcher_s": statistics.median(matcher),
        "matches": statistics.median(calls),
        "reason": reason,
        "first_release_s": first_s,
        "release_round_s": whole_s,
    }


def release_after_ends(api: CachedApi, ledger: Any, queue: Any, ends: int) -> tuple[float, float]:
    """End ``ends`` running pods (room for the first group) and run one round: (seconds
    from its start to the first release written, seconds the round took)."""
    for i in range(ends):
        finish(api, ledger, f"default/run{i}")
    written: list[float] = []
    write = api.release

    async def release(namespace: str, name: str, ops: Any) -> None:
        written.append(time.perf_counter())
        await write(namespace, name, ops)

    api.release = release  # type: ignore[method-assign]
    gc.collect()
    started = time.perf_counter()
    asyncio.run(queue.round())
    took = time.perf_counter() - started
    assert written, queue.waiting[:1]
    return written[0] - started, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--waiting", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument("--fills", nargs="+", choices=FILLS, default=list(FILLS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    points = []
    for fill in args.fills:
        for waiting in args.waiting:
            runs = [
                one_run(args.nodes, waiting, args.gang, fill, args.rounds) for _ in range(args.runs)
            ]
            rounds = [r["round_s"] for r in runs]
            points.append(
                {
                    "fill": fill,
                    "waiting": waiting,
                    "round_s": median_range(rounds),
                    "ms_per_group": median_range([s * 1000 / waiting for s in rounds], 2),
                    "matcher_s": median_range([r["matcher_s"] for r in runs]),
                    "matches_per_group": round(runs[0]["matches"] / waiting, 2),
                    "round_over_matcher": median_range(
                        [r["round_s"] / r["matcher_s"] for r in runs], 2
                    ),
                    "reason": runs[0]["reason"],
                    "first_release_s": median_range([r["first_release_s"] for r in runs]),
                    "release_round_s": median_range([r["release_round_s"] for r in runs]),
                    "first_release_over_round": median_range(
                        [r["first_release_s"] / r["release_round_s"] for r in runs], 3
                    ),
                }
            )
    doc: dict[str, Any] = {"nodes": args.nodes, "gang": args.gang, "runs": args.runs}
    doc["points"] = points
    args.out.mkdir(parents=True, exist_ok=True)
    fig, ax = new_figure()
    for fill in args.fills:
        mine = [p for p in points if p["fill"] == fill]
        xs = [p["waiting"] for p in mine]
        (line,) = ax.plot(xs, [p["round_s"]["median"] for p in mine], "o-", label=f"{fill}: round")
        for key, style, what in (
            ("matcher_s", "x--", "matcher calls in it"),
            ("first_release_s", "s:", "round start to first release"),
        ):
            ys = [p[key]["median"] for p in mine]
            ax.plot(xs, ys, style, color=line.get_color(), label=f"{fill}: {what}")
    ax.set_xlabel("groups waiting")
    ax.set_ylabel("seconds")
    ax.set_title(f"Queue rounds on {args.nodes} full nodes, groups of {args.gang}")
    doc["plot"] = str(save_figure(fig, ax, args.out / "queue_rounds.png"))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
