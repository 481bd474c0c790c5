"""The kubelet's side of the device plugin API, enough to learn what plugins advertise.

Fake nodes have no kubelet, so nothing would turn a device plugin's
``ListAndWatch`` into ``status.capacity``. :class:`DevicePluginRegistry` serves
``v1beta1.Registration`` on ``<dir>/kubelet.sock``; for every plugin that
registers it dials the plugin's socket back (before answering, as the kubelet
does), follows its ``ListAndWatch`` stream and keeps the number of healthy
devices per resource name. The caller then copies those counts into the fake
nodes' status, as a kubelet would for its own node.

gRPC runs on an asyncio loop in a background thread so that callers stay
synchronous::

    with DevicePluginRegistry(plugin_dir) as registry:
        ...  # start the plugin process with FLUENCE_DEVICE_PLUGIN_DIR=plugin_dir
        counts = registry.wait_for_resources(["fluxion.flux-framework.org/qpu"], timeout_s=20)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# The harness forks component processes (fork + exec, see processes.py) while this
# module's gRPC threads run. gRPC's fork handlers then restart its threads in the
# child before exec, which can crash the child; the children exec at once and need
# none of that, so the handlers stay off unless the caller chose otherwise.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402 - after the fork-support setting above

from deviceplugin.proto import (
    HEALTHY,
    KUBELET_SOCKET,
    VERSION,
    DevicePluginStub,
    pb,
    registration_handler,
)
from fluence.controlplane.processes import StartStop

log = logging.getLogger(__name__)

DIAL_TIMEOUT_S = 10.0
START_TIMEOUT_S = 10.0


# A domain-qualified name outside kubernetes.io, like the kubelet's IsExtendedResourceName.
_EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_extended_resource_name(name: str) -> bool:
    if not _EXTENDED.match(name):
        return False
    domain = name.split("/", 1)[0]
    return "." in domain and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


async def serve_registration(socket: Path, servicer: Any) -> Any:
    """Start a ``grpc.aio`` server for ``v1beta1.Registration`` on ``socket`` (a stale one goes)."""
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((registration_handler(servicer),))
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    return server


async def dial_registering_plugin(
    plugin_dir: Path,
    request: pb.RegisterRequest,
    context: Any,
    *,
    check_name: bool = False,
    on_reject: Callable[[str], None] | None = None,
) -> tuple[Any, DevicePluginStub, pb.DevicePluginOptions]:
    """Validate a Register call and dial the plugin back, as the kubelet does before answering.

    Aborts the call with INVALID_ARGUMENT for another API version (or, with
    ``check_name``, a resource name that is not a domain-qualified extended
    resource) and with UNAVAILABLE when the plugin's socket does not answer;
    ``on_reject(resource_name)`` runs first. Returns the channel, a stub on it
    and the plugin's options.
    """

    async def reject(code: grpc.StatusCode, message: str) -> None:
        if on_reject is not None:
            on_reject(request.resource_name)
        await context.abort(code, message)

    if request.version != VERSION:
        await reject(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"device plugin API version {request.version!r} is not supported; use {VERSION}",
        )
    if check_name and not is_extended_resource_name(request.resource_name):
        await reject(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the ResourceName {request.resource_name!r} is invalid",
        )
    endpoint = plugin_dir / request.endpoint
    channel = grpc.aio.insecure_channel(f"unix://{endpoint}")
    try:
        await asyncio.wait_for(channel.channel_ready(), DIAL_TIMEOUT_S)
        stub = DevicePluginStub(channel)
        options = await stub.GetDevicePluginOptions(timeout=5)
    except (TimeoutError, grpc.aio.AioRpcError) as exc:
        await channel.close()
        await reject(
            grpc.StatusCode.UNAVAILABLE,
            f"cannot dial the device plugin at {endpoint}: {exc}; serve it before registering",
        )
    return channel, stub, options


class DevicePluginRegistry(StartStop):
    """Registration server on ``<plugin_dir>/kubelet.sock``; counts healthy devices per resource."""

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
        self._followers: dict[str, tuple[Any, asyncio.Task[None]]] = {}

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
        server = await serve_registration(self.socket, self)
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            for channel, task in self._followers.values():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await channel.close()
            await server.stop(0)

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        """Accept a plugin: dial it back, then follow its device list."""
        channel, stub, _ = await dial_registering_plugin(self.plugin_dir, request, context)
        previous = self._followers.pop(request.resource_name, None)
        if previous is not None:
            previous[1].cancel()
            await previous[0].close()
        task = asyncio.create_task(self._follow(request.resource_name, stub))
        self._followers[request.resource_name] = (channel, task)
        log.info(
            "device plugin registered",
            extra={"resource": request.resource_name, "endpoint": request.endpoint},
        )
        return pb.Empty()

    async def _follow(self, resource_name: str, stub: DevicePluginStub) -> None:
        call = stub.ListAndWatch()
        try:
            async for response in call:
                healthy = sum(1 for d in response.devices if d.health == HEALTHY)
                with self._changed:
                    self._healthy[resource_name] = healthy
                    self._changed.notify_all()
        except grpc.aio.AioRpcError:
            pass
        finally:
            # A stream that ended means the plugin is gone: the kubelet reports 0 then.
            with self._changed:
                self._healthy[resource_name] = 0
                self._changed.notify_all()


__all__ = [
    "DevicePluginRegistry",
    "dial_registering_plugin",
    "is_extended_resource_name",
    "serve_registration",
]
