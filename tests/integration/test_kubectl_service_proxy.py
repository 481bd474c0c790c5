"""``kubectl fluence`` without --url goes through the API server's service proxy.

A stand-in API server on loopback records the requests; the CLI reaches it with
a kubeconfig and a bearer token, as it would a real cluster.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from fluence.kubectl import cli
from tests.unit.fluence.test_kubectl import STATE

PROXY = "/api/v1/namespaces/kube-system/services/http:fluence-extender:8888/proxy"


class ApiServer(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str, bytes]] = []

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        ApiServer.seen.append(("GET", self.path, self.headers.get("authorization", ""), b""))
        self._answer(json.dumps(STATE).encode())

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        ApiServer.seen.append(("POST", self.path, self.headers.get("authorization", ""), body))
        doc = {"status": "busy", "message": "does not fit now", "nodes": {}, "vertices": []}
        self._answer(json.dumps(doc).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    ApiServer.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "u", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_status_and_match_go_through_the_service_proxy(kubeconfig: Path, tmp_path: Path) -> None:
    out = io.StringIO()
    args = cli.parser().parse_args(["--kubeconfig", str(kubeconfig), "status", "-o", "json"])
    assert cli.run(args, out) == 0
    assert json.loads(out.getvalue())["totals"]["nodes"]["core"]["allocated"] == 3500
    spec = tmp_path / "job.yaml"
    spec.write_text("version: 9999\nresources: []\n")
    args = cli.parser().parse_args(["--kubeconfig", str(kubeconfig), "match", str(spec)])
    assert cli.run(args, io.StringIO()) == cli.EXIT_BUSY
    (get, post) = ApiServer.seen
    assert get[:3] == ("GET", PROXY + "/state", "Bearer secret-token")
    assert post[:3] == ("POST", PROXY + "/match", "Bearer secret-token")
    assert post[3] == spec.read_bytes()
