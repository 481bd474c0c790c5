"""Run ``fluence-deviceplugin`` as a real process, and always stop it.

Used by the integration tests and reusable by the demo::

    with DevicePluginProcess(plugin_dir, resources_file) as proc:
        ...
        assert proc.terminate() == 0   # SIGTERM, clean exit
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def short_tempdir(prefix: str = "fdp") -> Path:
    """A directory with a short path: unix socket paths are limited to about 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


class DevicePluginProcess:
    def __init__(
        self,
        plugin_dir: Path,
        resources: Path,
        *,
        capacity: int = 1000,
        http_port: int | None = None,
        poll_interval: float = 0.5,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resources = resources
        self.http_port = http_port if http_port is not None else free_port()
        self.log_path = plugin_dir.parent / f"{plugin_dir.name}.log"
        self.env = {
            **os.environ,
            "FLUENCE_RESOURCES": str(resources),
            "FLUENCE_RESOURCE_CAPACITY": str(capacity),
            "FLUENCE_DEVICE_PLUGIN_DIR": str(plugin_dir),
            "FLUENCE_HTTP_BIND": f"127.0.0.1:{self.http_port}",
            "FLUENCE_POLL_INTERVAL": str(poll_interval),
            "FLUENCE_LOG_FORMAT": "json",
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> DevicePluginProcess:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "deviceplugin"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL after ``timeout``)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> DevicePluginProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
