"""A fake kubelet for the device plugin API (``v1beta1``), in Python on ``grpc.aio``.

Why it exists: the nodes of the local control plane are fake, so no kubelet
would register fluence's device plugin, follow its device lists or call
Allocate. This class plays that part, for the testbed (through the threaded
wrapper :class:`testbed.deviceplugins.DevicePluginRegistry`, which turns
device lists into node capacity) and for the device plugin's own tests. The
real kubelet's device manager is exercised separately, by
``tests/integration/test_deviceplugin_go_peer.py`` (a Go program built from
the kubelet's code); this fake only has to behave like it where fluence's
plugin can tell the difference:

- it serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock`` and checks the
  request (version ``v1beta1``, a domain-qualified extended resource name);
- before answering, it dials the plugin's endpoint back and asks for its
  options (so a plugin that does not serve yet fails to register), then
  follows its ``ListAndWatch`` stream, keeping every list received;
- on start it removes every socket in the directory, as a starting kubelet
  does, so plugins must notice and register again (``wipe_on_start=False``
  leaves them).

Tests drive a registered plugin with :meth:`FakeKubelet.allocate` and
:meth:`FakeKubelet.preferred`, and wait for conditions with
:meth:`FakeKubelet.wait_for`. Use it as an async context manager so that it
always stops::

    async with FakeKubelet(plugin_dir) as kubelet:
        await kubelet.wait_for(lambda: "fluxion.flux-framework.org/qpu" in kubelet.endpoints)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

# The testbed forks component processes (fork + exec, see processes.py) while gRPC's
# threads run. gRPC's fork handlers then restart its threads in the child before
# exec, which can crash the child; the children exec at once and need none of
# that, so the handlers stay off unless the caller chose otherwise.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402 - after the fork-support setting above

from deviceplugin.proto import (  # noqa: E402
    HEALTHY,
    KUBELET_SOCKET,
    VERSION,
    DevicePluginStub,
    pb,
    registration_handler,
)

log = logging.getLogger(__name__)

DIAL_TIMEOUT_S = 10.0
"""How long Register waits for the plugin's endpoint to accept a connection."""

# A domain-qualified name outside kubernetes.io, like the kubelet's IsExtendedResourceName.
_EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_extended_resource_name(name: str) -> bool:
    if not _EXTENDED.match(name):
        return False
    domain = name.split("/", 1)[0]
    return "." in domain and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def socket_files(directory: Path) -> list[str]:
    """Names of the sockets in ``directory``, sorted."""
    return sorted(e.name for e in directory.iterdir() if stat.S_ISSOCK(e.lstat().st_mode))


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
    """The kubelet's side of the device plugin API on ``<plugin_dir>/kubelet.sock``.

    ``on_change`` is called (on the event loop) after every registration, device
    list and ended stream, for callers that watch from another thread.
    """

    def __init__(
        self,
        plugin_dir: Path,
        *,
        wipe_on_start: bool = True,
        on_change: Callable[[FakeKubelet], None] | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / KUBELET_SOCKET
        self.wipe_on_start = wipe_on_start
        self.on_change = on_change
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
        """Serve Registration on kubelet.sock (a stale socket file there is replaced)."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        if self.wipe_on_start:
            wipe_sockets(self.plugin_dir)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((registration_handler(self),))
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

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

    def healthy_devices(self) -> dict[str, int]:
        """Healthy devices per registered resource, as a kubelet would put in node capacity.

        A plugin whose stream ended counts 0, as the kubelet reports then.
        """
        return {n: 0 if ep.stream_ended else ep.healthy for n, ep in self.endpoints.items()}

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
        """Accept a plugin: check the request, dial the plugin back, follow its device list."""
        channel, stub, options = await self._dial_back(request, context)
        ep = Endpoint(request.resource_name, self.plugin_dir / request.endpoint, channel, stub)
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
            self._notify()
        log.info(
            "device plugin registered",
            extra={"resource": request.resource_name, "endpoint": request.endpoint},
        )
        return pb.Empty()

    async def _dial_back(
        self, request: pb.RegisterRequest, context: Any
    ) -> tuple[Any, DevicePluginStub, pb.DevicePluginOptions]:
        """Validate a Register call and dial the plugin, as the kubelet does before answering.

        Aborts the call with INVALID_ARGUMENT for another API version or a resource
        name that is not a domain-qualified extended resource, and with UNAVAILABLE
        when the plugin's socket does not answer.
        """

        async def reject(code: grpc.StatusCode, message: str) -> None:
            self.rejected.append(request.resource_name)
            await context.abort(code, message)

        if request.version != VERSION:
            await reject(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"device plugin API version {request.version!r} is not supported; use {VERSION}",
            )
        if not is_extended_resource_name(request.resource_name):
            await reject(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the ResourceName {request.resource_name!r} is invalid",
            )
        endpoint = self.plugin_dir / request.endpoint
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

    async def _follow(self, ep: Endpoint) -> None:
        call = ep.stub.ListAndWatch()
        try:
            async for response in call:
                async with self._changed:
                    ep.lists.append([(d.ID, d.health) for d in response.devices])
                    self._notify()
        except grpc.aio.AioRpcError:
            pass
        finally:
            async with self._changed:
                ep.stream_ended = True
                self._notify()

    def _notify(self) -> None:
        """Wake every waiter; call with ``_changed`` held."""
        self._changed.notify_all()
        if self.on_change is not None:
            self.on_change(self)

    async def _close_endpoint(self, ep: Endpoint) -> None:
        if ep.task is not None:
            ep.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ep.task
        await ep.channel.close()
        self.closed_endpoints.append(ep)


__all__ = [
    "Endpoint",
    "FakeKubelet",
    "Registration",
    "is_extended_resource_name",
    "socket_files",
    "wipe_sockets",
]
