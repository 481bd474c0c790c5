"""Settings of the fluence-extender binary, read from FLUENCE_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from fluence.serving import EventLoop


class ExtenderSettings(BaseSettings):
    """Everything the extender can be told; each field's env var is FLUENCE_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="FLUENCE_", extra="ignore")

    bind: str = Field(
        default="127.0.0.1:8888", description="host:port the HTTP(S) server listens on."
    )
    tls_cert: str = Field(
        default="", description="PEM certificate file; with tls_key, serve HTTPS."
    )
    tls_key: str = Field(default="", description="PEM private key file for tls_cert.")
    resources: str = Field(
        default="",
        description="Path of the resources config (virtual backends); empty = classical only.",
    )
    match_policy: str = Field(
        default="first", description="Fluxion match policy (first, low, high, ...)."
    )
    kubeconfig: str = Field(
        default="", description="kubeconfig file; empty = in-cluster service account."
    )
    scheduler_name: str = Field(
        default="fluence", description="spec.schedulerName of the pods this extender places."
    )
    unbound_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds an allocation made at filter may stay unbound before it is released.",
    )
    http2: bool = Field(
        default=True,
        description=(
            "With TLS, offer HTTP/2 to kube-scheduler; false: HTTP/1.1 only, which costs "
            "less CPU per call in Hypercorn (bench/serving.py)."
        ),
    )
    event_loop: EventLoop = Field(
        default="uvloop",
        description="Event loop: uvloop (compiled, the fast default) or asyncio (for debugging).",
    )
    bind_concurrency: int = Field(
        default=16,
        gt=0,
        description=(
            "Bindings sent to the API server at once, each on its own kept-alive connection; "
            "more wait for a free one."
        ),
    )
    max_body_bytes: int = Field(
        default=64 << 20,
        gt=0,
        description="Largest request body accepted, in bytes (larger: HTTP 413).",
    )
    expire_interval: float = Field(
        default=5.0, gt=0, description="Seconds between sweeps that release expired allocations."
    )
