"""A stand-in for IBM's Qiskit Runtime service and its IAM token endpoint, serving what
QRMI's ``qiskit-runtime-service`` type calls to acquire and release a resource.

It exists only because no real tool does: no quantum service is reachable from the
machines the tests run on, and QRMI ships no local emulator. It replaces only that
remote service; ``qrmi`` and its client are the real ones. It is a session service:
an acquisition is a session, and a leaked acquisition is a session left open, which
is what the tests look for.

What QRMI's client sends (``src/ibm/qiskit_runtime_service.rs`` and
``dependencies/quantum_compute_client`` in qiskit-community/qrmi):

- ``POST /identity/token`` (form ``grant_type``, ``apikey``) → ``access_token``,
  ``expiration``, ``expires_in``; the other calls carry ``Authorization: Bearer``;
- ``POST /sessions`` (``backend``, ``mode``, ``max_ttl``) → the session (``acquire``);
- ``GET /sessions/{id}`` → the session with its TTLs (``acquire`` given a token);
- ``GET /jobs?pending=true&session_id=...`` → the session's pending jobs (``release``);
- ``PATCH /sessions/{id}`` (``accepting_jobs: false``) closes a session with no
  pending job, ``DELETE /sessions/{id}/close`` one with (``release``).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_TTL = 28800


@dataclass
class Session:
    id: str
    backend: str
    open: bool = True


@dataclass
class QiskitRuntime:
    """The service's state: its API key, the tokens it gave, the sessions."""

    api_key: str
    tokens: set[str] = field(default_factory=set)
    sessions: dict[str, Session] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def open_sessions(self) -> list[Session]:
        with self.lock:
            return [s for s in self.sessions.values() if s.open]

    def serve(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> tuple[HTTPStatus, Any]:
        with self.lock:
            if method == "POST" and path == "/identity/token":
                form = dict(urllib.parse.parse_qsl(body.decode()))
                if form.get("apikey") != self.api_key:
                    self.refused.append(path)
                    return HTTPStatus.BAD_REQUEST, {"errorMessage": "invalid api key"}
                token = uuid.uuid4().hex
                self.tokens.add(token)
                now = int(time.time())
                return HTTPStatus.OK, {
                    "access_token": token,
                    "expiration": now + 3600,
                    "expires_in": 3600,
                }
            if headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
                self.refused.append(path)
                return HTTPStatus.UNAUTHORIZED, {"errors": [{"message": "not authorized"}]}
            parts = [p for p in path.split("/") if p]
            if method == "POST" and parts == ["sessions"]:
                request = json.loads(body or b"{}")
                session = Session(uuid.uuid4().hex, str(request.get("backend", "")))
                self.sessions[session.id] = session
                return HTTPStatus.OK, self._document(session)
            if method == "GET" and parts == ["jobs"]:
                return HTTPStatus.OK, {"jobs": [], "count": 0, "offset": 0, "limit": 200}
            if len(parts) >= 2 and parts[0] == "sessions" and parts[1] in self.sessions:
                session = self.sessions[parts[1]]
                if method == "GET" and len(parts) == 2:
                    return HTTPStatus.OK, self._document(session)
                if (
                    method == "PATCH"
                    and len(parts) == 2
                    or method == "DELETE"
                    and parts[2:] == ["close"]
                ):
                    session.open = False
                    return HTTPStatus.NO_CONTENT, None
            return HTTPStatus.NOT_FOUND, {"errors": [{"message": f"no {method} {path}"}]}

    @staticmethod
    def _document(session: Session) -> dict[str, Any]:
        return {
            "id": session.id,
            "backend_name": session.backend,
            "mode": "dedicated",
            "state": "open" if session.open else "closed",
            "accepting_jobs": session.open,
            "max_ttl": MAX_TTL,
            "active_ttl": MAX_TTL if session.open else 0,
        }


class QiskitRuntimeStandIn:
    """The service on ``host``, a free port, in a thread: ``with QiskitRuntimeStandIn(...)``."""

    def __init__(self, service: QiskitRuntime, host: str = "127.0.0.1") -> None:
        self.service = service

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                query = dict(urllib.parse.parse_qsl(url.query))
                status, answer = service.serve(self.command, url.path, query, self.headers, body)
                data = b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                if answer is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> QiskitRuntimeStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
