"""The device plugin's metrics (exported at /metrics through OpenTelemetry)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Observation

from fluence import telemetry


class PluginMetrics:
    """Registrations, server restarts and devices advertised, labelled by resource name."""

    def __init__(self, devices_advertised: Callable[[], dict[str, int]]) -> None:
        meter = telemetry.meter("fluence.deviceplugin")
        self.registrations = meter.create_counter(
            "fluence_deviceplugin_registrations",
            description="Register calls to the kubelet, by resource and result (ok/error); "
            "kind=first or kind=again (after a kubelet restart or a socket loss).",
        )
        self.server_restarts = meter.create_counter(
            "fluence_deviceplugin_server_restarts",
            description="Plugin gRPC servers restarted because their socket vanished or the "
            "kubelet restarted.",
        )
        self.config_reloads = meter.create_counter(
            "fluence_deviceplugin_config_reloads",
            description="Resources config changes: result=ok when a changed set of types was "
            "applied, result=error when a changed file could not be used.",
        )

        def observe(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, {"resource": r}) for r, n in devices_advertised().items()]

        meter.create_observable_gauge(
            "fluence_deviceplugin_devices_advertised",
            callbacks=[observe],
            description="Healthy devices advertised per resource (0 while withdrawn).",
        )
