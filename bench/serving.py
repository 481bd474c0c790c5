"""Server CPU per request: the webhook process on uvloop vs the standard asyncio loop.

Starts ``fluence-webhook`` (TLS, the example resources config) once per event
loop and sends it the same AdmissionReview for a quantum pod from a client in
another process, over HTTP/2 (what kube-apiserver speaks to webhooks) and over
HTTP/1.1, with a few streams in flight. Only the server's CPU time is counted
(its process's user+system seconds over the requests), so the client's own cost
and the machine's other load matter little; rounds alternate between the loops
and the median is kept. Prints JSON (ms of CPU per request for each loop and
protocol, and the uvloop/asyncio ratio) and draws ``bench/out/serving.png``::

    python bench/serving.py [--requests 2000] [--concurrency 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.plots import new_figure, save_figure  # noqa: E402
from bench.webhook import quantum_pod  # noqa: E402
from tests.integration.test_webhook_process import WebhookProcess  # noqa: E402

LOOPS = ("uvloop", "asyncio")
PROTOCOLS = ("h2", "http/1.1")

# The client runs in its own process so that its CPU is not the server's. It is
# asynchronous: httpx's threaded HTTP/2 client corrupts its own connection state
# under concurrent streams.
CLIENT = """
import asyncio, sys, httpx
url, ca, body = sys.argv[1:4]
n, conc, http2 = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
data = open(body, "rb").read()
async def main():
    versions = set()
    async with httpx.AsyncClient(verify=ca, http2=http2, http1=not http2, timeout=30,
                                 limits=httpx.Limits(max_connections=conc)) as c:
        async def worker(count):
            for _ in range(count):
                r = await c.post(url, content=data, headers={"Content-Type": "application/json"})
                r.raise_for_status()
                versions.add(r.http_version)
        await asyncio.gather(*(worker(n // conc + (i < n % conc)) for i in range(conc)))
    print(",".join(sorted(versions)))
asyncio.run(main())
"""


def review_body() -> bytes:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "default",
            "object": quantum_pod(1),
            "userInfo": {"username": "bench"},
        },
    }
    return json.dumps(review).encode()


def send(proc: WebhookProcess, body: Path, n: int, conc: int, http2: bool) -> tuple[float, str]:
    """Send ``n`` reviews; the server's CPU ms per review and the protocol seen."""
    assert proc.proc is not None
    server = psutil.Process(proc.proc.pid)
    before = server.cpu_times()
    argv = [sys.executable, "-c", CLIENT, proc.url + "/mutate", str(proc.ca_file), str(body)]
    done = subprocess.run(
        [*argv, str(n), str(conc), "1" if http2 else "0"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"client failed: {done.stderr.strip().splitlines()[-1:]}")
    after = server.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return cpu * 1000 / n, done.stdout.strip()


def run(requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {
        loop: {p: [] for p in PROTOCOLS} for loop in LOOPS
    }
    seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "review.json"
        body.write_bytes(review_body())
        for _ in range(rounds):
            for loop in LOOPS:
                workdir = Path(tmp) / loop
                workdir.mkdir(exist_ok=True)
                resources = ROOT / "examples" / "resources.yaml"
                env = {"FLUENCE_EVENT_LOOP": loop}
                with WebhookProcess(workdir, resources=resources, extra_env=env) as proc:
                    for protocol in PROTOCOLS:
                        http2 = protocol == "h2"
                        send(proc, body, min(200, requests), concurrency, http2)  # warm up
                        ms, version = send(proc, body, requests, concurrency, http2)
                        samples[loop][protocol].append(ms)
                        seen[protocol] = version
    cpu = {
        loop: {p: round(statistics.median(xs), 3) for p, xs in by.items()}
        for loop, by in samples.items()
    }
    return {
        "benchmark": "serving",
        "server": "fluence-webhook /mutate over TLS",
        "requests": requests,
        "concurrency": concurrency,
        "rounds": rounds,
        "protocols_seen": seen,
        "cpu_ms_per_request": cpu,
        "samples": samples,
        "ratio_uvloop_over_asyncio": {
            p: round(cpu["uvloop"][p] / cpu["asyncio"][p], 3) for p in PROTOCOLS
        },
    }


def draw(result: dict[str, Any], out: Path) -> Path:
    fig, ax = new_figure()
    width = 0.35
    for i, loop in enumerate(LOOPS):
        values = [result["cpu_ms_per_request"][loop][p] for p in PROTOCOLS]
        xs = [x + (i - 0.5) * width for x in range(len(PROTOCOLS))]
        ax.bar(xs, values, width, label=loop)
    ax.set_xticks(range(len(PROTOCOLS)), PROTOCOLS)
    ax.set_ylabel("server CPU ms per AdmissionReview")
    ax.set_title("fluence-webhook: CPU per request by event loop")
    return save_figure(fig, ax, out / "serving.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args.requests, args.concurrency, args.rounds)
    result["png"] = str(draw(result, args.out))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
