"""The set of running plugins: follows the resources config and the kubelet's restarts.

One loop (``run``) polls every ``poll_interval`` seconds:

1. the resources config: new types get a plugin, removed types are withdrawn
   (devices reported Unhealthy, stream closed, server stopped, socket removed);
2. each plugin's socket: if it vanished or was replaced (a starting kubelet
   removes every socket in the directory), the server is restarted on a fresh
   socket and must register again;
3. ``kubelet.sock``: if it was recreated (a new kubelet), every plugin registers
   again even when its own socket survived;
4. registrations still owed are attempted, with exponential backoff on failure,
   and at once when a new kubelet.sock appears.

Polling ``os.stat`` keeps the process free of inotify dependencies and
bounds the reaction time to about one interval plus the Register round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deviceplugin.metrics import PluginMetrics
from deviceplugin.proto import KUBELET_SOCKET, UNHEALTHY
from deviceplugin.registration import RegistrationError, register
from deviceplugin.server import FluxionDevicePlugin, PluginServer
from deviceplugin.settings import Settings
from fluence.config_watch import ConfigWatcher

log = logging.getLogger(__name__)

FileIdentity = tuple[int, int]
"""(inode, ctime_ns): tells a recreated file apart even when the inode number is reused."""


def file_identity(path: Path) -> FileIdentity | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_ctime_ns)


@dataclass(frozen=True)
class TypeDiff:
    """How the advertised types must change to match a new config."""

    added: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def diff_types(current: set[str] | frozenset[str], desired: set[str] | frozenset[str]) -> TypeDiff:
    return TypeDiff(tuple(sorted(desired - current)), tuple(sorted(current - desired)))


@dataclass
class _Managed:
    server: PluginServer
    registered_with: FileIdentity | None = None
    """The kubelet.sock this plugin is registered with; None while a registration is owed."""
    registrations: int = 0
    failures: int = 0
    next_attempt: float = 0.0

    @property
    def plugin(self) -> FluxionDevicePlugin:
        return self.server.plugin


class PluginManager:
    """Owns one :class:`PluginServer` per configured resource type."""

    def __init__(self, settings: Settings, metrics: PluginMetrics | None = None) -> None:
        self.settings = settings
        self.kubelet_socket = settings.device_plugin_dir / KUBELET_SOCKET
        self.config = ConfigWatcher(Path(settings.resources))
        self.metrics = metrics
        self._plugins: dict[str, _Managed] = {}
        self._last_tick = time.monotonic()

    # --- state for /healthz and /metrics ---------------------------------------

    def devices_advertised(self) -> dict[str, int]:
        return {
            m.plugin.resource_name: (self.settings.resource_capacity if m.plugin.healthy else 0)
            for m in self._plugins.values()
        }

    def status(self) -> dict[str, Any]:
        return {
            "seconds_since_last_check": round(time.monotonic() - self._last_tick, 3),
            "config": str(self.settings.resources),
            "config_error": self.config.last_error,
            "kubelet_socket_present": self.kubelet_socket.exists(),
            "resources": {
                m.plugin.resource_name: {
                    "socket": str(m.server.socket_path),
                    "serving": m.server.running,
                    "registered": m.registered_with is not None,
                    "registrations": m.registrations,
                    "failed_attempts": m.failures,
                }
                for m in self._plugins.values()
            },
        }

    def alive(self) -> bool:
        """The loop is turning (a stuck loop would stop re-registering after a kubelet restart)."""
        return time.monotonic() - self._last_tick < max(10.0, 10 * self.settings.poll_interval)

    # --- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Poll until cancelled; on the way out stop every server and remove its socket."""
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.settings.poll_interval)
        finally:
            await self.shutdown()

    async def tick(self) -> None:
        self._last_tick = time.monotonic()
        errors_before = self.config.errors
        config = self.config.poll()
        if self.metrics and self.config.errors > errors_before:
            self.metrics.config_reloads.add(1, {"result": "error"})
        if config is not None:
            await self._apply(frozenset(config.types()))
        kubelet = file_identity(self.kubelet_socket)
        for m in self._plugins.values():
            await self._check_socket(m)
            if m.registered_with is not None and m.registered_with != kubelet:
                log.info(
                    "kubelet socket changed; registering again",
                    extra={"resource": m.plugin.resource_name},
                )
                m.registered_with = None
                m.failures = 0
                m.next_attempt = 0.0
        if kubelet is None:
            return
        now = time.monotonic()
        owed = [
            m
            for m in self._plugins.values()
            if m.registered_with is None and m.server.running and now >= m.next_attempt
        ]
        if owed:
            await asyncio.gather(*(self._register(m, kubelet) for m in owed))

    async def shutdown(self) -> None:
        for rtype in list(self._plugins):
            m = self._plugins.pop(rtype)
            await m.plugin.close()
            await m.server.stop(grace=0.5)
        log.info("device plugins stopped")

    # --- steps ---------------------------------------------------------------------

    async def _apply(self, desired: frozenset[str]) -> None:
        diff = diff_types(set(self._plugins), set(desired))
        if diff.empty:
            return
        log.info(
            "resources config changed",
            extra={"added": list(diff.added), "removed": list(diff.removed)},
        )
        if self.metrics:
            self.metrics.config_reloads.add(1, {"result": "ok"})
        for rtype in diff.removed:
            await self._withdraw(self._plugins.pop(rtype))
        for rtype in diff.added:
            plugin = FluxionDevicePlugin(rtype, self.settings.resource_capacity)
            m = _Managed(PluginServer(plugin, self.settings.device_plugin_dir))
            self._plugins[rtype] = m
            await self._start(m)

    async def _start(self, m: _Managed) -> None:
        try:
            await m.server.start()
        except Exception as e:  # a bind failure must not stop the other plugins
            log.error(
                "cannot serve the device plugin socket; will retry. Check that the directory "
                "exists and is writable",
                extra={
                    "resource": m.plugin.resource_name,
                    "socket": str(m.server.socket_path),
                    "error": str(e),
                },
            )

    async def _check_socket(self, m: _Managed) -> None:
        if m.server.running and m.server.socket_intact():
            return
        reason = "socket removed" if m.server.running else "not serving"
        log.warning(
            "device plugin socket is gone (a kubelet restart removes it); restarting the server",
            extra={"resource": m.plugin.resource_name, "reason": reason},
        )
        await self._start(m)
        m.registered_with = None
        m.failures = 0
        m.next_attempt = 0.0
        if self.metrics and m.server.running:
            self.metrics.server_restarts.add(1, {"resource": m.plugin.resource_name})

    async def _register(self, m: _Managed, kubelet: FileIdentity) -> None:
        name = m.plugin.resource_name
        kind = "first" if m.registrations == 0 else "again"
        start = time.monotonic()
        try:
            await register(
                self.kubelet_socket,
                endpoint=m.server.endpoint,
                resource_name=name,
                options=m.plugin.options,
                timeout=self.settings.register_timeout,
            )
        except RegistrationError as e:
            m.failures += 1
            delay = min(self.settings.max_backoff, 0.25 * 2 ** (m.failures - 1))
            m.next_attempt = time.monotonic() + delay
            log.warning(str(e), extra={"resource": name, "retry_in": delay})
            if self.metrics:
                self.metrics.registrations.add(
                    1, {"resource": name, "result": "error", "kind": kind}
                )
            return
        m.registered_with = kubelet
        m.registrations += 1
        m.failures = 0
        log.info(
            "registered with the kubelet",
            extra={
                "resource": name,
                "endpoint": m.server.endpoint,
                "kind": kind,
                "seconds": round(time.monotonic() - start, 4),
            },
        )
        if self.metrics:
            self.metrics.registrations.add(1, {"resource": name, "result": "ok", "kind": kind})

    async def _withdraw(self, m: _Managed) -> None:
        """Tell the kubelet the devices are gone, then stop serving and remove the socket."""
        name = m.plugin.resource_name
        await m.plugin.set_health(UNHEALTHY)
        deadline = time.monotonic() + self.settings.withdraw_grace
        while (
            m.plugin.streams
            and m.plugin.sent_generation < m.plugin.generation
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.05)
        await m.plugin.close()
        with contextlib.suppress(Exception):
            await m.server.stop(grace=0.5)
        log.info("resource withdrawn", extra={"resource": name})
