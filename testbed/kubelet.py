"""A stand-in kubelet that moves pods on fake nodes through their phases.

Fake nodes have no kubelet, so a bound pod would stay Pending forever and a
deleted one would stay Terminating. This loop watches pods and, for those bound
to fake nodes, writes the status a kubelet would (Running with ready
conditions, container states, an IP) and finishes graceful deletions. Tests end
a pod's life with :meth:`StandInKubelet.succeed` or :meth:`StandInKubelet.fail`.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from testbed.downward import resolve_env
from testbed.rest import KubeApiError, KubeRest

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 60
RETRY_DELAY_S = 0.5
HOST_IP = "127.0.0.1"
POD_CIDR_PREFIX = "10.244"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def _conditions(ready: bool, reason: str | None, now: str) -> list[dict[str, Any]]:
    readiness = "True" if ready else "False"
    conditions = []
    for kind, status in (
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("Ready", readiness),
        ("ContainersReady", readiness),
        ("PodScheduled", "True"),
    ):
        condition: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": now}
        if status == "False" and reason:
            condition["reason"] = reason
        conditions.append(condition)
    return conditions


def running_status(pod: Mapping[str, Any], pod_ip: str, now: str) -> dict[str, Any]:
    """The status a kubelet reports once every container of ``pod`` has started."""
    spec = pod.get("spec") or {}
    uid = (pod.get("metadata") or {}).get("uid", "")
    containers = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"fake://{uid}/{c['name']}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for c in spec.get("containers") or []
    ]
    init_containers = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"fake://{uid}/{c['name']}",
            "ready": True,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": now,
                    "finishedAt": now,
                }
            },
        }
        for c in spec.get("initContainers") or []
    ]
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": _conditions(True, None, now),
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": (pod.get("status") or {}).get("startTime") or now,
        "containerStatuses": containers,
    }
    if init_containers:
        status["initContainerStatuses"] = init_containers
    return status


def terminated_status(
    pod: Mapping[str, Any], *, succeeded: bool, exit_code: int, reason: str, now: str
) -> dict[str, Any]:
    """The status of a pod whose containers have all exited."""
    spec = pod.get("spec") or {}
    uid = (pod.get("metadata") or {}).get("uid", "")
    previous = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    containers = []
    for c in spec.get("containers") or []:
        running = (previous.get(c["name"], {}).get("state") or {}).get("running") or {}
        containers.append(
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"fake://{uid}/{c['name']}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "startedAt": running.get("startedAt", now),
                        "finishedAt": now,
                    }
                },
            }
        )
    return {
        "phase": "Succeeded" if succeeded else "Failed",
        "conditions": _conditions(False, "PodCompleted" if succeeded else "PodFailed", now),
        "containerStatuses": containers,
    }


class StandInKubelet:
    """Watches pods and plays the kubelet for those bound to fake nodes.

    ``is_fake_node`` decides which nodes this kubelet speaks for.
    """

    def __init__(self, rest: KubeRest, is_fake_node: Callable[[str], bool]) -> None:
        self._rest = rest
        self._is_fake_node = is_fake_node
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: http.client.HTTPSConnection | None = None
        self._lock = threading.Lock()
        self._ips: dict[str, str] = {}
        self._ip_counter = itertools.count(2)
        self._synced = threading.Event()

    # Lifecycle -------------------------------------------------------------

    def start(self) -> StandInKubelet:
        if self._thread is not None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="stand-in-kubelet", daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout_s: float = 10.0) -> None:
        """Block until the first pod listing has been processed."""
        if not self._synced.wait(timeout_s):
            raise TimeoutError(f"stand-in kubelet did not list pods within {timeout_s:.0f}s")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # Watch loop ----------------------------------------------------------------

    def _remember_conn(self, conn: http.client.HTTPSConnection) -> None:
        with self._lock:
            self._conn = conn

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self._rest.get("/api/v1/pods")
                for pod in listing.get("items") or []:
                    self._handle(pod)
                self._synced.set()
                self._watch_from(str(listing["metadata"]["resourceVersion"]))
            except Exception as exc:  # noqa: BLE001 - keep the loop alive across apiserver hiccups
                if self._stop.is_set():
                    return
                log.warning(
                    "stand-in kubelet watch failed; relisting",
                    extra={"error": str(exc)},
                )
                self._stop.wait(RETRY_DELAY_S)

    def _watch_from(self, resource_version: str) -> None:
        while not self._stop.is_set():
            for event in self._rest.watch(
                "/api/v1/pods",
                resource_version,
                timeout_s=WATCH_TIMEOUT_S,
                on_connect=self._remember_conn,
            ):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    # Typically 410 Gone: the resourceVersion is too old; relist.
                    return
                resource_version = str(
                    obj.get("metadata", {}).get("resourceVersion", resource_version)
                )
                if kind in ("ADDED", "MODIFIED"):
                    self._handle(obj)
                elif kind == "DELETED":
                    self._ips.pop(obj.get("metadata", {}).get("uid", ""), None)

    def _handle(self, pod: Mapping[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or not self._is_fake_node(node):
            return
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            if meta.get("deletionTimestamp"):
                # The containers "stopped" at once; finish the graceful deletion.
                self._rest.delete(_pod_path(namespace, name), gracePeriodSeconds=0)
                return
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase == "Pending":
                self._start_pod(pod)
        except KubeApiError as exc:
            if exc.status not in (404, 409):
                raise

    def _pod_ip(self, uid: str) -> str:
        if uid not in self._ips:
            n = next(self._ip_counter)
            self._ips[uid] = f"{POD_CIDR_PREFIX}.{(n // 254) % 256}.{n % 254 + 1}"
        return self._ips[uid]

    def _start_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        status = running_status(pod, self._pod_ip(meta.get("uid", "")), _now())
        self._rest.merge_patch(
            _pod_path(meta["namespace"], meta["name"]) + "/status", {"status": status}
        )
        log.debug(
            "pod running",
            extra={"pod": f"{meta['namespace']}/{meta['name']}", "node": pod["spec"]["nodeName"]},
        )

    # Test controls ---------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod: dict[str, Any] = self._rest.get(_pod_path(namespace, name))
        return pod

    def succeed(self, namespace: str, name: str) -> dict[str, Any]:
        """Every container exits 0: phase Succeeded."""
        return self._terminate(namespace, name, succeeded=True, exit_code=0, reason="Completed")

    def fail(
        self, namespace: str, name: str, *, exit_code: int = 1, reason: str = "Error"
    ) -> dict[str, Any]:
        """Every container exits with ``exit_code``: phase Failed."""
        if exit_code == 0:
            raise ValueError("a failed pod needs a non-zero exit code; use succeed() for 0")
        return self._terminate(namespace, name, succeeded=False, exit_code=exit_code, reason=reason)

    def _terminate(
        self, namespace: str, name: str, *, succeeded: bool, exit_code: int, reason: str
    ) -> dict[str, Any]:
        pod = self.get_pod(namespace, name)
        status = terminated_status(
            pod, succeeded=succeeded, exit_code=exit_code, reason=reason, now=_now()
        )
        patched: dict[str, Any] = self._rest.merge_patch(
            _pod_path(namespace, name) + "/status", {"status": status}
        )
        return patched

    def wait_for_phase(
        self, namespace: str, name: str, phase: str, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        """Poll until the pod reaches ``phase``; raises TimeoutError with the last phase seen."""
        deadline = time.monotonic() + timeout_s
        seen = "?"
        while True:
            pod = self.get_pod(namespace, name)
            seen = (pod.get("status") or {}).get("phase", "?")
            if seen == phase:
                return pod
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"pod {namespace}/{name} is {seen}, not {phase}, after {timeout_s:.0f}s "
                    f"(node: {(pod.get('spec') or {}).get('nodeName') or 'unbound'})"
                )
            time.sleep(0.1)

    @staticmethod
    def resolve_env(pod: Any) -> dict[str, dict[str, str]]:
        """Downward-API env per container, as the kubelet would set it."""
        return resolve_env(pod)
