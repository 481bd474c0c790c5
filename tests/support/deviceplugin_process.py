"""Run ``fluence-deviceplugin`` as a real process, and always stop it.

Used by the integration tests and reusable by the demo::

    with DevicePluginProcess(plugin_dir, resources_file) as proc:
        ...
        assert proc.terminate() == 0   # SIGTERM, clean exit
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.processes import StartStop, free_port, terminate


def short_tempdir(prefix: str = "fdp") -> Path:
    """A directory with a short path: unix socket paths are limited to about 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short-path temporary directory (see ``short_tempdir``), removed afterwards."""
    d = short_tempdir()
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class DevicePluginProcess(StartStop):
    def __init__(
        self,
        plugin_dir: Path,
        resources: Path,
        *,
        capacity: int = 1000,
        http_port: int | None = None,
        poll_interval: float = 0.5,
        extra_env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resources = resources
        self.http_port = http_port if http_port is not None else free_port()
        self.log_path = log_path or plugin_dir.parent / f"{plugin_dir.name}.log"
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
        return terminate(self.proc, timeout)

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGKILL the process if it is still running (``with`` exit)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
