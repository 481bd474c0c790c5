"""Admission cost: pods/s created through a real kube-apiserver with and without the webhook.

Starts a local control plane (etcd + kube-apiserver) and one ``fluence-webhook``
process, then creates the same number of quantum pods (schedulerName fluence,
one ``fluxion.flux-framework.org/qpu``) from a few concurrent creators over
keep-alive connections, alternating rounds without and with the webhook
registered. Two more series run with the webhook registered: label-gang pods
(groups of 4; the webhook creates a PodGroup per group) and pods for another
scheduler, which the CEL matchConditions keep away from the webhook. CPU
seconds per pod of kube-apiserver, etcd and the webhook are recorded for each
series. Prints one JSON document and draws ``bench/out/webhook.png``. Usage::

    python bench/webhook.py [--pods 300] [--concurrency 4] [--rounds 2] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import shutil
import ssl
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fluence import names  # noqa: E402
from fluence.controlplane import ControlPlane  # noqa: E402
from tests.integration.test_webhook_process import WebhookProcess  # noqa: E402
from webhook.manifest import webhook_configuration  # noqa: E402

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
GANG_SIZE = 4


def quantum_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"q-{i}"},
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "100m", names.resource_name("qpu"): "1"},
                        "limits": {names.resource_name("qpu"): "1"},
                    },
                }
            ],
        },
    }


def other_pod(i: int) -> dict[str, Any]:
    """A pod for another scheduler asking for nothing of fluence: matchConditions skip it."""
    body = quantum_pod(i)
    body["spec"]["schedulerName"] = "default-scheduler"
    del body["spec"]["containers"][0]["resources"]["limits"]
    del body["spec"]["containers"][0]["resources"]["requests"][names.resource_name("qpu")]
    return body


def gang_pod(i: int) -> dict[str, Any]:
    body = quantum_pod(i)
    body["metadata"]["labels"] = {names.LABEL_GROUP: f"g-{i // GANG_SIZE}"}
    body["metadata"]["annotations"] = {names.ANNOTATION_GROUP_SIZE: str(GANG_SIZE)}
    del body["spec"]["containers"][0]["resources"]["limits"]
    del body["spec"]["containers"][0]["resources"]["requests"][names.resource_name("qpu")]
    return body


def client_context(cp: ControlPlane) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    context.load_cert_chain(str(cp.admin_cert_file), str(cp.admin_key_file))
    return context


class CpuMeter:
    """CPU seconds used by named processes between two readings (user + system)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}

    def read(self) -> dict[str, float]:
        out = {}
        for name, proc in self.procs.items():
            times = proc.cpu_times()
            out[name] = times.user + times.system
        return out


def create_pods(
    cp: ControlPlane,
    namespace: str,
    count: int,
    concurrency: int,
    make: Any,
    cpu: CpuMeter | None = None,
) -> dict[str, Any]:
    """Create ``count`` pods from ``concurrency`` threads; rate, latency and CPU per pod."""
    before = cpu.read() if cpu else {}
    context = client_context(cp)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    path = f"/api/v1/namespaces/{namespace}/pods"

    def worker(indexes: range) -> None:
        mine: list[float] = []
        with httpx.Client(base_url=cp.server, verify=context, timeout=30) as client:
            for i in indexes:
                start = time.perf_counter()
                r = client.post(path, json=make(i))
                mine.append(time.perf_counter() - start)
                if r.status_code != 201:
                    with lock:
                        errors.append(f"{r.status_code} {r.text[:600]}")
        with lock:
            latencies.extend(mine)

    threads = [
        threading.Thread(target=worker, args=(range(k, count, concurrency),))
        for k in range(concurrency)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} creates failed, first: {errors[0]}")
    latencies.sort()
    after = cpu.read() if cpu else {}
    return {
        "cpu_ms_per_pod": {k: round(1000 * (after[k] - before[k]) / count, 2) for k in after},
        "pods": count,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(count / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
    }


def webhook_called(cp: ControlPlane) -> bool:
    out = cp.rest.create("/api/v1/namespaces/default/pods", quantum_pod(0), dryRun="All")
    return any(e["name"] == "QRMI_BACKEND" for e in out["spec"]["containers"][0].get("env", []))


def wait_until(check: Any, want: bool, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while check() != want:
        if time.monotonic() > deadline:
            raise RuntimeError("the API server did not pick up the webhook configuration change")
        time.sleep(0.2)


def namespace(cp: ControlPlane) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    cp.create_namespace(name)
    return name


def draw(result: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        "without webhook",
        "with webhook",
        "with webhook\n(gang pods)",
        "with webhook\n(other pods)",
    ]
    keys = ["without", "with", "with_gang", "with_other"]
    rates = [result[k]["pods_per_s"] for k in keys]
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar(labels, rates, color=["#888888", "#2b7bba", "#5aa05a", "#c98a2b"])
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylim(0, 1.15 * max(rates))
    ax.set_ylabel("pods created per second")
    ax.set_title(
        f"Pod creation through kube-apiserver ({result['pods']} pods x {result['rounds']} "
        f"rounds, {result['concurrency']} creators)\nratio with/without = {result['ratio']:.2f}",
        fontsize=9,
    )
    fig.tight_layout()
    path = out / "webhook.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    pods = sum(r["pods"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    return {
        "pods": pods,
        "seconds": round(seconds, 3),
        "pods_per_s": round(pods / seconds, 1),
        "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
        "p99_ms": round(max(r["p99_ms"] for r in runs), 2),
        "cpu_ms_per_pod": {
            k: round(statistics.mean(r["cpu_ms_per_pod"][k] for r in runs), 2)
            for k in runs[0]["cpu_ms_per_pod"]
        },
        "rounds": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300, help="pods per series per round")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent creators")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument(
        "--no-match-conditions",
        action="store_true",
        help="register without the CEL matchConditions (to measure what they cost)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    series: dict[str, list[dict[str, Any]]] = {
        "without": [],
        "with": [],
        "with_gang": [],
        "with_other": [],
    }
    # The webhook's certificates and log stay in the output directory for inspection.
    workdir = args.out / "webhook-run"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    with ControlPlane() as cp:
        config_name = "fluence-webhook-bench"
        with WebhookProcess(
            workdir,
            resources=ROOT / "examples" / "resources.yaml",
            kubeconfig=cp.kubeconfig,
        ) as hook:
            config = webhook_configuration(
                url=f"{hook.url}{names.WEBHOOK_PATH}",
                ca_bundle=hook.bundle.ca_pem,
                certificate=None,
            )
            config["metadata"]["name"] = config_name
            if args.no_match_conditions:
                del config["webhooks"][0]["matchConditions"]
            assert hook.proc is not None
            components = {p.name: p.pid for p in cp.processes}
            cpu = CpuMeter({**components, "webhook": hook.proc.pid})
            # Warm the API server's caches and connections before measuring.
            create_pods(cp, namespace(cp), 50, args.concurrency, quantum_pod)
            for _ in range(args.rounds):
                series["without"].append(
                    create_pods(cp, namespace(cp), args.pods, args.concurrency, quantum_pod, cpu)
                )
                cp.rest.create(CONFIGS, config)
                wait_until(lambda: webhook_called(cp), True)
                series["with"].append(
                    create_pods(cp, namespace(cp), args.pods, args.concurrency, quantum_pod, cpu)
                )
                series["with_other"].append(
                    create_pods(cp, namespace(cp), args.pods, args.concurrency, other_pod, cpu)
                )
                series["with_gang"].append(
                    create_pods(cp, namespace(cp), args.pods, args.concurrency, gang_pod, cpu)
                )
                cp.rest.delete(f"{CONFIGS}/{config_name}")
                wait_until(lambda: webhook_called(cp), False)
    result: dict[str, Any] = {
        "benchmark": "webhook",
        "pods": args.pods,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        **{k: merge(v) for k, v in series.items()},
    }
    result["ratio"] = round(result["with"]["pods_per_s"] / result["without"]["pods_per_s"], 3)
    result["ratio_gang"] = round(
        result["with_gang"]["pods_per_s"] / result["without"]["pods_per_s"], 3
    )
    result["ratio_other"] = round(
        result["with_other"]["pods_per_s"] / result["without"]["pods_per_s"], 3
    )
    result["png"] = str(draw(result, args.out))
    (args.out / "webhook.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
