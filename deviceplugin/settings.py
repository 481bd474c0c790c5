"""Settings of ``fluence-deviceplugin``, read from ``FLUENCE_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from fluence.settings import BinarySettings


class Settings(BinarySettings):
    """Everything the device plugin process can be told; defaults suit the DaemonSet."""

    resources: str = Field(
        default="/etc/fluence/resources.yaml",
        description="Resources config (the fluence-resources ConfigMap); every type in it is "
        "advertised. A missing file advertises nothing until it appears.",
    )
    resource_capacity: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Devices advertised per resource type on this node. Fluxion does the real "
        "gating, so this only needs to exceed what pods on one node request.",
    )
    device_plugin_dir: Path = Field(
        default=Path("/var/lib/kubelet/device-plugins"),
        description="The kubelet's device plugin directory: kubelet.sock lives there and our "
        "sockets are created there.",
    )
    http_bind: str = Field(
        default="0.0.0.0:9465",
        description="host:port serving /healthz and /metrics for the DaemonSet's probes; "
        "empty disables the HTTP server.",
    )
    poll_interval: float = Field(
        default=0.5,
        gt=0,
        le=5,
        description="Seconds between checks of the sockets (kubelet restarts) and of the "
        "resources config file (ConfigMap updates).",
    )
    register_timeout: float = Field(
        default=5.0,
        gt=0,
        description="Seconds one Register call to the kubelet may take before it is retried.",
    )
    max_backoff: float = Field(
        default=4.0,
        gt=0,
        description="Upper bound, in seconds, of the delay between failed registration attempts.",
    )
    withdraw_grace: float = Field(
        default=0.5,
        ge=0,
        description="Seconds a removed resource keeps its stream open after reporting its "
        "devices Unhealthy, so the kubelet sees the change before the socket goes away.",
    )
