"""Admission cost: pods/s created through a real kube-apiserver with and without the webhook.

Starts a local control plane (etcd + kube-apiserver) and one ``fluence-webhook``
process, then creates the same number of quantum pods (schedulerName fluence,
one ``fluxion.flux-framework.org/qpu``) from a few concurrent creators over
keep-alive connections, alternating rounds without and with the webhook
registered. A second ``fluence-webhook`` offering only HTTP/1.1 (``FLUENCE_HTTP2=false``)
runs the same pods as its own series. Two more series run with the webhook
registered: label-gang pods (groups of 4; the webhook creates a PodGroup per
group) and pods for another scheduler, which the CEL matchConditions keep away
from the webhook.

The baseline is a null webhook (``bench/null_webhook.py``: allow, echo the uid,
no patch) registered the same way and served by the same stack (Starlette +
Hypercorn), plus the same null webhook on aiohttp and on a threaded
``http.server``: "fluence / null" is what our code costs over calling a webhook
at all, the other stacks show what the server stack costs. CPU seconds per pod
of kube-apiserver, etcd and the webhook called in that series are recorded.
``--profile FILE`` runs ``fluence-webhook`` under cProfile and writes its stats
there. Prints one JSON document and draws ``bench/out/webhook.png``. Usage::

    python bench/webhook.py [--pods 300] [--concurrency 4] [--rounds 2] [--out bench/out]
        [--null-servers hypercorn,aiohttp,threaded] [--profile FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fluence import names  # noqa: E402
from testbed import ControlPlane  # noqa: E402
from testbed.processes import free_port  # noqa: E402
from tests.integration import test_webhook_process  # noqa: E402
from tests.integration.test_webhook_process import WebhookProcess  # noqa: E402
from webhook.certs import CertBundle, generate, write_files  # noqa: E402
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


class NullWebhook:
    """``bench/null_webhook.py`` as a child process on a free loopback port, always stopped."""

    def __init__(
        self, workdir: Path, server: str, bundle: CertBundle, patch: Path | None = None
    ) -> None:
        self.server = server
        self.bundle = bundle
        self.patch = patch
        self.tls_dir = workdir / "null-tls"
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log_path = workdir / f"null-{server}{'-patch' if patch else ''}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.context = ssl.create_default_context(cafile=str(self.tls_dir / "ca.crt"))

    def __enter__(self) -> NullWebhook:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "bench" / "null_webhook.py"),
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--cert",
                    str(self.tls_dir / "tls.crt"),
                    "--key",
                    str(self.tls_dir / "tls.key"),
                    "--server",
                    self.server,
                    *(["--patch", str(self.patch)] if self.patch else []),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 30
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"null webhook exited: {self.log_path.read_text()}")
                try:
                    self.reviews()
                    return self
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def reviews(self) -> int:
        """Reviews the null webhook has answered so far."""
        r = httpx.get(f"{self.url}/reviews", verify=self.context, timeout=2)
        r.raise_for_status()
        return int(r.text)

    def called(self, cp: ControlPlane) -> bool:
        """True when a dry-run pod creation reaches this webhook."""
        before = self.reviews()
        cp.rest.create("/api/v1/namespaces/default/pods", quantum_pod(0), dryRun="All")
        return self.reviews() > before


def fluence_patch(path: Path) -> Path:
    """Write the JSON Patch fluence makes for :func:`quantum_pod`, for the null webhook."""
    from webhook.admission import mutate
    from webhook.env import ContractFile
    from webhook.review import decode_pod

    contract = ContractFile(ROOT / "examples" / "resources.yaml").current()
    pod = decode_pod(msgspec.Raw(json.dumps(quantum_pod(0)).encode()))
    path.write_text(json.dumps(mutate(pod, "default", contract).patch.ops))
    return path


def profiled_script(workdir: Path, stats: Path) -> Path:
    """A launcher running ``fluence-webhook`` under cProfile on CPU time, stats written at exit.

    CPU time rather than wall time: on a busy machine a wall-clock profile
    charges whole scheduler waits to whichever call happened to be running.
    """
    script = workdir / "fluence-webhook-profiled"
    script.write_text(
        f"#!{sys.executable}\n"
        "import cProfile, sys, time\n"
        "from webhook.__main__ import main\n"
        "profile = cProfile.Profile(time.process_time)\n"
        "try:\n"
        "    code = profile.runcall(main)\n"
        "finally:\n"
        f"    profile.dump_stats({str(stats)!r})\n"
        "sys.exit(code)\n"
    )
    script.chmod(0o755)
    return script


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


LABELS = {
    "without": "without\nwebhook",
    "with": "fluence",
    "with_h1": "fluence\n(HTTP/1.1)",
    "with_null": "null\n(hypercorn)",
    "with_null_aiohttp": "null\n(aiohttp)",
    "with_null_hypercorn-h1": "null\n(hypercorn h1)",
    "with_null_threaded": "null\n(http.server)",
    "with_null_patch": "null + patch\n(hypercorn)",
    "with_gang": "fluence\n(gang pods)",
    "with_other": "fluence\n(other pods)",
}


def draw(result: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in LABELS if k in result]
    rates = [result[k]["pods_per_s"] for k in keys]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    ax.tick_params(axis="x", labelsize=8)
    bars = ax.bar([LABELS[k] for k in keys], rates, color="#2b7bba")
    bars[0].set_color("#888888")
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylim(0, 1.15 * max(rates))
    ax.set_ylabel("pods created per second")
    ratios = result["ratios"]
    ax.set_title(
        f"Pod creation through kube-apiserver ({result['pods']} pods x {result['rounds']} "
        f"rounds, {result['concurrency']} creators)\nfluence/without = "
        f"{ratios['fluence/without']:.2f}, null/without = {ratios.get('null/without', 0):.2f}, "
        f"fluence/null = {ratios.get('fluence/null', 0):.2f}",
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
    parser.add_argument(
        "--null-servers",
        default="hypercorn,hypercorn+patch,hypercorn-h1,aiohttp,threaded",
        help=(
            "comma-separated server stacks for the null webhook baseline ('' for none); "
            "'+patch' answers with the patch fluence makes"
        ),
    )
    parser.add_argument(
        "--profile", type=Path, help="run fluence-webhook under cProfile, stats to this file"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    null_servers = [s for s in args.null_servers.split(",") if s]
    null_keys = {
        s: "with_null" if s == "hypercorn" else "with_null_" + s.removeprefix("hypercorn+")
        for s in null_servers
    }
    series: dict[str, list[dict[str, Any]]] = {
        "without": [],
        "with": [],
        "with_h1": [],
        **{key: [] for key in null_keys.values()},
        "with_gang": [],
        "with_other": [],
    }
    # The webhooks' certificates and logs stay in the output directory for inspection.
    workdir = args.out / "webhook-run"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    if args.profile:
        test_webhook_process.SCRIPT = profiled_script(workdir, args.profile.resolve())
    null_bundle = generate(["localhost"], ["127.0.0.1"], days=2)
    write_files(null_bundle, workdir / "null-tls")
    patch_file = fluence_patch(workdir / "fluence-patch.json")

    def register(url: str, ca_pem: bytes) -> dict[str, Any]:
        config = webhook_configuration(url=url, ca_bundle=ca_pem, certificate=None)
        config["metadata"]["name"] = config_name
        if args.no_match_conditions:
            del config["webhooks"][0]["matchConditions"]
        return config

    config_name = "fluence-webhook-bench"
    with (
        ControlPlane() as cp,
        WebhookProcess(
            workdir,
            resources=ROOT / "examples" / "resources.yaml",
            kubeconfig=cp.kubeconfig,
            client=cp.webhook_client,
        ) as hook,
    ):
        assert hook.proc is not None
        components = {p.name: p.pid for p in cp.processes}
        cpu = CpuMeter({**components, "webhook": hook.proc.pid})
        config = register(f"{hook.url}{names.WEBHOOK_PATH}", hook.bundle.ca_pem)
        with contextlib.ExitStack() as stack:
            # The same webhook offering only HTTP/1.1 (FLUENCE_HTTP2=false).
            (workdir / "h1").mkdir()
            hook_h1 = stack.enter_context(
                WebhookProcess(
                    workdir / "h1",
                    resources=ROOT / "examples" / "resources.yaml",
                    kubeconfig=cp.kubeconfig,
                    extra_env={"FLUENCE_HTTP2": "false"},
                    client=cp.webhook_client,
                )
            )
            assert hook_h1.proc is not None
            config_h1 = register(f"{hook_h1.url}{names.WEBHOOK_PATH}", hook_h1.bundle.ca_pem)
            nulls = [
                stack.enter_context(
                    NullWebhook(
                        workdir,
                        entry.partition("+")[0],
                        null_bundle,
                        patch_file if entry.endswith("+patch") else None,
                    )
                )
                for entry in null_servers
            ]
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
                cpu_h1 = CpuMeter({**components, "webhook": hook_h1.proc.pid})
                cp.rest.create(CONFIGS, config_h1)
                wait_until(lambda: webhook_called(cp), True)
                series["with_h1"].append(
                    create_pods(cp, namespace(cp), args.pods, args.concurrency, quantum_pod, cpu_h1)
                )
                cp.rest.delete(f"{CONFIGS}/{config_name}")
                wait_until(lambda: webhook_called(cp), False)
                for entry, null in zip(null_servers, nulls, strict=True):
                    assert null.proc is not None
                    null_cpu = CpuMeter({**components, "webhook": null.proc.pid})
                    cp.rest.create(CONFIGS, register(f"{null.url}/mutate", null.bundle.ca_pem))
                    wait_until(lambda n=null: n.called(cp), True)
                    series[null_keys[entry]].append(
                        create_pods(
                            cp,
                            namespace(cp),
                            args.pods,
                            args.concurrency,
                            quantum_pod,
                            null_cpu,
                        )
                    )
                    cp.rest.delete(f"{CONFIGS}/{config_name}")
                    wait_until(lambda n=null: n.called(cp), False)
    result: dict[str, Any] = {
        "benchmark": "webhook",
        "pods": args.pods,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        **{k: merge(v) for k, v in series.items()},
    }

    def rate(key: str) -> float:
        value: float = result[key]["pods_per_s"]
        return value

    ratios = {
        "fluence/without": rate("with") / rate("without"),
        "fluence HTTP/1.1/without": rate("with_h1") / rate("without"),
        "gang/without": rate("with_gang") / rate("without"),
        "other/without": rate("with_other") / rate("without"),
    }
    for entry, key in null_keys.items():
        suffix = "" if entry == "hypercorn" else f" ({entry})"
        ratios[f"null/without{suffix}"] = rate(key) / rate("without")
        ratios[f"fluence/null{suffix}"] = rate("with") / rate(key)
    result["ratios"] = {k: round(v, 3) for k, v in ratios.items()}
    result["ratio"] = result["ratios"]["fluence/without"]
    result["png"] = str(draw(result, args.out))
    (args.out / "webhook.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
