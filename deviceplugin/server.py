"""One device plugin: the ``v1beta1.DevicePlugin`` service for one resource type on its own socket.

The kubelet keeps a ``ListAndWatch`` stream open per plugin and takes every
message as the complete device list, so the servicer sends the full list
first and again whenever it changes (here: when the type is withdrawn and every
device turns Unhealthy).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from deviceplugin import devices
from deviceplugin.proto import HEALTHY, device_plugin_handler, pb
from fluence import names

log = logging.getLogger(__name__)


class FluxionDevicePlugin:
    """The DevicePlugin RPCs for one resource type; no I/O besides the gRPC calls themselves."""

    def __init__(self, rtype: str, capacity: int) -> None:
        self.rtype = rtype
        self.resource_name = names.resource_name(rtype)
        self._ids = devices.device_ids(rtype, capacity)
        self._health = HEALTHY
        self._changed = asyncio.Condition()
        self._generation = 0
        self._closed = False
        self.streams = 0
        """ListAndWatch streams open now (the kubelet holds one)."""
        self.sent_generation = -1
        """Generation of the last list sent on any stream, so a withdrawal can wait for it."""

    @property
    def options(self) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    @property
    def generation(self) -> int:
        """Bumped on every change of the device list."""
        return self._generation

    @property
    def healthy(self) -> bool:
        return self._health == HEALTHY

    def device_list(self) -> pb.ListAndWatchResponse:
        return pb.ListAndWatchResponse(
            devices=[pb.Device(ID=i, health=self._health) for i in self._ids]
        )

    async def set_health(self, health: str) -> None:
        """Report every device as ``health`` on the open streams."""
        async with self._changed:
            if health != self._health:
                self._health = health
                self._generation += 1
                self._changed.notify_all()

    async def close(self) -> None:
        """End every ListAndWatch stream (the server is about to stop)."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _news(self, seen: int) -> bool:
        return self._closed or self._generation != seen

    # --- RPCs ---------------------------------------------------------------

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: Any
    ) -> pb.DevicePluginOptions:
        return self.options

    async def ListAndWatch(
        self, request: pb.Empty, context: Any
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        self.streams += 1
        log.info(
            "ListAndWatch opened",
            extra={
                "resource": self.resource_name,
                "devices": len(self._ids),
                "health": self._health,
            },
        )
        try:
            generation = self._generation
            yield self.device_list()
            self.sent_generation = max(self.sent_generation, generation)
            while True:
                async with self._changed:
                    await self._changed.wait_for(functools.partial(self._news, generation))
                    if self._closed:
                        return
                    generation = self._generation
                    response = self.device_list()
                yield response
                self.sent_generation = max(self.sent_generation, generation)
        finally:
            self.streams -= 1
            log.info("ListAndWatch closed", extra={"resource": self.resource_name})

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse:
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=devices.preferred_allocation(
                        list(req.available_deviceIDs),
                        list(req.must_include_deviceIDs),
                        req.allocation_size,
                    )
                )
                for req in request.container_requests
            ]
        )

    async def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        unknown = sorted(
            {d for req in request.container_requests for d in req.devices_ids} - set(self._ids)
        )
        if unknown:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{self.resource_name}: unknown device IDs {unknown[:5]}; this plugin advertises "
                f"{self._ids[0]}..{self._ids[-1]}",
            )
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(
                    envs=devices.allocation_envs(self.rtype, list(req.devices_ids))
                )
                for req in request.container_requests
            ]
        )

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class PluginServer:
    """A ``grpc.aio`` server for one :class:`FluxionDevicePlugin` on ``<dir>/fluence-<type>.sock``.

    It can be restarted (after a kubelet wiped the directory) and notices when
    its socket file was removed or replaced behind its back.
    """

    def __init__(self, plugin: FluxionDevicePlugin, plugin_dir: Path) -> None:
        self.plugin = plugin
        self.socket_path = plugin_dir / devices.socket_name(plugin.rtype)
        self._server: Any = None
        self._inode: int | None = None

    @property
    def endpoint(self) -> str:
        """What Register sends: the socket's file name, relative to the kubelet's directory."""
        return self.socket_path.name

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Bind a fresh socket (removing a stale one first) and serve."""
        await self.stop(grace=0)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((device_plugin_handler(self.plugin),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server
        self._inode = self._stat_inode()
        log.info(
            "device plugin serving",
            extra={"resource": self.plugin.resource_name, "socket": str(self.socket_path)},
        )

    def socket_intact(self) -> bool:
        """False when our socket file vanished or another file took its place."""
        return self._inode is not None and self._stat_inode() == self._inode

    async def stop(self, grace: float = 0.5) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop(grace)
        if self._inode is not None and self._stat_inode() == self._inode:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        self._inode = None

    def _stat_inode(self) -> int | None:
        try:
            return os.stat(self.socket_path).st_ino
        except FileNotFoundError:
            return None
