"""Child processes that never outlive their parent and leave a log behind.

Control-plane components run as real processes. Each one gets its own process
group (so a terminal's Ctrl-C reaches only the harness, which then stops them in
order) and ``PR_SET_PDEATHSIG`` (so the kernel kills them when the harness dies,
even by SIGKILL). Their output goes to a log file whose tail is quoted when they
fail to start.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self, TextIO

PR_SET_PDEATHSIG = 1
DEFAULT_GRACE_S = 10.0
LOG_TAIL_LINES = 40

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class ProcessStartError(RuntimeError):
    """A component exited or never became ready; the message holds its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect; then nobody would kill us.
    if os.getppid() != parent_pid:
        os._exit(1)


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def terminate(popen: subprocess.Popen[bytes], grace_s: float = DEFAULT_GRACE_S) -> int:
    """SIGTERM ``popen`` if it is still running, SIGKILL it after ``grace_s``; always reaps.

    Returns the exit code.
    """
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    return popen.returncode


class StartStop:
    """Base for things run as ``with thing:``: enter calls ``start()``, exit calls ``stop()``."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ManagedProcess:
    """One running component: its Popen, its log file and how to stop it."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with open(log_path, "ab") as log:
            # Thread note: PDEATHSIG fires when the *thread* that forked exits, so
            # components should be started from a long-lived thread (normally main).
            self.popen = subprocess.Popen(  # noqa: S603 - argv is built by the harness
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(parent),  # noqa: PLW1509
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)

    def start_error(self, reason: str) -> ProcessStartError:
        """An error naming the component, what went wrong and its log tail."""
        return ProcessStartError(
            f"{self.name} {reason}; full log: {self.log_path}\n"
            f"--- last lines of {self.log_path.name} ---\n{self.log_tail()}"
        )

    def check_running(self) -> None:
        """Raise with the log tail if the process has already exited."""
        code = self.popen.poll()
        if code is not None:
            raise self.start_error(f"exited with code {code} during startup")

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``; always reaps.

        Returns the exit code.
        """
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.popen.wait()
        # Helpers the component forked into its group go too.
        self._signal_group(signal.SIGKILL)
        return self.popen.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


def wait_reporting(
    proc: subprocess.Popen[str], what: str, log: TextIO, interval_s: float = 15.0
) -> int:
    """Wait for a long build step, printing ``what`` with the time taken every ``interval_s``.

    An interrupt (Ctrl-C) kills the step before it propagates. Returns the exit code.
    """
    started = time.monotonic()
    try:
        while True:
            try:
                return proc.wait(timeout=interval_s)
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - started
                print(f"{what}: still building, {elapsed:.0f}s", file=log, flush=True)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def wait_until(
    probe: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    process: ManagedProcess | None = None,
    interval_s: float = 0.05,
) -> None:
    """Poll ``probe()`` until it returns True; fail fast if ``process`` exits."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        if process is not None:
            process.check_running()
        try:
            if probe():
                return
        except Exception as exc:  # noqa: BLE001 - any probe failure means "not yet"
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            if process is not None:
                raise process.start_error(f"was not {what} within {timeout_s:.0f}s{detail}")
            raise TimeoutError(f"not {what} within {timeout_s:.0f}s{detail}")
        time.sleep(interval_s)
        interval_s = min(interval_s * 1.5, 0.5)
