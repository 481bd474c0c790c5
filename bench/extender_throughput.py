"""Pods bound per second by a real kube-scheduler, with the fluence extender and without it.

One local control plane (etcd + kube-apiserver, ``testbed``), one
set of fake nodes, six phases:

1. **default** - kube-scheduler with only the default profile, no extender;
2. **fluence** - a ``fluence-extender`` process and a kube-scheduler whose
   ``fluence`` profile calls it (filter, prioritize, bind; ``nodeCacheCapable``),
   for every pod;
3. **queue** - the same extender and kube-scheduler, but the pods carry the
   scheduling gate ``fluence.flux-framework.org/queue`` (as fluence's webhook adds
   it): the extender's queue places them (each bare pod a group of one) and releases
   each pinned to its node with one patch; kube-scheduler then filters (answered
   from the holding) and binds it through the extender;
4. **queue-only** - the gated pods and the extender's queue as in 3, but kube-scheduler's
   ``fluence`` profile calls no extender: a pre-placed pod costs no extender call, and
   kube-scheduler binds it itself (pods created without the gate would then be placed
   by kube-scheduler alone);
5. **null** - the same kube-scheduler calling ``bench/null_extender.py``, which
   passes every candidate through and binds with fluence's own binder: what any
   extender that binds costs, so "fluence / null" is what fluence's placement adds;
6. **null-queue** - kube-scheduler as in 1, but the pods are gated and
   ``bench/null_queue.py`` lifts each gate as it comes (no decision, no pin): what
   gating at admission costs in itself, so "queue-only / null-queue" is what the
   queue's decisions add.

kube-scheduler runs at its strongest, as large clusters run it (and scheduler_perf
measures it): client QPS and burst 5,000 (``--client-qps``; 0: its defaults, 50 and
100); without an extender it scores its adaptive share of the nodes, with one it
scores them all (``percentageOfNodesToScore: 100``: the extender must be offered
every feasible node). The JSON says which settings each phase ran with.

Each of ``--runs`` runs runs every phase once on a burst of ``--pods`` single pods
(small requests: they all fit), or with ``--gang K`` of gangs of K such pods (each a
``scheduling.k8s.io`` PodGroup with ``minCount`` K, created before its pods: ``default``
and ``null-queue`` then place them with kube-scheduler's own gang scheduling), in an
order rotated per run, so a machine that speeds
up or slows down affects every phase alike; the JSON gives each phase's pods/s and
each ratio as the median and range (min, max) over the runs, a ratio pairing run i
of one phase with run i of the other. A phase creates its pods from a few concurrent
creators over keep-alive connections and is timed from the first create to the moment
a watch sees the last pod bound. Every phase starts its own scheduler (and extender)
on empty nodes and deletes its pods after. Prints JSON and draws
``bench/out/extender_throughput.png`` (``-gang<K>`` with ``--gang``; the first run of
each phase). Usage::

    python bench/extender_throughput.py [--nodes 1000] [--pods 3000] [--creators 4] [--runs 3]
        [--phases default fluence queue queue-only null null-queue] [--client-qps 5000]
        [--gang 8]
    python bench/extender_throughput.py --quick      # 200 nodes, 600 pods
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.plots import new_figure, save_figure  # noqa: E402
from fluence import names  # noqa: E402
from testbed import ControlPlane  # noqa: E402
from testbed.cluster import selected_release  # noqa: E402
from testbed.processes import free_port  # noqa: E402
from testbed.schedconfig import scheduler_config as fluence_scheduler_config  # noqa: E402

EXTENDER = Path(sys.executable).with_name("fluence-extender")
CLIENT_QPS = 5000
"""kube-scheduler's client QPS and burst in the benches (scheduler_perf's); 0: its defaults."""
EXTENDER_RULES = ("fluence", "queue", "null")
"""The rules (phases) whose kube-scheduler calls an extender."""


@dataclass
class Phase:
    name: str
    pods: int
    created_s: float = 0.0
    bound_s: float = 0.0
    bound_at: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each process used during the phase (scheduler, extender)."""
    extender_ms: dict[str, float] = field(default_factory=dict)
    """Mean time the extender spent per request, by verb (its own histogram)."""
    api_requests: dict[str, int] = field(default_factory=dict)
    """Requests the API server answered during the phase, by verb and resource."""
    refused: int = 0
    """kube-scheduler's FailedScheduling Events in the phase (:func:`scheduling_refusals`)."""

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.bound_s if self.bound_s else 0.0


class Api:
    """Keep-alive HTTPS clients with the admin identity (one per thread: httpx is not shared)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.server = cp.server
        self.tls = ssl.create_default_context(cafile=str(cp.ca_file))
        self.tls.load_cert_chain(str(cp.admin_cert_file), str(cp.admin_key_file))

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.server, verify=self.tls, timeout=timeout)


def pod_body(name: str, scheduler: str, gated: bool = False, group: str = "") -> dict[str, Any]:
    """A small pod; ``gated``: behind the queue's scheduling gate, as the webhook makes it;
    ``group``: a member of that PodGroup."""
    requests = {"cpu": "10m", "memory": "16Mi"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "app",
                "image": "busybox",
                "resources": {"requests": requests, "limits": requests},
            }
        ],
    }
    if gated:
        spec["schedulingGates"] = [{"name": names.QUEUE_GATE}]
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "throughput"}},
        "spec": spec,
    }


def watch_bound(
    api: Api, namespace: str, total: int, started: threading.Event, out: queue.Queue[Any]
) -> None:
    """Put the monotonic time each pod is first seen bound; ``None`` when all are."""
    try:
        _watch_bound(api, namespace, total, started, out)
    except Exception as exc:  # noqa: BLE001 - handed to the phase, which raises it
        out.put(exc)
        started.set()


def _watch_bound(
    api: Api, namespace: str, total: int, started: threading.Event, out: queue.Queue[Any]
) -> None:
    seen: set[str] = set()
    with api.client(timeout=600) as c:
        r = c.get(f"/api/v1/namespaces/{namespace}/pods")
        if r.status_code != 200:
            raise RuntimeError(f"listing pods of {namespace}: {r.status_code} {r.text[:300]}")
        rv = r.json()["metadata"]["resourceVersion"]
        started.set()
        while len(seen) < total:
            params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "300"}
            path = f"/api/v1/namespaces/{namespace}/pods"
            with c.stream("GET", path, params=params) as r:
                for line in r.iter_lines():
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise RuntimeError(f"watch failed: {obj.get('message')}")
                    rv = obj["metadata"]["resourceVersion"]
                    name = obj["metadata"]["name"]
                    if (obj.get("spec") or {}).get("nodeName") and name not in seen:
                        seen.add(name)
                        out.put(time.monotonic())
                        if len(seen) == total:
                            break
    out.put(None)


def create_pods(
    api: Api,
    namespace: str,
    prefix: str,
    count: int,
    creators: int,
    scheduler: str,
    gated: bool = False,
    gang: int = 1,
) -> float:
    """Create ``count`` pods from ``creators`` threads; returns the monotonic start time.

    ``gang`` > 1: the pods come in PodGroups of that many, each group created (by one
    creator) before its pods.
    """
    from bench.cluster_rules import podgroup  # cluster_rules builds on this module

    units: queue.Queue[tuple[str, list[str]]] = queue.Queue()
    for g in range(0, count, gang):
        members = [f"{prefix}-{i:05d}" for i in range(g, min(g + gang, count))]
        units.put((f"{prefix}-g{g // gang:05d}" if gang > 1 else "", members))
    groups_path = (
        f"/apis/scheduling.k8s.io/{selected_release().podgroup_version}"
        f"/namespaces/{namespace}/podgroups"
    )
    errors: list[str] = []

    def creator() -> None:
        with api.client() as c:
            while True:
                try:
                    group, members = units.get_nowait()
                except queue.Empty:
                    return
                if group:
                    r = c.post(groups_path, json=podgroup(group, len(members)))
                    if r.status_code != 201:
                        errors.append(f"{group}: {r.status_code} {r.text[:200]}")
                        continue
                for name in members:
                    body = pod_body(name, scheduler, gated, group)
                    r = c.post(f"/api/v1/namespaces/{namespace}/pods", json=body)
                    if r.status_code != 201:
                        errors.append(f"{name}: {r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=creator, daemon=True) for _ in range(creators)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} pod creates failed, first: {errors[0]}")
    return start


def api_request_counts(api: Api) -> dict[str, float]:
    """``apiserver_request_total`` summed by "VERB resource[/subresource]"."""
    with api.client() as c:
        text = c.get("/metrics").text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(
            part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(",")
        )
        resource = labels.get("resource", '""').strip('"')
        sub = labels.get("subresource", '""').strip('"')
        key = f"{labels.get('verb', '').strip(chr(34))} {resource}{'/' + sub if sub else ''}"
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def control_plane_pids(cp: ControlPlane) -> dict[str, int]:
    return {p.name: p.pid for p in cp.processes if p.name in ("etcd", "kube-apiserver")}


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def extender_means(url: str) -> dict[str, float]:
    """Mean ms per verb from the extender's ``fluence_extender_request_seconds`` histogram."""
    text = httpx.get(url + "/metrics/", timeout=10).text
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for suffix, into in (("_sum{", sums), ("_count{", counts)):
            if line.startswith("fluence_extender_request_seconds" + suffix):
                verb = line.split('verb="', 1)[1].split('"', 1)[0]
                into[verb] = float(line.rsplit(" ", 1)[1])
    return {v: round(sums[v] / counts[v] * 1000, 3) for v in sums if counts.get(v)}


def pod_states(api: Api, namespace: str) -> dict[str, int]:
    """How the namespace's pods stand: bound, gated (by the queue or another), or pending."""
    with api.client() as c:
        items = c.get(f"/api/v1/namespaces/{namespace}/pods").json().get("items") or []
    states: dict[str, int] = {}
    for pod in items:
        spec = pod.get("spec") or {}
        gates = [g.get("name") for g in spec.get("schedulingGates") or ()]
        if spec.get("nodeName"):
            state = "bound"
        elif names.QUEUE_GATE in gates:
            state = "gated by the queue"
        elif gates:
            state = "gated by others"
        else:
            state = "pending ungated"
        states[state] = states.get(state, 0) + 1
    return states


def scheduling_refusals(cp: ControlPlane, namespace: str) -> int:
    """kube-scheduler's ``FailedScheduling`` Events in ``namespace`` so far, each counted as
    often as it repeated. Gated pods are never tried, so under the queue rules these are
    refusals of pods the queue released pinned to a node (the aim: none)."""
    found = cp.rest.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector="reason=FailedScheduling"
    )
    return sum(
        max(e.get("count") or 0, (e.get("series") or {}).get("count") or 0, 1)
        for e in found.get("items") or ()
    )


def run_phase(
    cp: ControlPlane,
    api: Api,
    name: str,
    scheduler: str,
    pods: int,
    creators: int,
    limit: float,
    processes: dict[str, int],
    gated: bool = False,
    gang: int = 1,
) -> Phase:
    namespace = f"bench-{name}"
    cp.create_namespace(namespace)
    bound: queue.Queue[Any] = queue.Queue()
    ready = threading.Event()
    watcher = threading.Thread(
        target=watch_bound, args=(api, namespace, pods, ready, bound), daemon=True
    )
    watcher.start()
    if not ready.wait(30):
        raise RuntimeError("the pod watch did not start within 30s")
    if not bound.empty():
        failure = bound.get()
        raise RuntimeError(f"phase {name}: the pod watch failed: {failure}")
    phase = Phase(name, pods)
    cpu_before = {k: cpu_seconds(pid) for k, pid in processes.items()}
    requests_before = api_request_counts(api)
    start = create_pods(api, namespace, name, pods, creators, scheduler, gated, gang)
    phase.created_s = time.monotonic() - start
    deadline = time.monotonic() + limit
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(
                f"phase {name}: only {len(phase.bound_at)} of {pods} pods bound in "
                f"{limit:.0f}s; the pods: {pod_states(api, namespace)}"
            )
        try:
            at = bound.get(timeout=left)
        except queue.Empty:
            continue
        if at is None:
            break
        if isinstance(at, Exception):
            raise RuntimeError(f"phase {name}: watching the pods failed: {at}") from at
        phase.bound_at.append(at - start)
    phase.bound_s = phase.bound_at[-1]
    phase.refused = scheduling_refusals(cp, namespace)
    phase.cpu_s = {k: round(cpu_seconds(pid) - cpu_before[k], 2) for k, pid in processes.items()}
    requests_after = api_request_counts(api)
    phase.api_requests = {
        k: int(v - requests_before.get(k, 0.0))
        for k, v in sorted(requests_after.items())
        if v - requests_before.get(k, 0.0) >= pods / 10
    }
    print(
        f"[{name}] {pods} pods created in {phase.created_s:.1f}s, "
        f"all bound after {phase.bound_s:.1f}s: {phase.pods_per_s:.1f} pods/s",
        file=sys.stderr,
    )
    return phase


def delete_namespace_pods(cp: ControlPlane, api: Api, namespace: str) -> None:
    cp.delete_namespace(namespace)
    with api.client() as c:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            items = c.get(f"/api/v1/namespaces/{namespace}/pods").json().get("items") or []
            if not items:
                return
            time.sleep(0.5)
    raise RuntimeError(f"pods of {namespace} were not deleted within 120s")


def tune_scheduler(doc: dict[str, Any], *, extender: bool, client_qps: int) -> dict[str, Any]:
    """kube-scheduler's configuration ``doc`` at its strongest, in place (and returned).

    Without an extender it scores its adaptive share of the nodes (the forced
    ``percentageOfNodesToScore: 100`` is removed); with one it keeps scoring all of
    them, so the extender is offered every feasible node. ``client_qps`` > 0 sets its
    client QPS and burst (0: kube-scheduler's defaults, 50 and 100).
    """
    if not extender:
        doc.pop("percentageOfNodesToScore", None)
    if client_qps > 0:
        client = dict(doc.get("clientConnection") or {})
        client.update(qps=client_qps, burst=client_qps)
        doc["clientConnection"] = client
    return doc


def scheduler_settings(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of configuration ``doc`` that a row of results should carry."""
    client = doc.get("clientConnection") or {}
    return {
        "percentage_of_nodes_to_score": doc.get("percentageOfNodesToScore", "adaptive"),
        "client_qps": client.get("qps", "default (50)"),
        "client_burst": client.get("burst", "default (100)"),
        "extender": bool(doc.get("extenders")),
        "scoring": next(
            (
                c["args"]["scoringStrategy"]["type"]
                for profile in doc.get("profiles") or ()
                for c in profile.get("pluginConfig") or ()
                if c.get("name") == "NodeResourcesFit"
            ),
            "LeastAllocated (default)",
        ),
    }


def scheduler_config(profile: str, extender_url: str | None, client_qps: int) -> dict[str, Any]:
    doc = fluence_scheduler_config(extender_url, profile=profile, fast_backoff=False)
    return tune_scheduler(doc, extender=extender_url is not None, client_qps=client_qps)


class Extender:
    """``fluence-extender`` (or, with ``null``, ``bench/null_extender.py``) on a free port.

    It runs the queue without a Lease (``FLUENCE_QUEUE_LEASE_NAMESPACE=""``: a bench has
    one extender) unless this process's environment or ``env`` says otherwise.
    """

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        *,
        null: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.extra_env = dict(env or {})
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.null = null
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Extender:
        env = {
            "FLUENCE_QUEUE_LEASE_NAMESPACE": "",
            **os.environ,
            "FLUENCE_BIND": f"127.0.0.1:{self.port}",
            "FLUENCE_KUBECONFIG": str(self.kubeconfig),
            **self.extra_env,
        }
        argv = [str(EXTENDER)]
        if self.null:
            script = str(ROOT / "bench" / "null_extender.py")
            argv = [sys.executable, script, "--bind", env["FLUENCE_BIND"]]
            argv += ["--kubeconfig", str(self.kubeconfig)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fluence-extender exited; see {self.log_path}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"fluence-extender not ready within 120s; see {self.log_path}")

    def __exit__(self, *_: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@contextlib.contextmanager
def null_queue(kubeconfig: Path, log_path: Path) -> Iterator[int]:
    """``bench/null_queue.py`` running (it lifts the queue's gate from every pod); its pid."""
    argv = [sys.executable, str(ROOT / "bench" / "null_queue.py"), "--kubeconfig", str(kubeconfig)]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "following pods" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench/null_queue.py did not start; see {log_path}")
            time.sleep(0.1)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def add_nodes(cp: ControlPlane, count: int) -> None:
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    cp.add_nodes(count, prefix="tp-node-", capacity=capacity)


PHASES = ("default", "fluence", "queue", "queue-only", "null", "null-queue")
RATIOS = (
    ("fluence", "default"),
    ("queue", "default"),
    ("queue-only", "default"),
    ("queue", "fluence"),
    ("queue-only", "queue"),
    ("null", "default"),
    ("fluence", "null"),
    ("queue", "null"),
    ("null-queue", "default"),
    ("queue-only", "null-queue"),
)


def median_range(values: Sequence[float | None], digits: int = 3) -> dict[str, Any]:
    """Median, min and max of the values present (``None``: a run without one), and all."""
    present = [v for v in values if v is not None]
    out: dict[str, Any] = {"median": None, "min": None, "max": None}
    if present:
        out = {
            "median": round(statistics.median(present), digits),
            "min": round(min(present), digits),
            "max": round(max(present), digits),
        }
    out["per_run"] = [round(v, digits) if v is not None else None for v in values]
    return out


@dataclass
class Result:
    nodes: int
    pods: int
    creators: int
    runs: list[dict[str, Phase]]
    setup_s: float
    names: tuple[str, ...] = PHASES
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """kube-scheduler's settings per phase (:func:`scheduler_settings`)."""
    gang: int = 1
    """Pods per PodGroup (1: single pods, no groups)."""

    def total(self, name: str) -> Phase:
        """One phase's runs as one: their pods, times, CPU and requests added up."""
        parts = [r[name] for r in self.runs]
        out = Phase(name, sum(p.pods for p in parts))
        offset = 0.0
        for p in parts:
            out.bound_at += [offset + t for t in p.bound_at]
            offset += p.bound_s
            out.created_s += p.created_s
            for k, v in p.cpu_s.items():
                out.cpu_s[k] = out.cpu_s.get(k, 0.0) + v
            for k, n in p.api_requests.items():
                out.api_requests[k] = out.api_requests.get(k, 0) + n
            out.refused += p.refused
        out.bound_s = offset
        means = [p.extender_ms for p in parts if p.extender_ms]
        if means:
            out.extender_ms = {
                k: round(statistics.fmean(m[k] for m in means if k in m), 3) for k in means[0]
            }
        return out

    def first(self, name: str) -> Phase:
        return self.runs[0][name]

    def doc(self) -> dict[str, Any]:
        def per_run(a: str, b: str) -> list[float | None]:
            return [
                r[a].pods_per_s / r[b].pods_per_s if r[b].pods_per_s else None for r in self.runs
            ]

        doc: dict[str, Any] = {
            "nodes": self.nodes,
            "pods_per_run": self.pods,
            "creators": self.creators,
            "gang": self.gang,
            "runs": len(self.runs),
            "setup_s": round(self.setup_s, 1),
            "scheduler": self.settings,
        }
        for name in self.names:
            rates = [r[name].pods_per_s for r in self.runs]
            doc[name] = {
                "pods_per_s": median_range(rates, 1),
                "all_bound_s": median_range([r[name].bound_s for r in self.runs], 2),
                **phase_doc(self.total(name)),
            }
        doc["ratios"] = {
            f"{a}/{b}": median_range(per_run(a, b))
            for a, b in RATIOS
            if a in self.names and b in self.names
        }
        return doc


def phase_doc(p: Phase) -> dict[str, Any]:
    """A phase's costs over all its runs (per pod)."""
    return {
        "created_s_total": round(p.created_s, 2),
        "cpu_ms_per_pod": {k: round(v / p.pods * 1000, 2) for k, v in p.cpu_s.items()},
        **({"extender_mean_ms": p.extender_ms} if p.extender_ms else {}),
        "api_requests_per_pod": {k: round(v / p.pods, 2) for k, v in p.api_requests.items()},
        "scheduling_refusals_total": p.refused,
    }


def run_segment(
    cp: ControlPlane,
    api: Api,
    name: str,
    run: int,
    pods: int,
    creators: int,
    limit: float,
    client_qps: int,
    settings: dict[str, dict[str, Any]],
    log_dir: Path,
    gang: int = 1,
) -> Phase:
    """One phase of one run: its scheduler (and extender) started, used, stopped; pods deleted.

    The extender logs to ``log_dir/throughput-<extender>-<phase>-<run>.log``.
    """
    label = f"{name}-{run}"
    namespace = f"bench-{label}"
    if name in ("default", "null-queue"):
        config = scheduler_config("default-scheduler", None, client_qps)
        settings[name] = scheduler_settings(config)
        log = log_dir / f"throughput-null-queue-{label}.log"
        with contextlib.ExitStack() as stack:
            extra: dict[str, int] = {}
            if name == "null-queue":
                log.unlink(missing_ok=True)
                extra["null-queue"] = stack.enter_context(null_queue(cp.kubeconfig, log))
            sched = cp.start_scheduler(config, name=label)
            try:
                own = {"kube-scheduler": sched.pid, **extra, **control_plane_pids(cp)}
                phase = run_phase(
                    cp,
                    api,
                    label,
                    "default-scheduler",
                    pods,
                    creators,
                    limit,
                    own,
                    gated=name == "null-queue",
                    gang=gang,
                )
            finally:
                cp.stop_scheduler(sched)
    else:
        null = name == "null"
        process = "null-extender" if null else "fluence-extender"
        log = log_dir / f"throughput-{process}-{label}.log"
        log.unlink(missing_ok=True)
        with Extender(cp.kubeconfig, log, null=null) as ext:
            # queue-only: kube-scheduler's fluence profile calls no extender; the extender
            # runs the queue alone and pre-placed pods cost it no call at all.
            url = None if name == "queue-only" else ext.url
            config = scheduler_config(names.SCHEDULER_NAME, url, client_qps)
            settings[name] = scheduler_settings(config)
            sched = cp.start_scheduler(config, name=label)
            assert ext.proc is not None
            own = {"kube-scheduler": sched.pid, process: ext.proc.pid, **control_plane_pids(cp)}
            try:
                phase = run_phase(
                    cp,
                    api,
                    label,
                    names.SCHEDULER_NAME,
                    pods,
                    creators,
                    limit,
                    own,
                    gated=name in ("queue", "queue-only"),
                    gang=gang,
                )
                if not null:
                    phase.extender_ms = extender_means(ext.url)
            finally:
                cp.stop_scheduler(sched)
    delete_namespace_pods(cp, api, namespace)
    phase.name = name
    return phase


def run(
    n_nodes: int,
    n_pods: int,
    creators: int,
    limit: float,
    keep: Path | None,
    runs: int,
    phases: Sequence[str] = PHASES,
    client_qps: int = CLIENT_QPS,
    log_dir: Path = ROOT / "bench" / "out",
    gang: int = 1,
) -> Result:
    """Each run runs every phase once on ``n_pods`` pods (in gangs of ``gang``), in an
    order rotated per run."""
    t0 = time.monotonic()
    phases = tuple(phases)
    settings: dict[str, dict[str, Any]] = {}
    with ControlPlane(keep, keep=keep is not None) as cp:
        add_nodes(cp, n_nodes)
        api = Api(cp)
        setup_s = time.monotonic() - t0
        done: list[dict[str, Phase]] = []
        for i in range(runs):
            order = phases[i % len(phases) :] + phases[: i % len(phases)]
            done.append(
                {
                    n: run_segment(
                        cp, api, n, i, n_pods, creators, limit, client_qps, settings, log_dir, gang
                    )
                    for n in order
                }
            )
        return Result(n_nodes, n_pods, creators, done, setup_s, phases, settings, gang)


def draw(result: Result, out: Path) -> Path:
    fig, ax = new_figure()
    for name in result.names:
        p = result.first(name)
        ax.plot(p.bound_at, range(1, len(p.bound_at) + 1), label=f"{p.name}: {p.pods_per_s:.0f}/s")
    ax.set_xlabel("seconds since the first pod was created")
    ax.set_ylabel("pods bound")
    qps = result.settings.get(result.names[0], {}).get("client_qps", "?")
    pods = f"{result.pods} pods" + (f" in gangs of {result.gang}" if result.gang > 1 else "")
    ax.set_title(
        f"kube-scheduler throughput, {result.nodes} nodes, {pods}\n(first run; client QPS {qps})"
    )
    return save_figure(fig, ax, out / f"{stem(result.gang)}.png")


def stem(gang: int) -> str:
    """The output files' name: single pods and gangs of each size apart."""
    return "extender_throughput" + (f"-gang{gang}" if gang > 1 else "")


def points(p: Phase) -> Iterator[float]:
    step = max(1, len(p.bound_at) // 200)
    yield from (round(x, 3) for x in p.bound_at[::step])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=3000, help="pods per phase and run")
    parser.add_argument("--creators", type=int, default=4)
    parser.add_argument(
        "--runs",
        "--rounds",
        dest="runs",
        type=int,
        default=3,
        help="runs of every phase, each on --pods pods (--rounds: the old name)",
    )
    parser.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    parser.add_argument(
        "--client-qps",
        type=int,
        default=CLIENT_QPS,
        help="kube-scheduler's client QPS and burst (0: its defaults, 50 and 100)",
    )
    parser.add_argument("--gang", type=int, default=1, help="pods per PodGroup (1: no groups)")
    parser.add_argument("--quick", action="store_true", help="200 nodes and 600 pods")
    parser.add_argument("--limit", type=float, default=900, help="seconds allowed per phase")
    parser.add_argument("--keep", type=Path, help="keep the control plane's work dir here")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.pods = 200, 600
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.gang < 1 or args.pods % args.gang:
        parser.error("--gang must be at least 1 and divide --pods")
    args.out.mkdir(parents=True, exist_ok=True)
    phases = [p for p in PHASES if p in args.phases]
    result = run(
        args.nodes,
        args.pods,
        args.creators,
        args.limit,
        args.keep,
        args.runs,
        phases,
        args.client_qps,
        args.out,
        args.gang,
    )
    doc = result.doc()
    doc["png"] = str(draw(result, args.out))
    samples = {n: list(points(result.first(n))) for n in result.names}
    (args.out / f"{stem(args.gang)}.json").write_text(json.dumps({**doc, "bound_at_s": samples}))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
