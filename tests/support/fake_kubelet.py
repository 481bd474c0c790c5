"""A stand-in kubelet for the device plugin API, in Python (``grpc.aio``).

It does what the kubelet's device manager does with a plugin, enough to drive
fluence's device plugin without a node:

- serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock`` and validates the
  request (version ``v1beta1``, a domain-qualified extended resource name);
- dials the plugin's endpoint back *before* answering (so a plugin that is not
  serving yet fails to register, as with the real kubelet), asks for its
  options and follows its ``ListAndWatch`` stream, keeping every list it got;
- on start, removes every socket left in the directory, as a starting kubelet
  does (so plugins must notice and register again).

Tests call ``allocate``/``preferred`` on a registered resource and wait for
conditions with :meth:`FakeKubelet.wait_for`. Use it as an async context
manager so it is always stopped::

    async with FakeKubelet(plugin_dir) as kubelet:
        await kubelet.wait_for(lambda: "fluxion.flux-framework.org/qpu" in kubelet.endpoints)
"""

from __future__ import annotations

import asyncio
import contextlib
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from deviceplugin.proto import HEALTHY, KUBELET_SOCKET, DevicePluginStub, pb
from fluence.controlplane.deviceplugins import (
    dial_registering_plugin,
    is_extended_resource_name,
    serve_registration,
)


def wipe_sockets(directory: Path) -> list[str]:
    """Remove every socket in ``directory`` (files and subdirectories stay), as a kubelet does."""
    removed = []
    for entry in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
                removed.append(entry.name)
    return removed


@dataclass
class Registration:
    """One accepted Register call."""

    resource_name: str
    endpoint: str
    version: str
    request_options: pb.DevicePluginOptions
    plugin_options: pb.DevicePluginOptions
    """What GetDevicePluginOptions answered when the kubelet dialled back."""
    at: float
    """time.monotonic() when the registration completed."""


@dataclass
class Endpoint:
    """The kubelet's connection to one registered plugin."""

    resource_name: str
    socket: Path
    channel: Any
    stub: DevicePluginStub
    lists: list[list[tuple[str, str]]] = field(default_factory=list)
    """Every ListAndWatch message received, as (device ID, health) pairs."""
    stream_ended: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def devices(self) -> list[tuple[str, str]]:
        return self.lists[-1] if self.lists else []

    @property
    def healthy(self) -> int:
        return sum(1 for _, h in self.devices if h == HEALTHY)


class FakeKubelet:
    def __init__(self, plugin_dir: Path, *, wipe_on_start: bool = True) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / KUBELET_SOCKET
        self.wipe_on_start = wipe_on_start
        self.registrations: list[Registration] = []
        self.rejected: list[str] = []
        self.endpoints: dict[str, Endpoint] = {}
        self.closed_endpoints: list[Endpoint] = []
        self._server: Any = None
        self._changed = asyncio.Condition()

    async def __aenter__(self) -> FakeKubelet:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        if self.wipe_on_start:
            wipe_sockets(self.plugin_dir)
        self._server = await serve_registration(self.socket, self)

    async def stop(self) -> None:
        """Stop like a dying kubelet: streams and connections drop, kubelet.sock goes away."""
        for ep in list(self.endpoints.values()):
            await self._close_endpoint(ep)
        self.endpoints.clear()
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds; it is re-checked after every event."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    def registered(self, resource_name: str) -> list[Registration]:
        return [r for r in self.registrations if r.resource_name == resource_name]

    # --- driving a registered plugin ---------------------------------------------

    def stub(self, resource_name: str) -> DevicePluginStub:
        return self.endpoints[resource_name].stub

    async def allocate(
        self, resource_name: str, containers: Sequence[Sequence[str]]
    ) -> pb.AllocateResponse:
        request = pb.AllocateRequest(
            container_requests=[
                pb.ContainerAllocateRequest(devices_ids=list(c)) for c in containers
            ]
        )
        return await self.stub(resource_name).Allocate(request, timeout=5)

    async def preferred(
        self, resource_name: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = await self.stub(resource_name).GetPreferredAllocation(request, timeout=5)
        return list(response.container_responses[0].deviceIDs)

    # --- the Registration service ------------------------------------------------

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        channel, stub, options = await dial_registering_plugin(
            self.plugin_dir, request, context, check_name=True, on_reject=self.rejected.append
        )
        socket = self.plugin_dir / request.endpoint
        ep = Endpoint(request.resource_name, socket, channel, stub)
        old = self.endpoints.get(request.resource_name)
        if old is not None:
            await self._close_endpoint(old)
        self.endpoints[request.resource_name] = ep
        ep.task = asyncio.create_task(self._follow(ep))
        async with self._changed:
            self.registrations.append(
                Registration(
                    request.resource_name,
                    request.endpoint,
                    request.version,
                    request.options,
                    options,
                    time.monotonic(),
                )
            )
            self._changed.notify_all()
        return pb.Empty()

    async def _follow(self, ep: Endpoint) -> None:
        call = ep.stub.ListAndWatch()
        try:
            async for response in call:
                async with self._changed:
                    ep.lists.append([(d.ID, d.health) for d in response.devices])
                    self._changed.notify_all()
        except grpc.aio.AioRpcError:
            pass
        finally:
            async with self._changed:
                ep.stream_ended = True
                self._changed.notify_all()

    async def _close_endpoint(self, ep: Endpoint) -> None:
        if ep.task is not None:
            ep.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ep.task
        await ep.channel.close()
        self.closed_endpoints.append(ep)


def socket_files(directory: Path) -> list[str]:
    """Names of the sockets in ``directory``, sorted."""
    return sorted(e.name for e in directory.iterdir() if stat.S_ISSOCK(e.lstat().st_mode))


__all__ = [
    "Endpoint",
    "FakeKubelet",
    "Registration",
    "is_extended_resource_name",
    "socket_files",
    "wipe_sockets",
]
