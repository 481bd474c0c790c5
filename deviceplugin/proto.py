"""Typed gRPC glue for the kubelet's device plugin API (v1beta1).

The messages and services are declared in :mod:`deviceplugin.api` (exported
here as ``pb``). The service glue below reads the service and method names
from that descriptor, so the RPC paths are the API's
(``/v1beta1.DevicePlugin/Allocate`` and so on), and it stays fully typed.
Both the plugin and the test kubelet use it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from deviceplugin import api as pb

__all__ = [
    "HEALTHY",
    "KUBELET_SOCKET",
    "UNHEALTHY",
    "VERSION",
    "DevicePluginServicer",
    "DevicePluginStub",
    "RegistrationServicer",
    "RegistrationStub",
    "device_plugin_handler",
    "pb",
    "registration_handler",
]

VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
"""File name of the kubelet's registration socket inside the device plugin directory."""

_REGISTRATION = pb.DESCRIPTOR.services_by_name["Registration"]
_DEVICE_PLUGIN = pb.DESCRIPTOR.services_by_name["DevicePlugin"]


def _path(service: ServiceDescriptor, method: str) -> str:
    if method not in service.methods_by_name:
        raise RuntimeError(f"deviceplugin.api declares no {service.full_name}.{method}")
    return f"/{service.full_name}/{method}"


class DevicePluginServicer(Protocol):
    """What a device plugin implements; ``context`` is a ``grpc.aio.ServicerContext``."""

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: Any
    ) -> pb.DevicePluginOptions: ...

    def ListAndWatch(
        self, request: pb.Empty, context: Any
    ) -> AsyncIterator[pb.ListAndWatchResponse]: ...

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse: ...

    async def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse: ...

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse: ...


class RegistrationServicer(Protocol):
    """What the kubelet implements on kubelet.sock."""

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty: ...


def _unary(fn: Callable[..., Awaitable[Any]], req: Any, resp: Any) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
    )


def device_plugin_handler(servicer: DevicePluginServicer) -> Any:
    """A generic handler serving ``servicer`` as ``v1beta1.DevicePlugin``."""
    methods = {
        "GetDevicePluginOptions": _unary(
            servicer.GetDevicePluginOptions, pb.Empty, pb.DevicePluginOptions
        ),
        "ListAndWatch": grpc.unary_stream_rpc_method_handler(
            servicer.ListAndWatch,
            request_deserializer=pb.Empty.FromString,
            response_serializer=pb.ListAndWatchResponse.SerializeToString,
        ),
        "GetPreferredAllocation": _unary(
            servicer.GetPreferredAllocation,
            pb.PreferredAllocationRequest,
            pb.PreferredAllocationResponse,
        ),
        "Allocate": _unary(servicer.Allocate, pb.AllocateRequest, pb.AllocateResponse),
        "PreStartContainer": _unary(
            servicer.PreStartContainer, pb.PreStartContainerRequest, pb.PreStartContainerResponse
        ),
    }
    for name in methods:
        _path(_DEVICE_PLUGIN, name)
    return grpc.method_handlers_generic_handler(_DEVICE_PLUGIN.full_name, methods)


def registration_handler(servicer: RegistrationServicer) -> Any:
    """A generic handler serving ``servicer`` as ``v1beta1.Registration``."""
    _path(_REGISTRATION, "Register")
    return grpc.method_handlers_generic_handler(
        _REGISTRATION.full_name,
        {"Register": _unary(servicer.Register, pb.RegisterRequest, pb.Empty)},
    )


class RegistrationStub:
    """Client of the kubelet's ``v1beta1.Registration`` service on a ``grpc.aio`` channel."""

    def __init__(self, channel: Any) -> None:
        self._register = channel.unary_unary(
            _path(_REGISTRATION, "Register"),
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )

    async def Register(
        self, request: pb.RegisterRequest, *, timeout: float | None = None
    ) -> pb.Empty:
        result: pb.Empty = await self._register(request, timeout=timeout)
        return result


class DevicePluginStub:
    """Client of a plugin's ``v1beta1.DevicePlugin`` service on a ``grpc.aio`` channel."""

    def __init__(self, channel: Any) -> None:
        def unary(method: str, req: Any, resp: Any) -> Any:
            return channel.unary_unary(
                _path(_DEVICE_PLUGIN, method),
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString,
            )

        self._options = unary("GetDevicePluginOptions", pb.Empty, pb.DevicePluginOptions)
        self._preferred = unary(
            "GetPreferredAllocation", pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
        )
        self._allocate = unary("Allocate", pb.AllocateRequest, pb.AllocateResponse)
        self._prestart = unary(
            "PreStartContainer", pb.PreStartContainerRequest, pb.PreStartContainerResponse
        )
        self._list_and_watch = channel.unary_stream(
            _path(_DEVICE_PLUGIN, "ListAndWatch"),
            request_serializer=pb.Empty.SerializeToString,
            response_deserializer=pb.ListAndWatchResponse.FromString,
        )

    async def GetDevicePluginOptions(
        self, *, timeout: float | None = None
    ) -> pb.DevicePluginOptions:
        result: pb.DevicePluginOptions = await self._options(pb.Empty(), timeout=timeout)
        return result

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, *, timeout: float | None = None
    ) -> pb.PreferredAllocationResponse:
        result: pb.PreferredAllocationResponse = await self._preferred(request, timeout=timeout)
        return result

    async def Allocate(
        self, request: pb.AllocateRequest, *, timeout: float | None = None
    ) -> pb.AllocateResponse:
        result: pb.AllocateResponse = await self._allocate(request, timeout=timeout)
        return result

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, *, timeout: float | None = None
    ) -> pb.PreStartContainerResponse:
        result: pb.PreStartContainerResponse = await self._prestart(request, timeout=timeout)
        return result

    def ListAndWatch(self) -> Any:
        """The stream call: ``async for r in stub.ListAndWatch()``; ``.cancel()`` ends it."""
        return self._list_and_watch(pb.Empty())
