"""``kubectl fluence --port-forward`` runs ``kubectl port-forward`` for the call and stops it.

A stand-in ``kubectl`` on PATH prints the line the real one prints and stays up;
the local port it names is served by a stand-in extender.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest

from fluence.kubectl import cli
from fluence.kubectl.client import ExtenderUnreachable, port_forward
from tests.unit.fluence.test_kubectl import STATE


class Extender(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        body = json.dumps(STATE).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def extender_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Extender)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def fake_kubectl(bindir: Path, record: Path, script_body: str) -> None:
    bindir.mkdir(exist_ok=True)
    exe = bindir / "kubectl"
    exe.write_text(f'#!/bin/sh\necho "$$ $*" > {record}\n{script_body}\n')
    exe.chmod(0o755)


def test_port_forward_reaches_the_extender_and_is_stopped(
    tmp_path: Path, extender_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "args"
    fake_kubectl(
        tmp_path / "bin",
        record,
        f'echo "Forwarding from 127.0.0.1:{extender_port} -> 8888"\nexec sleep 60',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    out = io.StringIO()
    args = cli.parser().parse_args(["--port-forward", "--context", "prod", "status", "-o", "json"])
    assert cli.run(args, out) == 0
    assert json.loads(out.getvalue())["totals"]["backends"]["allocated"] == 1
    pid, *argv = record.read_text().split()
    assert argv == [
        "--context",
        "prod",
        "-n",
        "kube-system",
        "port-forward",
        "deploy/fluence-scheduler",
        ":8888",
    ]
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == "zombie"


def test_port_forward_that_fails_says_what_kubectl_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kubectl(
        tmp_path / "bin",
        tmp_path / "args",
        'echo "error: deployments.apps \\"fluence-scheduler\\" not found"\nexit 1',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ExtenderUnreachable, match="fluence-scheduler.*not found"), port_forward():
        pass
