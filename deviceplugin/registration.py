"""Registering a plugin with the kubelet over ``kubelet.sock``."""

from __future__ import annotations

from pathlib import Path

import grpc

from deviceplugin.proto import VERSION, RegistrationStub, pb


class RegistrationError(RuntimeError):
    """The kubelet did not accept a registration; the message says why and what happens next."""


async def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource_name: str,
    options: pb.DevicePluginOptions,
    timeout: float,
) -> None:
    """Call ``Registration.Register``; the plugin must already be serving on ``endpoint``.

    The kubelet dials the endpoint back and opens ListAndWatch before it answers,
    so a success means the kubelet is connected to the plugin.
    """
    request = pb.RegisterRequest(
        version=VERSION, endpoint=endpoint, resource_name=resource_name, options=options
    )
    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
        try:
            await RegistrationStub(channel).Register(request, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise RegistrationError(
                f"kubelet at {kubelet_socket} refused or missed the registration of "
                f"{resource_name} ({e.code().name}: {e.details()}); retrying with backoff"
            ) from None
