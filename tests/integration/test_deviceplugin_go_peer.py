"""fluence's device plugin against the kubelet's own device-manager code (Go).

``hack/k8s-bins/devicemanager-peer`` serves kubelet.sock with
``k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1`` (the
registration server and endpoint client the kubelet runs), so this checks
the wire contract against the real thing: Register is accepted, the kubelet
can dial our endpoint, ListAndWatch delivers the devices and Allocate answers.
The binary is built once and cached under ~/.cache/fluence/, keyed by a hash
of its source, go.mod, go.sum and the Go version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fluence import names
from testbed.fake_kubelet import socket_files
from tests.support.deviceplugin_process import DevicePluginProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GO_MODULE = REPO / "hack" / "k8s-bins"
PEER_SRC = GO_MODULE / "devicemanager-peer"
EXAMPLE = REPO / "examples" / "resources.yaml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fluence"
CAPACITY = 40


def peer_binary() -> Path:
    """Build (or reuse) the peer; a missing Go toolchain fails the test with what to install."""
    go = shutil.which("go")
    assert go, "Go is required to build hack/k8s-bins/devicemanager-peer; install Go 1.26+"
    digest = hashlib.sha256()
    for f in (*sorted(PEER_SRC.glob("*.go")), GO_MODULE / "go.mod", GO_MODULE / "go.sum"):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    digest.update(subprocess.run([go, "version"], capture_output=True, check=True).stdout)
    binary = CACHE / f"devicemanager-peer-{digest.hexdigest()[:16]}"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        subprocess.run(
            [go, "build", "-o", str(tmp), "./devicemanager-peer"],
            cwd=GO_MODULE,
            env={**os.environ, "CGO_ENABLED": "0"},
            check=True,
            timeout=1200,
        )
        tmp.replace(binary)
        for old in CACHE.glob("devicemanager-peer-*"):
            if old != binary:
                old.unlink(missing_ok=True)
    return binary


def test_kubelet_device_manager_accepts_our_plugins(workdir: Path) -> None:
    binary = peer_binary()
    plugin_dir = workdir / "dp"
    plugin_dir.mkdir()
    resources = workdir / "resources.yaml"
    shutil.copy(EXAMPLE, resources)

    with DevicePluginProcess(plugin_dir, resources, capacity=CAPACITY) as plugin:
        # The peer starts second and, like a starting kubelet, removes the sockets the
        # plugin already created: the plugin must notice, serve again and register.
        peer = subprocess.run(
            [str(binary), "-dir", str(plugin_dir), "-expect", "3", "-allocate", "-timeout", "30s"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        events = [json.loads(line) for line in peer.stdout.splitlines() if line.strip()]
        assert peer.returncode == 0, (peer.stdout, peer.stderr[-3000:], plugin.logs()[-3000:])

        # A kubelet restart: a new device manager wipes the sockets again and must get
        # every resource back, well within 5 s.
        started = time.monotonic()
        again = subprocess.run(
            [str(binary), "-dir", str(plugin_dir), "-expect", "3", "-timeout", "5s"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        elapsed = time.monotonic() - started
        print(f"\nkubelet device manager restart: all 3 resources back after {elapsed:.3f} s")
        assert again.returncode == 0, (again.stdout, again.stderr[-3000:], plugin.logs()[-3000:])
        assert '"event":"done","resources":3' in again.stdout.replace(" ", "")
        assert plugin.terminate() == 0, plugin.logs()[-3000:]
    assert socket_files(plugin_dir) == []

    expected = sorted(names.resource_name(t) for t in ("qdevice", "qpu", "qubit"))
    connected = {e["resource"]: e for e in events if e["event"] == "connected"}
    assert sorted(connected) == expected
    for e in connected.values():
        assert e["get_preferred_allocation_available"] is True
        assert e["pre_start_required"] is False
    devices = {e["resource"]: e for e in events if e["event"] == "devices"}
    assert sorted(devices) == expected
    for e in devices.values():
        assert e["count"] == CAPACITY
        assert e["healthy"] == CAPACITY
    allocated = {e["resource"]: e for e in events if e["event"] == "allocated"}
    assert sorted(allocated) == expected
    for name, e in allocated.items():
        rtype = names.resource_type(name)
        assert rtype is not None
        assert e["containers"] == 1
        assert e["envs"] == {names.devices_env(rtype): f"{rtype}-0"}
    assert {"event": "done", "resources": 3} in events
    assert not [e for e in events if e["event"] in ("timeout", "allocate_failed")]
