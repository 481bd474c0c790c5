"""What the binaries share about settings: FLUENCE_* variables, and a ``--help`` that lists them.

Each binary has one settings class derived from :class:`BinarySettings`; its
fields are its environment variables (``FLUENCE_<FIELD>``), so a Deployment
configures it with ``env:`` alone. ``--help`` prints every variable with its
default and description, without reading the cluster or any file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from fluence.serving import EventLoop

ENV_PREFIX = "FLUENCE_"

S = TypeVar("S", bound="BinarySettings")


class BinarySettings(BaseSettings):
    """Fields every fluence binary reads the same way."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    resources: str = Field(
        default="",
        description="Path of the resources config (quantum backends and other non-node "
        "resources); re-read when the file changes. Empty: none.",
    )

    @classmethod
    def environment_help(cls) -> str:
        """One entry per variable: name, default, description."""
        lines = ["environment:"]
        for name, field in cls.model_fields.items():
            default = field.get_default(call_default_factory=True)
            shown = "(empty)" if default in ("", None) else str(default)
            lines.append(f"  {ENV_PREFIX}{name.upper()}  [default: {shown}]")
            if field.description:
                lines.append(f"      {field.description}")
        return "\n".join(lines)


class ServerSettings(BinarySettings):
    """Fields of the binaries that serve HTTP and talk to the API server (extender, webhook)."""

    kubeconfig: str = Field(
        default="",
        description="kubeconfig file; empty: the in-cluster service account in a pod, else "
        "$KUBECONFIG or ~/.kube/config.",
    )
    http2: bool = Field(
        default=True,
        description="With TLS, offer HTTP/2 to clients; false: HTTP/1.1 only, which costs "
        "less CPU per request in Hypercorn (bench/serving.py).",
    )
    event_loop: EventLoop = Field(
        default="uvloop",
        description="Event loop: uvloop (compiled, the fast default) or asyncio (for debugging).",
    )


def command_line(
    settings: type[BinarySettings], prog: str, description: str
) -> argparse.ArgumentParser:
    """An argument parser whose ``--help`` documents the binary's environment."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=settings.environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parse_command_line(
    settings: type[S], prog: str, description: str, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse a binary's command line (only ``--help`` today); exits after printing help."""
    args: Any = command_line(settings, prog, description).parse_args(argv)
    return args  # type: ignore[no-any-return]
