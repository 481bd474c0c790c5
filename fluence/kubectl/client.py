"""Reaching the extender's HTTP endpoints from a workstation.

Three ways, in the order the CLI tries them:

* ``--url http://host:port``: straight to the extender (tests, a local run, or
  after ``kubectl -n kube-system port-forward deploy/fluence-scheduler 8888``);
* ``--port-forward``: runs that ``kubectl port-forward`` itself for the call
  (works with the plain manifests, where the extender listens on the pod's
  loopback only);
* otherwise the API server's service proxy,
  ``/api/v1/namespaces/<ns>/services/http:fluence-extender:8888/proxy/<path>``,
  authenticated with the user's kubeconfig (needs the chart's extender Service).
"""

from __future__ import annotations

import contextlib
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

from fluence.kube_client import api_client

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_SERVICE = "http:fluence-extender:8888"
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


class ServiceProxyTransport:
    """Through the API server's service proxy, with the user's kubeconfig credentials."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        service: str = DEFAULT_SERVICE,
    ) -> None:
        try:
            self.api = api_client(kubeconfig, context=context)
        except Exception as exc:  # the client raises several unrelated types for bad configs
            raise ExtenderUnreachable(
                f"cannot load the kubeconfig ({kubeconfig or '$KUBECONFIG or ~/.kube/config'}): "
                f"{exc}; pass --kubeconfig, or --url to reach the extender directly"
            ) from exc
        self.prefix = f"/api/v1/namespaces/{namespace}/services/{service}/proxy"

    def request(
        self, method: str, path: str, params: dict[str, str] | None = None, body: bytes = b""
    ) -> Reply:
        from kubernetes.client.exceptions import ApiException

        full = self.prefix + path
        try:
            m, url, headers, _, _ = self.api.param_serialize(
                method,
                full,
                query_params=list((params or {}).items()),
                # A YAML content type makes the client send the bytes as they are (the
                # extender reads a jobspec as YAML, and JSON is YAML).
                header_params={"Accept": "application/json", "Content-Type": "application/yaml"},
                auth_settings=["BearerToken"],
            )
            resp = self.api.call_api(
                m, url, header_params=headers, body=body or None, _request_timeout=TIMEOUT
            )
            raw = resp.response
            return Reply(raw.status, raw.data or b"")
        except ApiException as exc:
            return Reply(
                int(exc.status or 0),
                (exc.body or b"") if isinstance(exc.body, bytes) else str(exc.body or "").encode(),
            )
        except Exception as exc:  # urllib3 connection errors come in many types
            raise ExtenderUnreachable(
                f"cannot reach the API server's proxy to the extender ({full}): {exc}; "
                "use --port-forward or --url"
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

    def match(self, jobspec: bytes) -> dict[str, Any]:
        doc: dict[str, Any] = self._json(
            self.transport.request("POST", "/match", body=jobspec), "match"
        )
        return doc
