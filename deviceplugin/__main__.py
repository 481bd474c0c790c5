"""``fluence-deviceplugin``: advertise ``fluxion.flux-framework.org/<type>`` on this node.

Runs as the DaemonSet ``fluence-deviceplugin`` with the kubelet's device plugin
directory mounted. For every resource type in the resources config it serves
a kubelet device plugin on ``<dir>/fluence-<type>.sock`` advertising
``FLUENCE_RESOURCE_CAPACITY`` interchangeable devices, and registers it with
the kubelet. It follows ConfigMap updates and kubelet restarts without
restarting itself, and stops cleanly (sockets removed) on SIGTERM.

Environment (see :class:`deviceplugin.settings.Settings`):

- ``FLUENCE_RESOURCES`` (default ``/etc/fluence/resources.yaml``)
- ``FLUENCE_RESOURCE_CAPACITY`` (default 1000)
- ``FLUENCE_DEVICE_PLUGIN_DIR`` (default ``/var/lib/kubelet/device-plugins``)
- ``FLUENCE_HTTP_BIND`` (default ``0.0.0.0:9465``; ``/healthz``, ``/metrics``; empty: off)
- ``FLUENCE_POLL_INTERVAL``, ``FLUENCE_REGISTER_TIMEOUT``, ``FLUENCE_MAX_BACKOFF``,
  ``FLUENCE_WITHDRAW_GRACE``

Example, against a local stand-in kubelet::

    FLUENCE_RESOURCES=examples/resources.yaml FLUENCE_DEVICE_PLUGIN_DIR=/tmp/dp \\
        FLUENCE_HTTP_BIND=127.0.0.1:9465 fluence-deviceplugin
"""

from __future__ import annotations

import asyncio
import logging
import signal

from deviceplugin.health import create_app
from deviceplugin.manager import PluginManager
from deviceplugin.metrics import PluginMetrics
from deviceplugin.settings import Settings
from fluence import serving, telemetry
from fluence.settings import parse_command_line

log = logging.getLogger("deviceplugin")


async def _run_without_http(manager: PluginManager) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(manager.run())
    await stop.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def serve(settings: Settings) -> None:
    manager = PluginManager(settings)
    manager.metrics = PluginMetrics(manager.devices_advertised)
    log.info(
        "starting",
        extra={
            "resources": str(settings.resources),
            "device_plugin_dir": str(settings.device_plugin_dir),
            "capacity": settings.resource_capacity,
        },
    )
    if settings.http_bind:
        await serving.serve_app(create_app(manager), settings.http_bind, background=[manager.run])
    else:
        await _run_without_http(manager)
    log.info("stopped")


def main(argv: list[str] | None = None) -> None:
    parse_command_line(
        Settings,
        "fluence-deviceplugin",
        "Advertise fluxion.flux-framework.org/<type> to this node's kubelet, one device plugin "
        "per resource type in the resources config.",
        argv,
    )
    telemetry.setup("fluence-deviceplugin")
    asyncio.run(serve(Settings()))


if __name__ == "__main__":
    main()
