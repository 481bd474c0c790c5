"""Device plugin capacity for fake nodes: the fake kubelet on a background thread.

Fake nodes have no kubelet, so nothing would turn a device plugin's
``ListAndWatch`` into ``status.capacity``. :class:`DevicePluginRegistry` runs a
:class:`testbed.fake_kubelet.FakeKubelet` (which serves ``v1beta1.Registration``
on ``<dir>/kubelet.sock``, dials every plugin back and follows its device list)
on an asyncio loop in a thread of its own, so that callers stay synchronous,
and keeps the number of healthy devices per resource name. The caller then
copies those counts into the fake nodes' status, as a kubelet would for its
own node::

    with DevicePluginRegistry(plugin_dir) as registry:
        ...  # start the plugin process with FLUENCE_DEVICE_PLUGIN_DIR=plugin_dir
        counts = registry.wait_for_resources(["fluxion.flux-framework.org/qpu"], timeout_s=20)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from deviceplugin.proto import KUBELET_SOCKET
from testbed.fake_kubelet import FakeKubelet
from testbed.processes import StartStop

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0


class DevicePluginRegistry(StartStop):
    """A fake kubelet on ``<plugin_dir>/kubelet.sock``; counts healthy devices per resource."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / KUBELET_SOCKET
        self._healthy: dict[str, int] = {}
        self._changed = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> DevicePluginRegistry:
        """Serve on the socket; returns once it accepts registrations."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(
            target=self._run, name="device-plugin-registry", daemon=True
        )
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S) or self._error is not None:
            self.stop()
            raise RuntimeError(
                f"the device plugin registration server did not start on {self.socket}: "
                f"{self._error}; check that the directory is writable and the path is short "
                "(unix socket paths are limited to about 107 bytes)"
            )
        return self

    def stop(self) -> None:
        """Close every plugin stream and the server; removes kubelet.sock."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    def devices(self) -> dict[str, int]:
        """Healthy devices per registered resource name, as last reported."""
        with self._changed:
            return dict(self._healthy)

    def wait_for(self, predicate: Callable[[dict[str, int]], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(devices())`` holds; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(dict(self._healthy)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def wait_for_resources(self, names: Iterable[str], timeout_s: float) -> dict[str, int]:
        """Wait until every resource in ``names`` reports healthy devices; returns the counts."""
        wanted = set(names)
        if not self.wait_for(lambda d: all(d.get(n, 0) > 0 for n in wanted), timeout_s):
            missing = sorted(n for n in wanted if self.devices().get(n, 0) <= 0)
            raise TimeoutError(
                f"no healthy devices for {', '.join(missing)} after {timeout_s:.0f}s; "
                "check that the device plugin runs with FLUENCE_DEVICE_PLUGIN_DIR="
                f"{self.plugin_dir} and a resources config naming those types"
            )
        return self.devices()

    # The event loop thread -------------------------------------------------------------

    def _publish(self, kubelet: FakeKubelet) -> None:
        """Copy the kubelet's counts for the synchronous side (runs on the loop)."""
        counts = kubelet.healthy_devices()
        with self._changed:
            # A resource whose plugin went away stays, at 0, as on a real node.
            self._healthy.update(counts)
            for name in self._healthy.keys() - counts.keys():
                self._healthy[name] = 0
            self._changed.notify_all()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start() and the log
            self._error = exc
            self._started.set()
            log.error("device plugin registry failed", extra={"error": str(exc)})

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # The plugin may already be serving in this directory: keep its socket.
        kubelet = FakeKubelet(self.plugin_dir, wipe_on_start=False, on_change=self._publish)
        await kubelet.start()
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            kubelet.on_change = None
            await kubelet.stop()


__all__ = ["DevicePluginRegistry"]
