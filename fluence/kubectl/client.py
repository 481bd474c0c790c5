"""Reaching the extender's HTTP endpoints from a workstation.

Two ways:

* ``--url http://host:port``: straight to the extender (tests, a local run, or
  after ``kubectl -n kube-system port-forward deploy/fluence-scheduler 8888``);
* otherwise (``--port-forward``) the CLI runs that ``kubectl port-forward``
  itself for the call. The API server authorises it (``pods/portforward``), and
  it arrives on the pod's loopback, where the extender needs no token.

The API server's service proxy is not offered: it drops the caller's
credentials, and the extender answers nobody beyond its pod without a token.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_TARGET = "deploy/fluence-scheduler"
EXTENDER_PORT = 8888
TIMEOUT = 30.0


class ExtenderUnreachable(RuntimeError):
    """The extender could not be asked; the message says how to reach it instead."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> Any:
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError as exc:
            text = self.body[:200].decode(errors="replace")
            raise ExtenderUnreachable(
                f"the extender answered HTTP {self.status} with something that is not JSON: "
                f"{text!r}; is --url pointing at fluence-extender?"
            ) from exc


class Transport(Protocol):
    def request(
        self, method: str, path: str, params: dict[str, str] | None = None, body: bytes = b""
    ) -> Reply: ...


class DirectTransport:
    """Plain HTTP(S) to a URL the user gave (or a port-forward opened)."""

    def __init__(self, url: str, *, verify: bool = True) -> None:
        self.url = url.rstrip("/")
        self.verify = verify

    def request(
        self, method: str, path: str, params: dict[str, str] | None = None, body: bytes = b""
    ) -> Reply:
        url = self.url + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, data=body or None, method=method)
        context = None
        if url.startswith("https:") and not self.verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT, context=context) as r:
                return Reply(r.status, r.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read())
        except (OSError, ValueError) as exc:
            raise ExtenderUnreachable(
                f"cannot reach the extender at {self.url}: {exc}; check --url, or drop it to go "
                "through the API server, or use --port-forward"
            ) from exc


_FORWARDING = re.compile(rb"Forwarding from 127\.0\.0\.1:(\d+)")


@contextlib.contextmanager
def port_forward(
    target: str = DEFAULT_TARGET,
    namespace: str = DEFAULT_NAMESPACE,
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout: float = 20.0,
) -> Iterator[str]:
    """Run ``kubectl port-forward`` to the extender for the duration; yields its local URL."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise ExtenderUnreachable("--port-forward needs kubectl on PATH; or use --url")
    cmd = [kubectl, "-n", namespace, "port-forward", target, f":{EXTENDER_PORT}"]
    if kubeconfig:
        cmd[1:1] = ["--kubeconfig", kubeconfig]
    if context:
        cmd[1:1] = ["--context", context]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        seen = b""
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if not ready:
                break
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
            m = _FORWARDING.search(line)
            if m:
                yield f"http://127.0.0.1:{int(m.group(1))}"
                return
        raise ExtenderUnreachable(
            f"kubectl port-forward {target} in {namespace} did not start: "
            f"{seen.decode(errors='replace').strip() or 'no output'}"
        )
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class ExtenderClient:
    """The extender's read-only API: state, explain, graph, and the what-if match."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def _json(self, reply: Reply, what: str) -> Any:
        doc = reply.json()
        if reply.status != 200:
            msg = doc.get("error") if isinstance(doc, dict) else None
            raise ExtenderUnreachable(
                f"{what}: the extender answered HTTP {reply.status}: {msg or doc}"
            )
        return doc

    def state(self) -> dict[str, Any]:
        doc: dict[str, Any] = self._json(self.transport.request("GET", "/state"), "state")
        return doc

    def explain(self, namespace: str, name: str) -> dict[str, Any]:
        reply = self.transport.request("GET", "/explain", {"pod": f"{namespace}/{name}"})
        doc: dict[str, Any] = self._json(reply, "explain")
        return doc

    def graph(self) -> dict[str, Any]:
        doc: dict[str, Any] = self._json(
            self.transport.request("GET", "/graph", {"format": "jgf"}), "graph"
        )
        return doc

    def plan(self, pods: list[dict[str, Any]]) -> dict[str, Any]:
        body = json.dumps({"pods": pods}).encode()
        doc: dict[str, Any] = self._json(self.transport.request("POST", "/plan", body=body), "plan")
        return doc

    def match(self, jobspec: bytes) -> dict[str, Any]:
        doc: dict[str, Any] = self._json(
            self.transport.request("POST", "/match", body=jobspec), "match"
        )
        return doc
