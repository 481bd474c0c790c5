"""Spans leave the process over OTLP/HTTP when the standard OTEL_* variable is set.

A child process sets telemetry up with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing
at a collector stand-in served here, places a pod through the real extender
app, and exits; the stand-in decodes what arrived.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

CHILD = """
from opentelemetry import trace
from starlette.testclient import TestClient
from fluence import telemetry
telemetry.setup("fluence-extender")
from scheduler_extender.app import create_app
from tests.unit.scheduler_extender.test_app import Env
from tests.unit.fluence.test_pods import make_node, make_pod
env = Env([make_node("a")])
client = TestClient(create_app(env.scheduler, metrics=False))
pod = make_pod("traced", raw=True)
env.cluster.add(pod)
r = client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["a"]})
assert r.json()["NodeNames"] == ["a"], r.text
trace.get_tracer_provider().shutdown()
"""


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        Collector.received.append((self.path, body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[ThreadingHTTPServer]:
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_filter_and_match_spans_are_exported_with_their_attributes(
    collector: ThreadingHTTPServer,
) -> None:
    port = collector.server_address[1]
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert Collector.received and {p for p, _ in Collector.received} == {"/v1/traces"}
    spans: dict[str, dict[str, Any]] = {}
    service = set()
    for _, body in Collector.received:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for a in rs.resource.attributes:
                if a.key == "service.name":
                    service.add(a.value.string_value)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: a.value for a in s.attributes}
                    spans[s.name] = {"attrs": attrs, "id": s.span_id, "parent": s.parent_span_id}
    assert service == {"fluence-extender"}
    assert {"filter", "match"} <= spans.keys()
    assert spans["filter"]["attrs"]["pod"].string_value == "default/traced"
    assert spans["match"]["attrs"]["status"].string_value == "allocated"
    assert spans["match"]["attrs"]["group"].string_value == "default/traced"
    assert spans["match"]["parent"] == spans["filter"]["id"]
