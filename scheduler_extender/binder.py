"""Creating the Binding (pods/binding) with the allocation annotations.

Bindings are POSTed from the event loop with aiohttp, over a pool of kept-alive
connections. Through the kubernetes client's blocking urllib3 path each bind
needed a worker thread, which cost more CPU per Binding than the POST itself
and took the GIL away from the filter decisions on the loop. The kubernetes client still loads the
credentials (kubeconfig or in-cluster), and its token refresh hook is asked
for the token on every request, so rotated service-account tokens are used.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import msgspec

from fluence.pods import decode_pod, decode_status
from scheduler_extender.scheduling import (
    BindConflict,
    BindError,
    BindOutcomeUnknown,
    ReleaseRefused,
)

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"


class NullBinder:
    """Binds nothing and knows no placements: for benchmarks and tests without an API server."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        return None

    async def node_of(self, namespace: str, name: str) -> str | None:
        return None

    async def release(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        return None


def ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of a kubernetes ``Configuration`` (CA, client certificate, verify)."""
    ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl or configuration.assert_hostname is False:
        ctx.check_hostname = False
    if not configuration.verify_ssl:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class ApiBinder:
    """POSTs ``pods/{name}/binding`` with a ``metadata.uid`` precondition.

    At most ``connections`` requests are in flight; more wait for a free
    connection. The session is opened on the running loop at the first call.
    """

    def __init__(self, configuration: Any, *, connections: int = 16, timeout: float = 20.0) -> None:
        self.configuration = configuration
        self.base = str(configuration.host).rstrip("/")
        self.connections = connections
        self.timeout = timeout
        self._ssl = ssl_context(configuration) if self.base.startswith("https:") else None
        self._server_hostname: str | None = configuration.tls_server_name or None
        self._proxy: str | None = configuration.proxy or None
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.connections, ssl=self._ssl if self._ssl is not None else False
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.configuration.auth_settings().get("BearerToken")
        if token and token.get("value"):
            headers["Authorization"] = token["value"]
        return headers

    async def _call(
        self, method: str, path: str, body: bytes | None = None, content_type: str = JSON
    ) -> tuple[int, bytes]:
        session = self._open()
        async with session.request(
            method,
            self.base + path,
            data=body,
            headers=self._headers(content_type if body is not None else None),
            server_hostname=self._server_hostname,
            proxy=self._proxy,
        ) as resp:
            return resp.status, await resp.read()

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "annotations": dict(annotations),
        }
        if uid:
            metadata["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        try:
            status, data = await self._call("POST", path, msgspec.json.encode(body))
        except aiohttp.ClientConnectorError as exc:
            # No connection was made, so nothing was sent: the pod is not bound.
            raise BindError(f"the API server could not be reached: {exc!r}") from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            # The request may have reached the API server before the connection went.
            raise BindOutcomeUnknown(f"no answer from the API server: {exc!r}") from exc
        if status == 409:
            raise BindConflict(_message(data))
        if status >= 500:
            raise BindOutcomeUnknown(f"HTTP {status}: {_message(data)}")
        if status >= 300:
            raise BindError(f"HTTP {status}: {_message(data)}")

    async def node_of(self, namespace: str, name: str) -> str | None:
        try:
            status, data = await self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise BindOutcomeUnknown(f"cannot read the pod back: {exc!r}") from exc
        if status == 404:
            return None
        if status != 200:
            raise BindOutcomeUnknown(f"cannot read the pod back: HTTP {status}")
        try:
            return decode_pod(data).spec.node_name or None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise BindOutcomeUnknown(f"cannot read the pod back: {exc}") from exc

    async def release(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        """PATCH the pod with the queue's release (:func:`fluence.pinning.release_ops`).

        ReleaseRefused when the API server says no (the pod is gone, recreated, its
        gates changed); BindOutcomeUnknown when no answer says whether it was applied.
        """
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            status, data = await self._call(
                "PATCH", path, msgspec.json.encode(list(ops)), JSON_PATCH
            )
        except aiohttp.ClientConnectorError as exc:
            raise ReleaseRefused(f"the API server could not be reached: {exc!r}") from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise BindOutcomeUnknown(f"no answer from the API server: {exc!r}") from exc
        if status >= 500:
            raise BindOutcomeUnknown(f"HTTP {status}: {_message(data)}")
        if status >= 300:
            raise ReleaseRefused(f"HTTP {status}: {_message(data)}")


def _message(data: bytes) -> str:
    try:
        return decode_status(data).message[:300]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return data[:300].decode(errors="replace")
