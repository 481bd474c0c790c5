"""A real local control plane on loopback: etcd, kube-apiserver, kube-controller-manager
(+ kube-schedulers).

Tests, benchmarks and the demo need a genuine apiserver (admission webhooks,
PodGroup API, RBAC, watches), the genuine workload controllers (Jobs,
Deployments, garbage collection) and a genuine kube-scheduler, but no
containers. :class:`ControlPlane` starts the binaries built by :mod:`binaries`
on free ports inside a work directory, and tears everything down again.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fluence import pki
from testbed import nodes as fake_nodes
from testbed.binaries import Binaries, ensure_release
from testbed.kwok import Kwok
from testbed.network import host_ip
from testbed.processes import (
    DEFAULT_GRACE_S,
    ManagedProcess,
    ProcessStartError,
    StartStop,
    free_port,
    wait_until,
)
from testbed.rest import KubeApiError, KubeRest, client_ssl_context
from webhook.certs import admission_configuration, admission_kubeconfig

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Release:
    """What a Kubernetes minor release needs switched on to serve gangs (PodGroups)."""

    minor: str
    feature_gates: str
    runtime_config: str
    podgroup_version: str
    topology_gate: str = "TopologyAwareWorkloadScheduling=true"
    """kube-scheduler's placement of a PodGroup in one domain of a node label (alpha): the
    API server keeps ``schedulingConstraints.topology`` only with it on."""

    composite_gate: str = ""
    """CompositePodGroup (1.37 alpha): PodGroups of PodGroups, served as ``composite_api``."""
    composite_api: str = ""

    def with_topology(self) -> str:
        """These feature gates and the topology-aware placement's."""
        return f"{self.feature_gates},{self.topology_gate}"

    def with_alpha(self) -> tuple[str, list[str]]:
        """Feature gates and API server flags with the workload alpha features on too.

        Topology-aware placement, and CompositePodGroup where the release has it.
        """
        gates = self.with_topology()
        if not self.composite_gate:
            return gates, []
        return f"{gates},{self.composite_gate}", [f"--runtime-config={self.composite_api}=true"]


RELEASES = {
    # 1.37: PodGroup is scheduling.k8s.io/v1beta1 (off by default, as new beta APIs are),
    # GangScheduling merged into GenericWorkload.
    "1.37": Release(
        "1.37",
        "GenericWorkload=true",
        "scheduling.k8s.io/v1beta1=true",
        "v1beta1",
        composite_gate="CompositePodGroup=true",
        composite_api="scheduling.k8s.io/v1alpha3",
    ),
    "1.36": Release(
        "1.36",
        "GenericWorkload=true,GangScheduling=true",
        "scheduling.k8s.io/v1alpha2=true",
        "v1alpha2",
    ),
}
DEFAULT_RELEASE = "1.37"
KUBERNETES_ENV = "FLUENCE_KUBERNETES"
"""Which release the control plane runs ("1.37", the default, or "1.36")."""


def selected_release(minor: str | None = None) -> Release:
    """``minor``, else ``$FLUENCE_KUBERNETES``, else the default release."""
    chosen = minor or os.environ.get(KUBERNETES_ENV) or DEFAULT_RELEASE
    if chosen not in RELEASES:
        raise ValueError(
            f"{KUBERNETES_ENV}={chosen!r} is not a supported release; choose one of "
            f"{sorted(RELEASES)}"
        )
    return RELEASES[chosen]


SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
"""The ``kubernetes`` Service's ClusterIP: the first address of the range."""
KUBERNETES_SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTROLLERS = (
    "*",
    # Nodes here are API objects without a kubelet heartbeat of their own; the
    # node lifecycle controller would taint them unreachable and evict their pods.
    "-node-lifecycle-controller",
    "-taint-eviction-controller",
    # No IPAM, and of the volume controllers only those that work by the API alone: the
    # binder (claims to volumes) and the ephemeral volume controller (a pod's claims from
    # its volume templates); the others attach and expand real disks.
    "-node-ipam-controller",
    "-persistentvolume-attach-detach-controller",
    "-persistentvolume-expander-controller",
    "-persistentvolume-protection-controller",
    "-persistentvolumeclaim-protection-controller",
)
"""What kube-controller-manager runs (its --controllers list)."""
START_TIMEOUT_S = 90.0
SCHEDULER_START_TIMEOUT_S = 60.0
# Namespaces the apiserver's bootstrap controller creates; ready means they exist.
SYSTEM_NAMESPACES = ("default", "kube-system")


@dataclass
class SchedulerHandle:
    """A running kube-scheduler started by :meth:`ControlPlane.start_scheduler`."""

    name: str
    process: ManagedProcess
    port: int
    config_path: Path
    directory: Path
    extra_args: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def running(self) -> bool:
        return self.process.running()


@dataclass
class Timings:
    """Seconds spent in the phases of the last start/stop."""

    binaries_s: float = 0.0
    etcd_ready_s: float = 0.0
    apiserver_ready_s: float = 0.0
    controller_manager_ready_s: float = 0.0
    start_s: float = 0.0
    stop_s: float = 0.0


class ControlPlane(StartStop):
    """etcd, kube-apiserver, kube-controller-manager on free loopback ports; schedulers,
    simulated nodes and KWOK on demand.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. The work
    directory (a fresh temporary one unless ``workdir`` is given) holds the
    PKI, etcd data, kubeconfig and one log per process; it is removed on stop
    unless ``keep`` is true.

    Start it from a long-lived thread (normally the main thread): the kernel
    kills the components when the thread that started them exits.
    """

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        keep: bool = False,
        binaries: Binaries | None = None,
        apiserver_args: Sequence[str] = (),
        etcd_args: Sequence[str] = (),
        feature_gates: str | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        grace_s: float = DEFAULT_GRACE_S,
        controller_manager: bool = True,
        kubernetes: str | None = None,
        pod_network: bool = False,
    ) -> None:
        self.release = selected_release(kubernetes)
        self._requested_workdir = Path(workdir) if workdir is not None else None
        self.keep = keep
        self._binaries = binaries
        self.apiserver_args = list(apiserver_args)
        self.etcd_args = list(etcd_args)
        self.feature_gates = feature_gates or self.release.feature_gates
        self.start_timeout_s = start_timeout_s
        self.grace_s = grace_s
        self.timings = Timings()
        self._workdir: Path | None = None
        self._created_workdir = False
        self._etcd: ManagedProcess | None = None
        self._apiserver: ManagedProcess | None = None
        self._controller_manager: ManagedProcess | None = None
        self.controller_manager = controller_manager
        self.pod_network = pod_network
        """Serve pods as a cluster does: the apiserver on this machine's address behind the
        ``kubernetes`` Service, ServiceAccount tokens in pods, webhooks reached at their
        endpoints. Needs a real node with kube-proxy to be of use."""
        self.address = "127.0.0.1"
        self._schedulers: list[SchedulerHandle] = []
        self._scheduler_seq = 0
        self._kwok: Kwok | None = None
        self._fake_nodes: set[str] = set()
        self._rest: KubeRest | None = None
        self.ca: pki.CertificateAuthority | None = None
        self.server = ""
        self.etcd_url = ""

    # Paths -----------------------------------------------------------------------

    @property
    def binaries(self) -> Binaries:
        """The executables this control plane runs (kubectl among them)."""
        if self._binaries is None:
            raise RuntimeError("the control plane is not started; call start() first")
        return self._binaries

    def kubectl(self, *args: str, timeout_s: float = 300.0) -> str:
        """Run the real kubectl as this cluster's admin, as a user would; its output, or
        a RuntimeError carrying what it printed."""
        done = subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stdout}{done.stderr}".strip())
        return done.stdout

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the control plane is not started; call start() first")
        return self._workdir

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ca_pem(self) -> bytes:
        return self.ca_file.read_bytes()

    @property
    def admin_cert_file(self) -> Path:
        return self.pki_dir / "admin.crt"

    @property
    def admin_key_file(self) -> Path:
        return self.pki_dir / "admin.key"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def webhook_client(self) -> pki.ClientFiles:
        """The client certificate this apiserver presents to admission webhooks, its key, and
        the CA that signed it (a CA for that alone): a webhook's ``FLUENCE_CLIENT_CA``."""
        d = self.pki_dir
        return pki.ClientFiles(
            d / "webhook-client-ca.crt", d / "webhook-client.crt", d / "webhook-client.key"
        )

    @property
    def admission_config_file(self) -> Path:
        """The apiserver's --admission-control-config-file."""
        return self.pki_dir / "admission-config.yaml"

    def log_path(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every process this control plane currently owns (for leak checks)."""
        procs = [s.process for s in self._schedulers]
        if self._kwok is not None:
            procs.append(self._kwok.process)
        procs.extend(
            p for p in (self._controller_manager, self._apiserver, self._etcd) if p is not None
        )
        return procs

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    # Lifecycle ---------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver and wait until the API is usable."""
        if self._apiserver is not None:
            return self
        started = time.monotonic()
        try:
            if self._binaries is None:
                self._binaries = ensure_release(self.release.minor)
            self.timings.binaries_s = time.monotonic() - started
            self._prepare_workdir()
            self._write_pki()
            t0 = time.monotonic()
            self._start_etcd()
            self.timings.etcd_ready_s = time.monotonic() - t0
            t0 = time.monotonic()
            self._start_apiserver()
            self.timings.apiserver_ready_s = time.monotonic() - t0
            self._write_kubeconfig()
            if self.controller_manager:
                t0 = time.monotonic()
                self._start_controller_manager()
                self.timings.controller_manager_ready_s = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        self.timings.start_s = time.monotonic() - started
        log.info(
            "control plane ready",
            extra={
                "server": self.server,
                "workdir": str(self.workdir),
                "start_s": round(self.timings.start_s, 2),
            },
        )
        return self

    def stop(self) -> None:
        """Stop KWOK, schedulers, controller manager, apiserver, etcd; remove the work dir."""
        started = time.monotonic()
        if self._kwok is not None:
            self._kwok.stop(self.grace_s)
            self._kwok = None
        for handle in list(self._schedulers):
            self.stop_scheduler(handle)
        for proc in (self._controller_manager, self._apiserver, self._etcd):
            if proc is not None:
                proc.stop(self.grace_s)
        self._controller_manager = None
        self._apiserver = None
        self._etcd = None
        self._rest = None
        self._fake_nodes.clear()
        if self._workdir is not None and not self.keep:
            if self._created_workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
            else:
                for child in (
                    "pki",
                    "etcd",
                    "logs",
                    "schedulers",
                    "nodes",
                    "kube-controller-manager",
                    "admin.kubeconfig",
                ):
                    path = self._workdir / child
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
        self.timings.stop_s = time.monotonic() - started

    def _prepare_workdir(self) -> None:
        if self._requested_workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="fluence-cp-"))
            self._created_workdir = True
        else:
            self._created_workdir = not self._requested_workdir.exists()
            self._requested_workdir.mkdir(parents=True, exist_ok=True)
            self._workdir = self._requested_workdir.resolve()

    def _write_pki(self) -> None:
        ca = pki.CertificateAuthority("fluence-controlplane-ca")
        ca.write(self.pki_dir, "ca")
        hosts = list(pki.DEFAULT_HOSTS)
        if self.pod_network:
            self.address = host_ip()
            hosts += [self.address, KUBERNETES_SERVICE_IP, *KUBERNETES_SERVICE_NAMES]
        ca.issue_serving(hosts, "kube-apiserver").write(self.pki_dir, "apiserver")
        ca.issue_client("admin", ("system:masters",)).write(self.pki_dir, "admin")
        pki.write_service_account_keys(self.pki_dir)
        self.ca = ca
        self._write_admission_config()

    def _write_admission_config(self) -> None:
        """The apiserver presents a client certificate to every admission webhook.

        As a cluster admin configures it for fluence (webhook/README.md): a CA made for
        that alone signs it, and the webhooks the tests start trust only that CA. The
        kubeconfig's user is ``*`` because tests register webhooks by URL on changing
        ports; a cluster names the webhook's Service instead.
        """
        files = pki.issue_client_cert(
            self.pki_dir,
            "kube-apiserver-webhook-client",
            ca=pki.CertificateAuthority("fluence-webhook-client-ca"),
            stem="webhook-client",
        )
        kubeconfig = self.pki_dir / "admission.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                admission_kubeconfig("*", cert_file=files.cert_file, key_file=files.key_file),
                sort_keys=False,
            )
        )
        kubeconfig.chmod(0o600)
        self.admission_config_file.write_text(
            yaml.safe_dump(admission_configuration(kubeconfig), sort_keys=False)
        )

    # etcd -------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        assert self._binaries is not None
        client_port, peer_port = free_port(), free_port()
        client = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        argv = [
            str(self._binaries.etcd),
            "--name=fluence",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=fluence={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
            *self.etcd_args,
        ]
        self._etcd = ManagedProcess("etcd", argv, self.log_path("etcd"), cwd=self.workdir)
        self.etcd_url = client

        def healthy() -> bool:
            conn = http.client.HTTPConnection("127.0.0.1", client_port, timeout=2)
            try:
                conn.request("GET", "/health")
                response = conn.getresponse()
                body = json.loads(response.read() or b"{}")
                return response.status == 200 and body.get("health") == "true"
            finally:
                conn.close()

        wait_until(healthy, timeout_s=self.start_timeout_s, what="healthy", process=self._etcd)

    # kube-apiserver ------------------------------------------------------------

    def _start_apiserver(self) -> None:
        assert self._binaries is not None
        port = free_port()
        d = self.pki_dir
        argv = [
            str(self._binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={'0.0.0.0' if self.pod_network else '127.0.0.1'}",
            f"--advertise-address={self.address}",
            f"--secure-port={port}",
            f"--cert-dir={d}",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            # logs and exec reach a real node's kubelet with the admin certificate.
            f"--kubelet-client-certificate={d / 'admin.crt'}",
            f"--kubelet-client-key={d / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            *(self._pod_network_args() if self.pod_network else self._loopback_args()),
            f"--feature-gates={self.feature_gates}",
            f"--runtime-config={self.release.runtime_config}",
            f"--admission-control-config-file={self.admission_config_file}",
            *self.apiserver_args,
        ]
        self._apiserver = ManagedProcess(
            "kube-apiserver", argv, self.log_path("kube-apiserver"), cwd=self.workdir
        )
        self.server = f"https://127.0.0.1:{port}"
        rest = self.rest

        def ready() -> bool:
            status, _ = self._probe("/readyz")
            if status != 200:
                return False
            for namespace in SYSTEM_NAMESPACES:
                rest.get(f"/api/v1/namespaces/{namespace}")
            return True

        wait_until(ready, timeout_s=self.start_timeout_s, what="ready", process=self._apiserver)

    @staticmethod
    def _loopback_args() -> list[str]:
        """Pods that never run: no endpoints for the apiserver, no tokens, no taints."""
        return [
            "--endpoint-reconciler-type=none",
            "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        ]

    @staticmethod
    def _pod_network_args() -> list[str]:
        """Pods that run and call the API: the ``kubernetes`` Service gets this apiserver as
        its endpoint, pods get ServiceAccount tokens, and webhook Services are called at
        their pods' addresses (there is no cluster DNS)."""
        return [
            "--enable-admission-plugins="
            "ServiceAccount,MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            "--disable-admission-plugins=TaintNodesByCondition",
            "--enable-aggregator-routing=true",
        ]

    # kube-controller-manager ------------------------------------------------------

    def _start_controller_manager(self) -> None:
        """The real workload controllers, each under its own ServiceAccount as in a cluster.

        Ready once the ServiceAccount controller has made ``default/default``:
        from then on Jobs get pods and owners' dependents are collected.
        """
        assert self._binaries is not None
        port = free_port()
        d = self.pki_dir
        directory = self.workdir / "kube-controller-manager"
        directory.mkdir(parents=True, exist_ok=True)
        argv = [
            str(self._binaries.kube_controller_manager),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={directory / 'certs'}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={d / 'sa.key'}",
            f"--root-ca-file={d / 'ca.crt'}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--feature-gates={self.feature_gates}",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
        ]
        self._controller_manager = ManagedProcess(
            "kube-controller-manager",
            argv,
            self.log_path("kube-controller-manager"),
            cwd=directory,
        )
        rest = self.rest

        def ready() -> bool:
            try:
                rest.get("/api/v1/namespaces/default/serviceaccounts/default")
            except KubeApiError:
                return False
            return True

        wait_until(
            ready, timeout_s=self.start_timeout_s, what="ready", process=self._controller_manager
        )

    def _admin_context(self) -> ssl.SSLContext:
        return client_ssl_context(
            str(self.ca_file), str(self.admin_cert_file), str(self.admin_key_file)
        )

    def _probe(self, path: str) -> tuple[int, str]:
        host, port = self.server.removeprefix("https://").rsplit(":", 1)
        conn = http.client.HTTPSConnection(
            host, int(port), context=self._admin_context(), timeout=5
        )
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(yaml.safe_dump(self.kubeconfig_dict(), sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def kubeconfig_dict(self) -> dict[str, Any]:
        """Admin kubeconfig (client certificate in group system:masters), files by path."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "fluence",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.admin_cert_file),
                        "client-key": str(self.admin_key_file),
                    },
                }
            ],
            "contexts": [{"name": "fluence", "context": {"cluster": "fluence", "user": "admin"}}],
            "current-context": "fluence",
        }

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path, *, seconds: int = 3600
    ) -> Path:
        """A kubeconfig at ``path`` with a bound token of ServiceAccount ``namespace/name``.

        A binary run with it has exactly the rights its RBAC gives that account, as
        it would in a pod, so tests show the shipped roles are enough.
        """
        answer = self.rest.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        config = self.kubeconfig_dict()
        config["users"] = [{"name": "admin", "user": {"token": answer["status"]["token"]}}]
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    # Clients ------------------------------------------------------------------------

    @property
    def rest(self) -> KubeRest:
        """Plain JSON client with admin rights (what the harness itself uses)."""
        if self._rest is None:
            if not self.server:
                raise RuntimeError("the control plane is not started; call start() first")
            self._rest = KubeRest(self.server, self._admin_context())
        return self._rest

    def api_client(self) -> ApiClient:
        """A `kubernetes` client ApiClient with admin rights against this apiserver."""
        from kubernetes import client

        config = client.Configuration(
            host=self.server,
            ssl_ca_cert=str(self.ca_file),
            cert_file=str(self.admin_cert_file),
            key_file=str(self.admin_key_file),
        )
        return client.ApiClient(config)

    # Schedulers ----------------------------------------------------------------------

    def start_scheduler(
        self,
        config: Mapping[str, Any] | str,
        *,
        extra_args: Sequence[str] = (),
        name: str | None = None,
        timeout_s: float = SCHEDULER_START_TIMEOUT_S,
    ) -> SchedulerHandle:
        """Run a kube-scheduler with a KubeSchedulerConfiguration (dict or YAML text).

        ``clientConnection.kubeconfig`` is set to the admin kubeconfig and leader
        election is off unless the config sets ``leaderElection.leaderElect``.
        Returns once its /healthz answers.
        """
        if self._binaries is None or self._apiserver is None:
            raise RuntimeError("start the control plane before starting a scheduler")
        document = yaml.safe_load(config) if isinstance(config, str) else dict(config)
        if not isinstance(document, dict):
            raise ValueError("scheduler config must be a mapping (KubeSchedulerConfiguration)")
        document.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        document.setdefault("kind", "KubeSchedulerConfiguration")
        document["clientConnection"] = {
            **(document.get("clientConnection") or {}),
            "kubeconfig": str(self.kubeconfig),
        }
        election = dict(document.get("leaderElection") or {})
        election.setdefault("leaderElect", False)
        document["leaderElection"] = election
        self._scheduler_seq += 1
        sched_name = name or f"kube-scheduler-{self._scheduler_seq}"
        directory = self.workdir / "schedulers" / sched_name
        directory.mkdir(parents=True, exist_ok=True)
        config_path = directory / "config.yaml"
        config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        return self._launch_scheduler(
            sched_name, config_path, directory, list(extra_args), timeout_s
        )

    def _launch_scheduler(
        self,
        name: str,
        config_path: Path,
        directory: Path,
        extra_args: list[str],
        timeout_s: float,
        port: int | None = None,
    ) -> SchedulerHandle:
        assert self._binaries is not None
        port = port or free_port()
        argv = [
            str(self._binaries.kube_scheduler),
            f"--config={config_path}",
            f"--feature-gates={self.feature_gates}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={directory / 'certs'}",
            *extra_args,
        ]
        process = ManagedProcess(name, argv, self.log_path(name), cwd=directory)
        handle = SchedulerHandle(name, process, port, config_path, directory, extra_args)
        self._schedulers.append(handle)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=insecure, timeout=2)
            try:
                conn.request("GET", "/healthz")
                return conn.getresponse().status == 200
            finally:
                conn.close()

        try:
            wait_until(healthy, timeout_s=timeout_s, what="healthy", process=process)
        except BaseException:
            self.stop_scheduler(handle)
            raise
        return handle

    def stop_scheduler(self, handle: SchedulerHandle) -> None:
        handle.process.stop(self.grace_s)
        if handle in self._schedulers:
            self._schedulers.remove(handle)

    def restart_scheduler(
        self, handle: SchedulerHandle, *, timeout_s: float = SCHEDULER_START_TIMEOUT_S
    ) -> SchedulerHandle:
        """Stop a scheduler and start it again with the same config and arguments."""
        self.stop_scheduler(handle)
        return self._launch_scheduler(
            handle.name, handle.config_path, handle.directory, handle.extra_args, timeout_s
        )

    @property
    def schedulers(self) -> list[SchedulerHandle]:
        return list(self._schedulers)

    # Simulated nodes and KWOK -----------------------------------------------------------

    def add_nodes(
        self,
        count: int,
        prefix: str = "node-",
        capacity: Mapping[str, str] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
    ) -> list[str]:
        """Create ``count`` Ready fake nodes named ``<prefix><i>``, continuing after existing ones.

        ``capacity`` extends the default cpu/memory/pods; allocatable equals capacity.
        """
        names: list[str] = []
        index = 0
        while len(names) < count:
            candidate = f"{prefix}{index}"
            index += 1
            if candidate in self._fake_nodes:
                continue
            fake_nodes.create_node(self.rest, candidate, capacity, labels=labels, taints=taints)
            self._fake_nodes.add(candidate)
            names.append(candidate)
        return names

    def patch_node_status(
        self,
        name: str,
        *,
        capacity: Mapping[str, str | None] | None = None,
        allocatable: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Merge (extended) resources into a node's status; other resources are kept."""
        return fake_nodes.merge_node_status(
            self.rest, name, capacity=capacity, allocatable=allocatable
        )

    def delete_node(self, name: str) -> None:
        fake_nodes.delete_node(self.rest, name)
        self._fake_nodes.discard(name)

    @property
    def fake_nodes(self) -> list[str]:
        return sorted(self._fake_nodes)

    def is_fake_node(self, name: str) -> bool:
        """Nodes made by :meth:`add_nodes`, or by anyone else with the fake-node label."""
        if name in self._fake_nodes:
            return True
        try:
            node = self.rest.get(f"/api/v1/nodes/{name}")
        except KubeApiError:
            return False
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(fake_nodes.FAKE_NODE_LABEL) == "true":
            self._fake_nodes.add(name)
            return True
        return False

    def start_kwok(self) -> Kwok:
        """Start (once) KWOK, the kubelet of this control plane's simulated nodes."""
        if self._kwok is None:
            assert self._binaries is not None
            self._kwok = Kwok(
                self._binaries.kwok, self.kubeconfig, self.rest, self.workdir, self.log_path("kwok")
            )
            self._kwok.wait_started()
        return self._kwok

    @property
    def kwok(self) -> Kwok:
        return self.start_kwok()

    # Namespaces -------------------------------------------------------------------------

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"] = {"name": name, "labels": dict(labels)}
        self.rest.create("/api/v1/namespaces", body)

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace at once; there is no namespace controller to finish it.

        Pods are force-deleted, then the namespace's finalizer is cleared. Other
        objects inside stay in etcd, harmless for a throwaway cluster.
        """
        with contextlib.suppress(KubeApiError):
            self.rest.delete(f"/api/v1/namespaces/{name}/pods", gracePeriodSeconds=0)
        try:
            self.rest.delete(f"/api/v1/namespaces/{name}")
            namespace = self.rest.get(f"/api/v1/namespaces/{name}")
        except KubeApiError as exc:
            if exc.status == 404:
                return
            raise
        namespace["spec"]["finalizers"] = []
        with contextlib.suppress(KubeApiError):
            self.rest.replace(f"/api/v1/namespaces/{name}/finalize", namespace)


__all__ = ["ControlPlane", "ProcessStartError", "SchedulerHandle", "Timings"]
