"""A small JSON client for the harness's own calls to the apiserver.

The harness creates nodes, patches statuses and watches pods with plain JSON,
so it needs neither the generated models nor their field coverage; this keeps
its behaviour independent of the `kubernetes` client version in use.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
DEFAULT_TIMEOUT_S = 30.0

Json = Any


class KubeApiError(RuntimeError):
    """The apiserver answered with a non-2xx status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        super().__init__(f"{method} {path} -> HTTP {status}: {message}")


def client_ssl_context(
    ca_file: str, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """TLS context that trusts ``ca_file`` and presents an optional client certificate."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


class KubeRest:
    """JSON requests against one apiserver with one TLS identity."""

    def __init__(
        self, server: str, context: ssl.SSLContext, headers: Mapping[str, str] | None = None
    ) -> None:
        parsed = urllib.parse.urlsplit(server)
        if parsed.scheme != "https" or parsed.hostname is None:
            raise ValueError(f"server must be an https:// URL, got {server!r}")
        self._server = server
        self._host = parsed.hostname
        self._port = parsed.port or 443
        self._context = context
        self._headers = dict(headers or {})

    def impersonating(self, user: str, group: str | None = None) -> KubeRest:
        """The same client acting as ``user`` (needs the impersonate right, which admin has).

        Tests use it for what a tenant without admin rights can and cannot do.
        """
        headers = {"Impersonate-User": user}
        if group:
            headers["Impersonate-Group"] = group
        return KubeRest(self._server, self._context, headers)

    def _connection(self, timeout_s: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self._host, self._port, context=self._context, timeout=timeout_s
        )

    @staticmethod
    def _url(path: str, query: Mapping[str, str | int] | None) -> str:
        if not query:
            return path
        return f"{path}?{urllib.parse.urlencode(query)}"

    def request(
        self,
        method: str,
        path: str,
        body: Json | None = None,
        *,
        query: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> Json:
        """Send one request and return the decoded JSON answer."""
        url = self._url(path, query)
        conn = self._connection(timeout_s)
        try:
            headers = {"Accept": "application/json", **self._headers}
            payload = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            conn.request(method, url, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read().decode("utf-8", errors="replace")
        finally:
            conn.close()
        if not 200 <= response.status < 300:
            raise KubeApiError(method, url, response.status, data)
        return json.loads(data) if data else None

    def create_or_replace(self, collection: str, body: Json) -> Json:
        """Create ``body`` in ``collection``; when it exists already, replace it."""
        try:
            return self.create(collection, body)
        except KubeApiError as e:
            if e.status != 409:
                raise
            return self.replace(f"{collection}/{body['metadata']['name']}", body)

    def get(self, path: str, **query: str | int) -> Json:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: Json, **query: str | int) -> Json:
        return self.request("POST", path, body, query=query)

    def replace(self, path: str, body: Json) -> Json:
        return self.request("PUT", path, body)

    def merge_patch(self, path: str, body: Json) -> Json:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def delete(self, path: str, **query: str | int) -> Json:
        return self.request("DELETE", path, query=query)

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_s: int = 30,
        on_connect: Callable[[http.client.HTTPSConnection], None] | None = None,
    ) -> Iterator[Json]:
        """Yield watch events (``{"type", "object"}``) until the server ends the watch.

        The server closes the stream after ``timeout_s``; callers loop with the
        last seen resourceVersion. ``on_connect`` receives the connection so
        another thread can close it to end the watch early.
        """
        query: dict[str, str | int] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_s,
        }
        url = self._url(path, query)
        conn = self._connection(timeout_s + 10.0)
        if on_connect is not None:
            on_connect(conn)
        try:
            conn.request("GET", url, headers={"Accept": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise KubeApiError("GET", url, response.status, response.read().decode())
            while True:
                line = response.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()
