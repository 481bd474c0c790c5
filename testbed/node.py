"""This machine as a real Kubernetes node: containerd, runc, CNI and the kubelet.

Simulated nodes (KWOK) cover scale; this node covers what only a real kubelet
does: it runs containers from images (built here, see :mod:`testbed.images`),
resolves the downward API, talks to device plugins through its device manager
and reports their devices in the node's status. containerd and runc come from
Debian's packages, the CNI bridge from ``containernetworking-plugins``, and the
kubelet is built from the pinned Kubernetes module with the other binaries.

The kubelet's device-plugin directory is fixed at ``/var/lib/kubelet/device-plugins``,
so one real node at a time runs on a machine (a file lock makes a second wait).
Everything else (containerd's root, the kubelet's root, CNI state) lives in the
node's work directory and goes with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from testbed import images
from testbed.network import host_ip
from testbed.processes import ManagedProcess, free_port, wait_until
from testbed.rest import KubeApiError

if TYPE_CHECKING:
    from testbed.cluster import ControlPlane

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
"""Where the kubelet's device manager listens (fixed in the kubelet, whatever its root)."""
LOCK_FILE = Path("/run/fluence-real-node.lock")
BRIDGE = "fluence0"
POD_SUBNET = "10.88.0.0/24"
CNI_BIN_DIR = Path("/usr/lib/cni")
NAMESPACE = "k8s.io"
"""containerd namespace of the CRI plugin: the images pods use live here."""
REQUIRED_COMMANDS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc"}
READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 60.0
SOCKET_PATH_MAX = 100
IMPORT_TIMEOUT_S = 600.0


def missing_requirements() -> str | None:
    """Why this machine cannot run a real node (one line), or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (containers, cgroups, network namespaces)"
    for command, package in REQUIRED_COMMANDS.items():
        if shutil.which(command) is None:
            return f"`{command}` is not installed (Debian package `{package}`)"
    if not (CNI_BIN_DIR / "bridge").is_file():
        return (
            f"no CNI bridge plugin in {CNI_BIN_DIR} (Debian package `containernetworking-plugins`)"
        )
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").is_file()
    ):
        return "no memory cgroup is mounted: the kubelet cannot run pods here"
    return images.missing_tools()


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RealNode:
    """containerd + kubelet registering this machine as node ``name`` of ``control_plane``.

    ``start()`` returns once the node is Ready; ``stop()`` deletes the node's pods
    through the kubelet (so sandboxes and their network go properly), then stops
    the kubelet and containerd and removes what they left.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        name: str = "real-node",
        *,
        labels: Mapping[str, str] | None = None,
        reserved: Mapping[str, str] | None = None,
        grace_s: float = 10.0,
    ) -> None:
        self.control_plane = control_plane
        self.name = name
        self.labels = dict(labels or {})
        self.reserved = dict(reserved or {})
        """The kubelet's kubeReserved: kept out of the node's allocatable."""
        self.grace_s = grace_s
        self.directory = control_plane.workdir / "nodes" / name
        self.address = ""
        self.containerd: ManagedProcess | None = None
        self.kubelet: ManagedProcess | None = None
        self.kube_proxy: ManagedProcess | None = None
        self._lock: contextlib.ExitStack | None = None

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Paths -------------------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        return self.directory / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.directory / "kubelet"

    def log_path(self, component: str) -> Path:
        return self.control_plane.log_path(f"{self.name}-{component}")

    # Lifecycle ---------------------------------------------------------------------

    def start(self, *, timeout_s: float = READY_TIMEOUT_S) -> RealNode:
        reason = missing_requirements()
        if reason is not None:
            raise RuntimeError(f"cannot run a real node here: {reason}")
        if len(str(self.containerd_socket)) > SOCKET_PATH_MAX:
            raise RuntimeError(
                f"{self.containerd_socket} is too long for a unix socket; use a shorter workdir"
            )
        lock = contextlib.ExitStack()
        lock.enter_context(_machine_lock())
        self._lock = lock
        try:
            archives = [images.ensure_image(image) for image in images.NODE_IMAGES]
            self.address = host_ip()
            self.directory.mkdir(parents=True, exist_ok=True)
            self._clear_device_plugin_dir()
            self._start_containerd()
            for archive in archives:
                self.load_image(archive)
            self._start_kubelet()
            if self.control_plane.pod_network:
                self._start_kube_proxy()
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.kubelet is not None and self.kubelet.running():
            self._drain()
        if self.kubelet is not None:
            self.kubelet.stop(self.grace_s)
            self.kubelet = None
        if self.kube_proxy is not None:
            self.kube_proxy.stop(self.grace_s)
            self.kube_proxy = None
            # Its rules would route Service addresses to pods that no longer exist.
            subprocess.run(
                [str(self.control_plane.binaries.kube_proxy), "--cleanup"],
                capture_output=True,
                check=False,
            )
        if self.containerd is not None:
            self._remove_containers()
            self.containerd.stop(self.grace_s)
            self.containerd = None
            self._kill_shims()
        self._unmount_below(self.directory)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        # The control plane may be gone already (or going): then so is the Node object.
        with contextlib.suppress(KubeApiError, OSError):
            self.control_plane.rest.delete(f"/api/v1/nodes/{self.name}")
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def restart_kubelet(self) -> None:
        """Stop the kubelet and start it again at once; containers keep running meanwhile.

        Returns as soon as the new kubelet process runs: callers time what follows.
        """
        if self.kubelet is not None:
            self.kubelet.stop(self.grace_s)
        self._start_kubelet()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Until the node reports Ready (containerd's network ready, the kubelet synced)."""
        found: dict[str, Any] = {}

        def ready() -> bool:
            node = self.control_plane.rest.get(f"/api/v1/nodes/{self.name}")
            found.update(node)
            return any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions", [])
            )

        wait_until(ready, timeout_s=timeout_s, what="Ready", process=self.kubelet, interval_s=0.5)
        return found

    # containerd ------------------------------------------------------------------------

    def _start_containerd(self) -> None:
        base = self.directory / "containerd"
        cni_conf = base / "cni"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-fluence.conflist").write_text(json.dumps(self._cni_config(base), indent=2))
        config = base / "config.toml"
        config.write_text(self._containerd_config(base, cni_conf))
        self.containerd = ManagedProcess(
            "containerd",
            ["containerd", f"--config={config}"],
            self.log_path("containerd"),
            cwd=base,
        )

        def serving() -> bool:
            return self._ctr("version").returncode == 0

        wait_until(serving, timeout_s=30.0, what="serving", process=self.containerd, interval_s=0.2)

    def _containerd_config(self, base: Path, cni_conf: Path) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return "\n".join(
            [
                "version = 2",
                f'root = "{base / "root"}"',
                f'state = "{base / "state"}"',
                "[grpc]",
                f'  address = "{self.containerd_socket}"',
                "[ttrpc]",
                f'  address = "{self.containerd_socket}.ttrpc"',
                '[plugins."io.containerd.internal.v1.opt"]',
                f'  path = "{base / "opt"}"',
                f"[{cri}]",
                f'  sandbox_image = "{images.PAUSE.names[0]}"',
                '  stream_server_address = "127.0.0.1"',
                '  stream_server_port = "0"',
                # Sandboxed machines deny lowering oom_score_adj; keep the requested
                # scores at or above containerd's own instead of failing every pod.
                "  restrict_oom_score_adj = true",
                f"[{cri}.containerd]",
                '  snapshotter = "overlayfs"',
                '  default_runtime_name = "runc"',
                f"[{cri}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"[{cri}.containerd.runtimes.runc.options]",
                "  SystemdCgroup = false",
                f"[{cri}.cni]",
                f'  bin_dir = "{CNI_BIN_DIR}"',
                f'  conf_dir = "{cni_conf}"',
                "",
            ]
        )

    def _cni_config(self, base: Path) -> dict[str, Any]:
        """A bridge with the host as gateway: pods reach the host, the host reaches pods."""
        return {
            "cniVersion": "0.4.0",
            "name": "fluence",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(base / "ipam"),
                        "ranges": [[{"subnet": POD_SUBNET}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def _ctr(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", f"--address={self.containerd_socket}", f"--namespace={NAMESPACE}", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
        )

    def load_image(self, archive: Path) -> None:
        """Import an OCI archive (see :mod:`testbed.images`) into the node's image store."""
        # Unpacking the fluence image takes tens of seconds, minutes on a busy machine.
        done = self._ctr(
            "images", "import", "--snapshotter=overlayfs", str(archive), timeout_s=IMPORT_TIMEOUT_S
        )
        if done.returncode != 0:
            raise RuntimeError(f"ctr could not import {archive}: {done.stderr.strip()}")

    def has_image(self, name: str) -> bool:
        return name in self._ctr("images", "list", "--quiet").stdout.split()

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's process, as a crash or the OOM killer would; what follows
        (a restart, a failed pod) is the kubelet's call. ``container_id`` as a pod's
        status gives it (``containerd://<id>``) or bare."""
        bare = container_id.removeprefix("containerd://")
        done = self._ctr("tasks", "kill", "--signal=SIGKILL", bare)
        if done.returncode != 0:
            raise RuntimeError(f"ctr could not kill {bare}: {done.stderr.strip()}")

    def _remove_containers(self) -> None:
        """What the drain left: kill and delete every task and container."""
        listed = self._ctr("containers", "list", "--quiet")
        for container in listed.stdout.split():
            self._ctr("tasks", "kill", "--signal=SIGKILL", container)
            self._ctr("tasks", "delete", "--force", container)
            self._ctr("containers", "delete", container)

    def _kill_shims(self) -> None:
        """runc shims outlive containerd by design; ours go with the node."""
        marker = str(self.containerd_socket)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(marker.encode() in arg for arg in argv) and b"containerd-shim" in argv[0]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), 9)

    # kubelet ---------------------------------------------------------------------------

    def _start_kubelet(self) -> None:
        cp = self.control_plane
        assert cp.ca is not None
        root = self.kubelet_root
        root.mkdir(parents=True, exist_ok=True)
        pki = self.directory / "pki"
        kubeconfig_path = self._client_kubeconfig(
            f"system:node:{self.name}", ("system:nodes",), "kubelet"
        )
        config_path = self.directory / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(self._kubelet_config(), sort_keys=False))
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        argv = [
            str(cp.binaries.kubelet),
            f"--config={config_path}",
            f"--kubeconfig={kubeconfig_path}",
            f"--root-dir={root}",
            f"--cert-dir={pki}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.address}",
            "--v=2",
        ]
        if labels:
            argv.append(f"--node-labels={labels}")
        self.kubelet = ManagedProcess("kubelet", argv, self.log_path("kubelet"), cwd=root)

    def _client_kubeconfig(self, user: str, groups: tuple[str, ...], stem: str) -> Path:
        """A kubeconfig with a client certificate for ``user`` in ``groups``."""
        cp = self.control_plane
        assert cp.ca is not None
        pki = self.directory / "pki"
        cp.ca.issue_client(user, groups).write(pki, stem)
        kubeconfig = cp.kubeconfig_dict()
        kubeconfig["users"] = [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki / f"{stem}.crt"),
                    "client-key": str(pki / f"{stem}.key"),
                },
            }
        ]
        path = self.directory / f"{stem}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        path.chmod(0o600)
        return path

    def _start_kube_proxy(self) -> None:
        """Service addresses (the ``kubernetes`` Service first) routed by iptables rules."""
        # system:kube-proxy is bound to system:node-proxier by the default RBAC policy.
        kubeconfig = self._client_kubeconfig("system:kube-proxy", (), "kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name,
            "mode": "iptables",
            "clusterCIDR": POD_SUBNET,
            "bindAddress": self.address,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # The machine's conntrack and localhost sysctls are not the node's to change.
            "conntrack": {"maxPerCore": 0},
            "iptables": {"localhostNodePorts": False},
        }
        path = self.directory / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kube_proxy = ManagedProcess(
            "kube-proxy",
            [str(self.control_plane.binaries.kube_proxy), f"--config={path}", "--v=2"],
            self.log_path("kube-proxy"),
            cwd=self.directory,
        )

    def _kubelet_config(self) -> dict[str, Any]:
        cp = self.control_plane
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.address,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(cp.ca_file)},
            },
            # Only the apiserver (admin client certificate) talks to this kubelet.
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            # The machines this runs on mount cgroup v1 and have no systemd.
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "resolvConf": "",
            "clusterDomain": "cluster.local",
            "serializeImagePulls": False,
            # A shared test machine's disk is not the node's to guard: evict only when full.
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
            "shutdownGracePeriod": "0s",
            **({"kubeReserved": self.reserved} if self.reserved else {}),
        }

    # Cleanup -------------------------------------------------------------------------

    def _drain(self) -> None:
        """Delete the node's pods and wait until the kubelet has torn their sandboxes down."""
        rest = self.control_plane.rest
        with contextlib.suppress(KubeApiError, OSError):
            pods = rest.get("/api/v1/pods", fieldSelector=f"spec.nodeName={self.name}")
            for pod in pods.get("items", []):
                meta = pod["metadata"]
                with contextlib.suppress(KubeApiError):
                    rest.delete(
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        gracePeriodSeconds=0,
                    )
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline:
            # Stopped sandboxes have released their network; only running tasks matter.
            if not self._ctr("tasks", "list", "--quiet").stdout.split():
                return
            time.sleep(0.5)

    def _clear_device_plugin_dir(self) -> None:
        """Sockets and the checkpoint a node before this one left behind."""
        DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        for entry in DEVICE_PLUGIN_DIR.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    @staticmethod
    def _unmount_below(directory: Path) -> None:
        """Volumes and rootfs mounts the kubelet or containerd left under ``directory``."""
        prefix = str(directory.resolve()) if directory.exists() else str(directory)
        mounts: list[str] = []
        with open("/proc/self/mounts") as table:
            for line in table:
                target = line.split()[1].replace("\\040", " ")
                if target == prefix or target.startswith(prefix + "/"):
                    mounts.append(target)
        for target in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def pod_logs(control_plane: ControlPlane, namespace: str, name: str, container: str = "") -> str:
    """A container's output, as ``kubectl logs`` reads it (through the kubelet)."""
    return control_plane.kubectl(
        "logs", "-n", namespace, name, *(["-c", container] if container else []), timeout_s=60
    )
