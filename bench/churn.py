"""Memory over a create-place-bind-run-delete churn through the extender's verbs.

Each cycle creates a pod (every tenth asks for a qpu), filters and binds it through
the scheduler, shows it running and then deleted to the ledger, as the watch would.
After ``--warm-up`` cycles (more than the ledger's bounded caches hold) the process's
RSS is read, then again after ``--cycles`` more. The null baseline, in the same run, is
the same loop making and dropping the pod objects without the extender. Prints JSON
(RSS growth of each, in percent, median and range over ``--rounds``) and draws
``bench/out/churn.png``::

    python bench/churn.py [--warm-up 5000] [--cycles 10000] [--rounds 3] [--out bench/out]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.plots import new_figure, save_figure  # noqa: E402
from tests.support.churn import QPU, extender_churn  # noqa: E402
from tests.unit.fluence.test_ledger import bound  # noqa: E402
from tests.unit.fluence.test_pods import make_pod  # noqa: E402


def extender_cycle() -> tuple[Callable[[int], None], Callable[[], None]]:
    env, cycle, close = extender_churn()

    def check() -> None:
        assert env.ledger.holdings() == {}
        assert env.graph._g.jobs() == []
        close()

    return cycle, check


def null_cycle() -> tuple[Callable[[int], None], Callable[[], None]]:
    kept: dict[str, Any] = {}

    def cycle(i: int) -> None:
        pod = make_pod(f"p{i}", cpu="100m", extra=QPU if i % 10 == 0 else None)
        kept[pod.key] = bound(pod, "n0", {})
        kept.pop(pod.key)

    return cycle, lambda: None


def growth(make: Callable[[], Any], warm_up: int, cycles: int) -> float:
    cycle, check = make()
    process = psutil.Process()
    for i in range(warm_up):
        cycle(i)
    gc.collect()
    before = process.memory_info().rss
    for i in range(warm_up, warm_up + cycles):
        cycle(i)
    gc.collect()
    after = process.memory_info().rss
    check()
    return float((after - before) / before * 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-up", type=int, default=5000)
    parser.add_argument("--cycles", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"extender": [], "null": []}
    for _ in range(args.rounds):
        runs["null"].append(growth(null_cycle, args.warm_up, args.cycles))
        runs["extender"].append(growth(extender_cycle, args.warm_up, args.cycles))
    doc: dict[str, Any] = {"warm_up": args.warm_up, "cycles": args.cycles}
    for label, values in runs.items():
        doc[f"{label}_rss_growth_pct"] = {
            "median": round(statistics.median(values), 2),
            "min": round(min(values), 2),
            "max": round(max(values), 2),
            "runs": [round(v, 2) for v in values],
        }
    args.out.mkdir(parents=True, exist_ok=True)
    fig, ax = new_figure()
    for label, values in runs.items():
        ax.plot(range(1, len(values) + 1), values, "o-", label=label)
    ax.set_xticks(range(1, args.rounds + 1))
    ax.set_xlabel("round")
    ax.set_ylabel(f"RSS growth over {args.cycles} pods (%)")
    ax.set_title("Memory over a pod churn through the extender")
    doc["plot"] = str(save_figure(fig, ax, args.out / "churn.png"))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
