"""Creating the Binding (pods/binding) with the allocation annotations."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduler_extender.scheduling import BindConflict, BindError


class NullBinder:
    """Binds nothing and knows no placements: for benchmarks and tests without an API server."""

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        return None

    def node_of(self, namespace: str, name: str) -> str | None:
        return None


class ApiBinder:
    """POSTs ``pods/{name}/binding`` with a ``metadata.uid`` precondition."""

    def __init__(self, api_client: Any, timeout: float = 20.0) -> None:
        self.api = api_client
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        m, url, headers, data, _ = self.api.param_serialize(
            method,
            path,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(
            m, url, header_params=headers, body=data, _request_timeout=self.timeout
        )
        raw = resp.response
        try:
            return raw.status, raw.data or b""
        finally:
            raw.release_conn()

    def bind(
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
        try:
            status, data = self._call(
                "POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body
            )
        except Exception as exc:  # noqa: BLE001 - transport errors become a bind error
            raise BindError(f"the API server could not be reached: {exc}") from exc
        if status == 409:
            raise BindConflict()
        if status >= 300:
            raise BindError(f"HTTP {status}: {_message(data)}")

    def node_of(self, namespace: str, name: str) -> str | None:
        try:
            status, data = self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except Exception:  # noqa: BLE001
            return None
        if status != 200:
            return None
        node = json.loads(data).get("spec", {}).get("nodeName")
        return str(node) if node else None


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return data[:300].decode(errors="replace")
