"""``python -m testbed.demo``: fluence end to end on a local control plane, then gone again.

It starts a real etcd, kube-apiserver and kube-controller-manager with
simulated nodes run by KWOK and, where the machine allows containers, this
machine as a real node (containerd and the kubelet), the device plugin (whose
devices become node capacity: the real node's, else the simulated nodes'), the
mutating webhook over mutual TLS, the scheduler extender behind a dedicated
kube-scheduler, applies the examples and prints where every pod went, which
quantum backend it got and what the quantum pod's container printed (on the
real node) or will read (on a simulated one). Then it stops everything in
reverse order; Ctrl-C and errors take the same path.

A component that fails to start is reported with the tail of its log and the
demo goes on with the rest, so a partly working tree still shows what works.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

import httpx

from fluence import names
from fluence.pki import issue_serving_cert
from fluence.resources import load as load_resources
from testbed import ControlPlane, KubeApiError, SchedulerHandle
from testbed.binaries import ensure_release
from testbed.cluster import selected_release
from testbed.node import DEVICE_PLUGIN_DIR, RealNode, missing_requirements, pod_logs
from testbed.processes import ManagedProcess, free_port, wait_until
from testbed.schedconfig import scheduler_config
from testbed.workloads import Discovery, apply, load_documents

if TYPE_CHECKING:
    from testbed.deviceplugins import DevicePluginRegistry

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RESOURCES = EXAMPLES / "resources.yaml"
# The quantum pod first: the real node, the only one with quantum devices, is small.
EXAMPLE_FILES = ("quantum-pod.yaml", "podgroup.yaml", "label-gang.yaml", "job-gang.yaml")
NAMESPACE = "fluence-demo"
NODE_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110"}
REAL_NODE = "real-node"
REAL_NODE_CPU_M = 1500
"""What the real node offers (millicores): less than a `training` member asks, so the
gangs leave room for the quantum pod whatever the machine's size."""
COMPONENT_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
SETTLE_QUIET_S = 3.0
GRACE_S = 5.0
# Units of the extender's per-node pools, for the usage table's headers.
USAGE_UNITS = {"core": "millicores", "memory": "MiB"}
CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


class Interrupted(BaseException):
    """SIGTERM or Ctrl-C: stop everything that runs, then exit."""


# Output ------------------------------------------------------------------------------


class Console:
    """Numbered steps and notes on a stream (stdout), flushed at once so progress is visible."""

    def __init__(self, out: TextIO, total_steps: int) -> None:
        self.out = out
        self.total = total_steps
        self.step_no = 0
        self.failures: list[str] = []
        self.started = time.monotonic()

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def step(self, text: str) -> None:
        self.step_no += 1
        at = time.monotonic() - self.started
        self.line(f"[{self.step_no}/{self.total}] {text}  (t={at:.1f}s)")

    def ok(self, text: str) -> None:
        self.line(f"      ok: {text}")

    def failed(self, what: str, error: BaseException | str, log_tail: str = "") -> None:
        self.failures.append(what)
        self.line(f"      FAILED: {what}: {error}")
        for tail_line in log_tail.splitlines()[-15:]:
            self.line(f"        | {tail_line}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with columns as wide as their widest cell."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([fmt(headers), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


# What the demo reports about a pod ---------------------------------------------------


@dataclass(frozen=True)
class PodView:
    """One pod as the report shows it, derived from the stored object alone."""

    key: str
    group: str
    phase: str
    node: str
    backend: str
    env: dict[str, str] = field(default_factory=dict)
    """Backend variables (QRMI_BACKEND, FLUXION_*) of the first container that has them, with
    the annotation each reads."""
    pending_reason: str = ""
    output: str = ""
    """What the pod's containers printed (pods that ran on the real node)."""

    @property
    def bound(self) -> bool:
        return bool(self.node)


def pending_reason(pod: Mapping[str, Any]) -> str:
    """The message of a PodScheduled=False condition ('' if the pod has none)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "unschedulable")
    return ""


def pod_group(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    scheduling_group = spec.get("schedulingGroup") or {}
    if scheduling_group.get("podGroupName"):
        return str(scheduling_group["podGroupName"])
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(names.LABEL_GROUP, ""))


def backend_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """QRMI_BACKEND and FLUXION_* of the first container that has them: ``annotation = value``.

    The webhook makes each read one annotation through the downward API; a simulated
    node runs no container, so the report says what a kubelet will read.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        picked = {}
        for env in container.get("env") or []:
            name = str(env.get("name", ""))
            if name != names.ENV_QRMI_BACKEND and not name.startswith(names.ENV_FLUXION_PREFIX):
                continue
            path = str(((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", ""))
            key = path.removeprefix("metadata.annotations['").removesuffix("']")
            if key != path:
                picked[name] = f"{key} = {annotations.get(key, '')}"
        if picked:
            return picked
    return {}


def pod_view(pod: Mapping[str, Any], output: str = "") -> PodView:
    meta = pod.get("metadata") or {}
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return PodView(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        group=pod_group(pod),
        phase=str((pod.get("status") or {}).get("phase") or "Pending"),
        node=node,
        backend=str((meta.get("annotations") or {}).get(names.ANNOTATION_BACKEND, "")),
        env=backend_env(pod) if node else {},
        pending_reason="" if node else pending_reason(pod),
        output=output,
    )


def render_pods(views: Sequence[PodView]) -> str:
    """The pod table, then quantum pods' output or env, and the reasons of pending ones."""
    rows = [
        [v.key, v.group or "-", v.phase, v.node or "(pending)", v.backend or "-"] for v in views
    ]
    lines = [table(["POD", "GROUP", "PHASE", "NODE", "BACKEND"], rows)]
    ran = [v for v in views if v.env and v.output]
    if ran:
        lines += ["", "Printed by the container on the real node (its env set by the kubelet):"]
        for v in ran:
            lines += [f"  {v.key}: {line}" for line in v.output.splitlines()]
    not_run = [v for v in views if v.env and not v.output]
    if not_run:
        lines += [
            "",
            "Env the kubelet sets from annotations (downward API), for pods not run here:",
        ]
        for v in not_run:
            lines.append(f"  {v.key}:")
            lines += [f"    {k} <- {val}" for k, val in sorted(v.env.items())]
    pending = [v for v in views if not v.bound]
    if pending:
        lines += ["", "Pending pods:"]
        for v in pending:
            lines.append(f"  {v.key}: {v.pending_reason or 'not scheduled yet'}")
    return "\n".join(lines)


def render_usage(state: Mapping[str, Any], nodes: Sequence[str]) -> str:
    """Per node, ``allocated/capacity`` of each type the extender's graph holds."""
    per_node: Mapping[str, Mapping[str, Mapping[str, int]]] = state.get("nodes") or {}
    types = sorted({t for n in nodes for t in per_node.get(n, {})})
    rows = []
    for n in nodes:
        usage = per_node.get(n, {})
        cells = []
        for t in types:
            u = usage.get(t)
            cells.append(f"{u['allocated']}/{u['capacity']}" if u else "-")
        rows.append([n, *cells])
    headers = [
        f"{t} used/cap" + (f" ({USAGE_UNITS[t]})" if t in USAGE_UNITS else "") for t in types
    ]
    lines = [table(["NODE", *headers], rows)]
    backends: Mapping[str, Mapping[str, Any]] = state.get("backends") or {}
    if backends:
        lines += ["", "Quantum backends:"]
        for name, b in sorted(backends.items()):
            holder = f"held by {b.get('pod')}" if b.get("held") else "free"
            lines.append(f"  {name}: {holder}")
    return "\n".join(lines)


def settled(views: Sequence[PodView]) -> bool:
    """Every pod is bound or carries a scheduling verdict."""
    return bool(views) and all(v.bound or v.pending_reason for v in views)


# Components --------------------------------------------------------------------------


def _console_script(name: str, module: str) -> list[str]:
    """The installed console script (clear in ``ps``), else ``python -m module``."""
    script = Path(sys.executable).with_name(name)
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def _child_env(**settings: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({f"FLUENCE_{k.upper()}": v for k, v in settings.items()})
    return env


def _http_ready(url: str, verify: ssl.SSLContext | bool = False) -> Callable[[], bool]:
    def probe() -> bool:
        return httpx.get(url, timeout=2, verify=verify).status_code == 200

    return probe


@dataclass
class Options:
    nodes: int = 4
    keep_running: bool = False
    workdir: Path | None = None
    settle_timeout_s: float = SETTLE_TIMEOUT_S
    real_node: bool = True


class Demo:
    """Starts the components in order; :meth:`close` stops whatever was started, in reverse."""

    def __init__(self, options: Options, console: Console) -> None:
        self.options = options
        self.console = console
        self.stack = contextlib.ExitStack()
        self.cp: ControlPlane | None = None
        self.nodes: list[str] = []
        self.kwok_nodes: list[str] = []
        self.real_node: RealNode | None = None
        self.extender_url = ""
        self.scheduler: SchedulerHandle | None = None
        self.resource_names: list[str] = []
        self.launch_errors: dict[str, Exception] = {}
        self.registry: DevicePluginRegistry | None = None
        self.device_plugin: ManagedProcess | None = None
        self.webhook: ManagedProcess | None = None
        self.webhook_url = ""
        self.webhook_probe_url = ""
        self.webhook_ca = b""
        self.extender: ManagedProcess | None = None
        self.extender_candidate_url = ""

    @property
    def control_plane(self) -> ControlPlane:
        assert self.cp is not None
        return self.cp

    def close(self) -> None:
        self.stack.close()

    def _process(self, name: str, argv: list[str], env: dict[str, str]) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.control_plane.log_path(name), env=env)
        self.stack.callback(proc.stop, GRACE_S)
        return proc

    # 1 -------------------------------------------------------------------------------
    def start_control_plane(self) -> None:
        self.console.step(
            "control plane: etcd, kube-apiserver, kube-controller-manager, KWOK nodes"
        )
        t0 = time.monotonic()
        binaries = ensure_release(selected_release().minor, log=self.console.out)
        self.console.ok(f"binaries in {binaries.etcd.parent} ({time.monotonic() - t0:.1f}s)")
        keep = self.options.workdir is not None
        if self.options.workdir is not None:
            cleared = clear_previous_run(self.options.workdir)
            if cleared:
                self.console.ok(f"removed the previous run's {', '.join(cleared)}")
        cp = ControlPlane(self.options.workdir, keep=keep, binaries=binaries, grace_s=GRACE_S)
        self.stack.callback(cp.stop)
        self.cp = cp
        cp.start()
        self.console.ok(f"apiserver {cp.server} ready in {cp.timings.start_s:.1f}s")
        self.kwok_nodes = cp.add_nodes(self.options.nodes, capacity=NODE_CAPACITY)
        self.nodes = list(self.kwok_nodes)
        cp.start_kwok()
        cp.create_namespace(NAMESPACE)
        self.console.ok(
            f"{len(self.kwok_nodes)} KWOK nodes ({NODE_CAPACITY['cpu']} cpu, "
            f"{NODE_CAPACITY['memory']} each), namespace {NAMESPACE}"
        )
        self.start_real_node()

    def start_real_node(self) -> None:
        """This machine as a node that runs containers, when it can (root, the packages)."""
        reason = missing_requirements() if self.options.real_node else "--no-real-node"
        if reason is not None:
            self.console.ok(f"no real node ({reason}): every pod runs on KWOK nodes")
            return
        t0 = time.monotonic()
        reserved = max(0, (os.cpu_count() or 1) * 1000 - REAL_NODE_CPU_M)
        node = RealNode(
            self.control_plane,
            REAL_NODE,
            reserved={"cpu": f"{reserved}m"} if reserved else None,
            grace_s=GRACE_S,
        )
        self.stack.callback(node.stop)
        try:
            node.start()
        except Exception as exc:  # noqa: BLE001 - reported; the demo goes on without it
            self.console.failed("real node", exc)
            return
        self.real_node = node
        self.nodes.append(REAL_NODE)
        self.console.ok(
            f"real node {REAL_NODE} ({node.address}): containerd + kubelet, Ready in "
            f"{time.monotonic() - t0:.1f}s; the quantum devices are its own"
        )

    # 2-4: the three fluence processes start together (each takes seconds to import
    # its libraries), then each is waited for and wired up in its own step.
    def launch_components(self) -> None:
        """Spawn the device plugin, webhook and extender; a failed spawn fails its step later."""
        for what, launch in (
            ("device plugin", self._launch_device_plugin),
            ("webhook", self._launch_webhook),
            ("extender", self._launch_extender),
        ):
            try:
                launch()
            except Exception as exc:  # noqa: BLE001 - reported by the component's step
                self.launch_errors[what] = exc

    def _launched(self, what: str) -> None:
        error = self.launch_errors.get(what)
        if error is not None:
            raise error

    def _launch_device_plugin(self) -> None:
        from testbed.deviceplugins import DevicePluginRegistry

        config = load_resources(RESOURCES)
        self.resource_names = [names.resource_name(t) for t in sorted(config.types())]
        if self.real_node is not None:
            # As the DaemonSet's pod on the real node: the kubelet's device manager takes it.
            plugin_dir = DEVICE_PLUGIN_DIR
        else:
            # Unix socket paths are short (about 107 bytes): keep the directory under /tmp.
            plugin_dir = Path(tempfile.mkdtemp(prefix="fluence-dp-", dir="/tmp"))
            self.stack.callback(lambda: _remove_tree(plugin_dir))
            self.registry = DevicePluginRegistry(plugin_dir).start()
            self.stack.callback(self.registry.stop)
        self.device_plugin = self._process(
            "fluence-deviceplugin",
            _console_script("fluence-deviceplugin", "deviceplugin"),
            _child_env(
                resources=str(RESOURCES),
                device_plugin_dir=str(plugin_dir),
                http_bind=f"127.0.0.1:{free_port()}",
            ),
        )

    def start_device_plugin(self) -> None:
        self.console.step("device plugin: advertise the quantum resources")
        self._launched("device plugin")
        assert self.device_plugin is not None
        proc = self.device_plugin
        if self.real_node is not None:
            reported: dict[str, str] = {}

            def in_node_status() -> bool:
                node = self.control_plane.rest.get(f"/api/v1/nodes/{REAL_NODE}")
                reported.update(node["status"].get("allocatable") or {})
                return all(reported.get(n, "0") != "0" for n in self.resource_names)

            wait_until(in_node_status, timeout_s=COMPONENT_TIMEOUT_S, what="seen", process=proc)
            advertised = ", ".join(
                f"{n.rsplit('/', 1)[1]}={reported[n]}" for n in self.resource_names
            )
            self.console.ok(f"the kubelet of {REAL_NODE} reports {advertised}")
            return
        assert self.registry is not None
        try:
            devices = self.registry.wait_for_resources(self.resource_names, COMPONENT_TIMEOUT_S)
        except TimeoutError as exc:
            proc.check_running()
            raise proc.start_error(str(exc)) from exc
        counts = {n: str(devices[n]) for n in self.resource_names}
        for node in self.kwok_nodes:
            self.control_plane.patch_node_status(node, capacity=counts, allocatable=counts)
        advertised = ", ".join(f"{n.rsplit('/', 1)[1]}={c}" for n, c in counts.items())
        self.console.ok(
            f"registered {advertised}; copied into {len(self.kwok_nodes)} nodes' status"
        )

    def _launch_webhook(self) -> None:
        cp = self.control_plane
        assert cp.ca is not None
        tls_dir = cp.workdir / "webhook-tls"
        cert, key, self.webhook_ca = issue_serving_cert(
            tls_dir, ["127.0.0.1", "localhost"], ca=cp.ca
        )
        port, probe_port = free_port(), free_port()
        self.webhook_url = f"https://127.0.0.1:{port}"
        self.webhook_probe_url = f"http://127.0.0.1:{probe_port}"
        # Only the apiserver's webhook client certificate gets a review answered.
        self.webhook = self._process(
            "fluence-webhook",
            _console_script("fluence-webhook", "webhook"),
            _child_env(
                bind=f"127.0.0.1:{port}",
                probe_bind=f"127.0.0.1:{probe_port}",
                tls_cert=str(cert),
                tls_key=str(key),
                client_ca=str(cp.webhook_client.ca_file),
                resources=str(RESOURCES),
                kubeconfig=str(cp.kubeconfig),
                gang="true",
            ),
        )

    def start_webhook(self) -> None:
        self.console.step("mutating webhook over mutual TLS, registered with the apiserver by URL")
        self._launched("webhook")
        assert self.webhook is not None
        url, ca_pem = self.webhook_url, self.webhook_ca
        wait_until(
            _http_ready(f"{self.webhook_probe_url}/readyz"),
            timeout_s=COMPONENT_TIMEOUT_S,
            what="ready",
            process=self.webhook,
        )
        from webhook.manifest import webhook_configuration

        config = webhook_configuration(
            url=f"{url}{names.WEBHOOK_PATH}", ca_bundle=ca_pem, certificate=None
        )
        self.control_plane.rest.create(CONFIGS, config)
        wait_until(self._webhook_effective, timeout_s=30, what="called by the apiserver")
        self.console.ok(f"{url}{names.WEBHOOK_PATH} serving; the apiserver calls it")

    def _webhook_effective(self) -> bool:
        """The apiserver loads webhook configurations asynchronously; probe with a dry run."""
        probe = load_documents(EXAMPLES / "quantum-pod.yaml")[0]
        probe["metadata"]["name"] = f"probe-{uuid.uuid4().hex[:6]}"
        out = self.control_plane.rest.create(
            f"/api/v1/namespaces/{NAMESPACE}/pods", probe, dryRun="All"
        )
        env = out["spec"]["containers"][0].get("env") or []
        return any(e.get("name") == names.ENV_QRMI_BACKEND for e in env)

    def _launch_extender(self) -> None:
        port = free_port()
        self.extender_candidate_url = f"http://127.0.0.1:{port}"
        # The key the Secret fluence-record-key holds in a cluster: records outlive a restart.
        key = self.control_plane.workdir / "record-key"
        if not key.exists():
            key.write_text(secrets.token_hex(32))
        self.extender = self._process(
            "fluence-extender",
            _console_script("fluence-extender", "scheduler_extender"),
            _child_env(
                bind=f"127.0.0.1:{port}",
                kubeconfig=str(self.control_plane.kubeconfig),
                resources=str(RESOURCES),
                scheduler_name=names.SCHEDULER_NAME,
                record_key_file=str(key),
            ),
        )

    def start_extender(self) -> None:
        self.console.step("scheduler extender + kube-scheduler with the `fluence` profile")
        self._launched("extender")
        assert self.extender is not None
        proc, url = self.extender, self.extender_candidate_url
        wait_until(
            _http_ready(f"{url}/readyz"),
            timeout_s=COMPONENT_TIMEOUT_S,
            what="ready",
            process=proc,
        )
        self.extender_url = url
        wait_until(
            lambda: all(n in self.extender_state()["nodes"] for n in self.nodes),
            timeout_s=30,
            what="aware of every node",
            process=proc,
        )
        self.console.ok(f"extender {url} ready and sees {len(self.nodes)} nodes")
        self.scheduler = self.control_plane.start_scheduler(
            scheduler_config(url), name="kube-scheduler-fluence"
        )
        self.stack.callback(self._stop_scheduler)
        self.console.ok(f"kube-scheduler (profile {names.SCHEDULER_NAME}) healthy")

    def _stop_scheduler(self) -> None:
        if self.scheduler is not None and self.cp is not None:
            self.cp.stop_scheduler(self.scheduler)
            self.scheduler = None

    def extender_state(self) -> dict[str, Any]:
        doc: dict[str, Any] = httpx.get(f"{self.extender_url}/state", timeout=5).json()
        return doc

    # 5 -------------------------------------------------------------------------------
    def apply_examples(self) -> None:
        self.console.step(f"apply examples into namespace {NAMESPACE}")
        rest = self.control_plane.rest
        discovery = Discovery(rest)
        expected = 0
        for filename in EXAMPLE_FILES:
            path = EXAMPLES / filename
            try:
                applied = apply(rest, load_documents(path), NAMESPACE, discovery=discovery)
            except (KubeApiError, OSError) as exc:
                self.console.failed(f"apply examples/{filename}", exc)
                continue
            expected += applied.expected_pods
            made = [f"{o['kind']}/{o['metadata']['name']}" for o in applied.objects]
            self.console.ok(f"examples/{filename}: {'; '.join(made)}")
        try:
            wait_until(
                lambda: len(self.pods()) >= expected,
                timeout_s=COMPONENT_TIMEOUT_S,
                what=f"given their {expected} pods by the Job and Deployment controllers",
            )
        except TimeoutError as exc:
            self.console.failed("workload controllers", exc)
            return
        self.console.ok(f"kube-controller-manager made the workloads' pods ({expected} in all)")

    # 6 -------------------------------------------------------------------------------
    def pods(self, *, with_output: bool = False) -> list[PodView]:
        listing = self.control_plane.rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        items = sorted(listing.get("items") or [], key=lambda p: p["metadata"]["name"])
        return [pod_view(p, self._output(p) if with_output else "") for p in items]

    def _output(self, pod: Mapping[str, Any]) -> str:
        """What a quantum pod that ran on the real node printed ('' for any other pod)."""
        if (pod.get("spec") or {}).get("nodeName") != REAL_NODE or not backend_env(pod):
            return ""
        if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded", "Failed"):
            return ""
        try:
            return pod_logs(self.control_plane, NAMESPACE, pod["metadata"]["name"]).strip()
        except RuntimeError as exc:
            return f"(no output: {exc})"

    def wait_settled(self) -> list[PodView]:
        """Until every pod is bound or has a verdict and nothing changed for a moment (bounded)."""
        self.console.step(
            f"wait (at most {self.options.settle_timeout_s:.0f}s) for pods to be bound"
        )
        if self.scheduler is None:
            views = self.pods()
            self.console.ok("no fluence scheduler runs, so nothing binds these pods")
            return views
        deadline = time.monotonic() + self.options.settle_timeout_s
        last: list[PodView] = []
        quiet_since = time.monotonic()
        while True:
            views = self.pods()
            if views != last:
                last, quiet_since = views, time.monotonic()
            all_bound = bool(views) and all(v.bound and v.phase != "Pending" for v in views)
            if all_bound or (settled(views) and time.monotonic() - quiet_since >= SETTLE_QUIET_S):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        bound = sum(v.bound for v in last)
        self.console.ok(f"{bound} of {len(last)} pods bound")
        if self.real_node is not None:
            self._wait_real_node_output()
            last = self.pods(with_output=True)
        return last

    def _wait_real_node_output(self) -> None:
        """Quantum pods on the real node print, then exit; wait (bounded) until they have."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            views = self.pods(with_output=True)
            if all(
                v.phase in ("Succeeded", "Failed") or (v.phase == "Running" and v.output)
                for v in views
                if v.node == REAL_NODE and v.env
            ):
                return
            time.sleep(0.5)

    def report(self, views: Sequence[PodView]) -> None:
        self.console.step("report")
        self.console.line()
        self.console.line(render_pods(views))
        self.console.line()
        if self.extender_url:
            try:
                self.console.line("Node usage in the extender's graph (/state):")
                self.console.line(render_usage(self.extender_state(), self.nodes))
            except (httpx.HTTPError, ValueError) as exc:
                self.console.line(f"the extender's /state could not be read: {exc}")
        else:
            self.console.line("(no extender: node usage is not available)")
        self.console.line()


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# What a run leaves in a --workdir (kept for its logs); a new cluster must not reuse it.
RUN_ENTRIES = ("etcd", "pki", "logs", "schedulers", "nodes", "webhook-tls", "admin.kubeconfig")


def clear_previous_run(workdir: Path) -> list[str]:
    """Remove what an earlier run left in ``workdir`` (only the names a run creates)."""
    cleared = []
    for name in RUN_ENTRIES:
        path = workdir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        cleared.append(name)
    return cleared


# Running -----------------------------------------------------------------------------


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Interrupted` in the main thread (once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        # Further signals during shutdown are ignored: shutdown must finish.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(options: Options, out: TextIO = sys.stdout) -> int:
    """Run the demo; 0 when every step worked, 1 when one failed, 130 when interrupted."""
    started = time.monotonic()
    console = Console(out, total_steps=8)
    demo = Demo(options, console)
    code = 0
    with _signals_interrupt():
        try:
            try:
                demo.start_control_plane()
            except Exception as exc:
                console.failed("control plane", exc)
                raise
            demo.launch_components()
            for what, start in (
                ("device plugin", demo.start_device_plugin),
                ("webhook", demo.start_webhook),
                ("extender", demo.start_extender),
            ):
                try:
                    start()
                except Exception as exc:  # noqa: BLE001 - reported; the demo goes on
                    console.failed(what, exc)
            demo.apply_examples()
            views = demo.wait_settled()
            demo.report(views)
            if options.keep_running:
                cp = demo.control_plane
                console.line(f"Cluster is up. kubectl --kubeconfig {cp.kubeconfig} get pods -A")
                console.line(f"Logs: {cp.workdir / 'logs'}. Press Ctrl-C to stop.")
                threading.Event().wait()
            code = 1 if console.failures else 0
        except Interrupted as exc:
            console.line(f"\ninterrupted ({exc}); shutting down")
            code = 130
        except KeyboardInterrupt:
            console.line("\ninterrupted; shutting down")
            code = 130
        except Exception as exc:  # noqa: BLE001 - reported, then everything is stopped
            console.line(f"the demo stopped early: {exc}")
            code = 1
        finally:
            console.step_no = console.total - 1
            console.step("shut down (components in reverse order, control plane last)")
            t0 = time.monotonic()
            demo.close()
            console.ok(f"stopped in {time.monotonic() - t0:.1f}s")
    elapsed = time.monotonic() - started
    if code == 0:
        verdict = "ok"
    elif code == 130:
        verdict = "interrupted"
    else:
        verdict = f"failed: {', '.join(console.failures) or 'see above'}"
    console.line(f"demo finished in {elapsed:.1f}s ({verdict})")
    return code


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.demo",
        description="Run fluence end to end on a local control plane, print the placements, "
        "and stop everything again.",
    )
    parser.add_argument("--nodes", type=int, default=4, help="fake nodes to create (default 4)")
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="stay up after the report until Ctrl-C; prints the kubeconfig for kubectl",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory for PKI, etcd data, kubeconfig and logs (kept afterwards); "
        "default: a temporary directory, removed at the end",
    )
    parser.add_argument(
        "--no-real-node",
        action="store_true",
        help="do not run this machine as a real node (containerd + kubelet) even where it can",
    )
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=SETTLE_TIMEOUT_S,
        help=f"seconds to wait for pods to be bound (default {SETTLE_TIMEOUT_S:.0f})",
    )
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    return Options(
        nodes=args.nodes,
        keep_running=args.keep_running,
        workdir=args.workdir,
        settle_timeout_s=args.settle_timeout,
        real_node=not args.no_real_node,
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["Options", "PodView", "main", "render_pods", "render_usage", "run", "table"]
