"""A stand-in for Alice & Bob's Felis cloud API, serving what QRMI's ``alice-bob-felis``
type calls, for the e2e test of ``examples/qrmi``.

It exists only because no real tool does: no quantum service is reachable from the
machines the tests run on, and neither Alice & Bob nor QRMI ship a local emulator of
the Felis API. It replaces only that remote service; the program, ``qrmi`` and its
Felis client are the real ones, unchanged.

What QRMI's client sends (``src/alice_bob/felis.rs`` and
``dependencies/alice_bob_felis_client`` in qiskit-community/qrmi) and what it is given:

- ``POST /v1/jobs/`` with a JSON ``CreateExternalJob`` (``target``, ``inputParams``,
  ``inputDataFormat: HUMAN_QIR``, ``outputDataFormat: HISTOGRAM``) → an ``ExternalJob``
  (``task_start``);
- ``POST /v1/jobs/{id}/input``, multipart with the QIR in the part ``input`` → JSON
  (``task_start``; uploading the input starts the job);
- ``GET /v1/jobs/{id}`` → the ``ExternalJob``, whose last event QRMI maps to a task
  status (``task_status``, ``task_stop``);
- ``GET /v1/jobs/{id}/output`` → the histogram as ``text/plain`` CSV, ``<bits>,<count>``
  per line (``task_result``);
- ``DELETE /v1/jobs/{id}`` → the cancelled ``ExternalJob`` (``task_stop`` of a job
  that has not ended).

Acquire and release are local in QRMI for this type (a random token, nothing sent).
Every request carries HTTP basic credentials: QRMI decodes the API key (base64 of
``user:password``) and the HTTP client encodes it again, so the header is
``Basic <api key>``; other requests get 401. The client joins the endpoint and
``/v1/...`` as strings, so an endpoint ending in ``/`` (as the example's does) sends
``//v1/...``: paths are read with repeated slashes as one.

A started job is ``EXECUTING`` at its first read and ``SUCCEEDED`` at the next, unless
:meth:`Felis.hold` keeps it executing (a backend kept busy) until :meth:`Felis.resume`.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
FINAL = frozenset({"SUCCEEDED", "CANCELLED"})


@dataclass(frozen=True)
class Call:
    """One request as the stand-in received it."""

    method: str
    path: str
    """With repeated slashes collapsed."""
    api_key: str | None
    """The basic credentials presented (base64 of ``user:password``), None without any."""


@dataclass
class FelisJob:
    """A job as Felis keeps it: its request, its input once uploaded, its events."""

    id: str
    target: str
    input_params: dict[str, Any]
    input_data_format: Any
    output_data_format: Any
    input: str | None = None
    events: list[tuple[str, str]] = field(default_factory=list)
    """(type, createdAt) in order; the last one is the job's state."""

    @property
    def state(self) -> str:
        return self.events[-1][0]

    def record(self, event: str) -> None:
        self.events.append((event, datetime.now(UTC).isoformat()))

    def document(self) -> dict[str, Any]:
        """The ``ExternalJob`` QRMI's client deserializes (every field it requires)."""
        return {
            "id": self.id,
            "target": self.target,
            "inputParams": self.input_params,
            "inputDataFormat": self.input_data_format,
            "outputDataFormat": self.output_data_format,
            "userName": "fluence-e2e",
            "userId": "fluence-e2e",
            "organizationName": "fluence-e2e",
            "events": [{"type": t, "createdAt": at} for t, at in self.events],
            "errors": [],
        }


class FelisError(Exception):
    """A request Felis refuses: the status and the ``detail`` it answers with."""

    def __init__(self, status: HTTPStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Felis:
    """The service's state: jobs, the calls made, whether running jobs may finish."""

    def __init__(self, api_key: str, targets: frozenset[str]) -> None:
        self.api_key = api_key
        self.targets = targets
        self.jobs: dict[str, FelisJob] = {}
        self._calls: list[Call] = []
        self._lock = threading.Lock()
        self._held = False

    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def job_states(self) -> dict[str, str]:
        """Each job's state (its last event), by id."""
        with self._lock:
            return {job_id: job.state for job_id, job in self.jobs.items()}

    def clear(self) -> None:
        """Forget every job and call, and let jobs finish."""
        with self._lock:
            self.jobs.clear()
            self._calls.clear()
            self._held = False

    def hold(self) -> None:
        """Keep started jobs executing until :meth:`resume` (the backend stays busy)."""
        with self._lock:
            self._held = True

    def resume(self) -> None:
        with self._lock:
            self._held = False

    def record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    def create_job(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("target"), str):
            raise FelisError(HTTPStatus.UNPROCESSABLE_ENTITY, "body: a job needs a target")
        if not isinstance(body.get("inputParams"), dict):
            raise FelisError(HTTPStatus.UNPROCESSABLE_ENTITY, "body: inputParams is not a map")
        if body["target"] not in self.targets:
            raise FelisError(
                HTTPStatus.UNPROCESSABLE_ENTITY, f"target {body['target']!r} does not exist"
            )
        job = FelisJob(
            id=str(uuid.uuid4()),
            target=body["target"],
            input_params=body["inputParams"],
            input_data_format=body.get("inputDataFormat"),
            output_data_format=body.get("outputDataFormat"),
        )
        job.record("CREATED")
        with self._lock:
            self.jobs[job.id] = job
            return job.document()

    def upload_input(self, job_id: str, qir: str) -> dict[str, Any]:
        with self._lock:
            job = self._job(job_id)
            if job.input is not None:
                raise FelisError(HTTPStatus.CONFLICT, f"job {job_id} has its input already")
            job.input = qir
            job.record("INPUT_READY")
            return job.document()

    def get_job(self, job_id: str) -> dict[str, Any]:
        """The job, one step further along each time it is read while it runs."""
        with self._lock:
            job = self._job(job_id)
            if job.state == "INPUT_READY":
                job.record("EXECUTING")
            elif job.state == "EXECUTING" and not self._held:
                job.record("SUCCEEDED")
            return job.document()

    def output(self, job_id: str) -> str:
        """The histogram of a finished job: every shot of ``measure_one.qir`` reads 0."""
        with self._lock:
            job = self._job(job_id)
            if job.state != "SUCCEEDED":
                raise FelisError(HTTPStatus.CONFLICT, f"job {job_id} is {job.state}, no output")
            shots = int(job.input_params.get("nbShots", 1000))
            return f"0,{shots}\n"

    def cancel(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            job = self._job(job_id)
            if job.state not in FINAL:
                job.record("CANCELLED")
            return job.document()

    def _job(self, job_id: str) -> FelisJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise FelisError(HTTPStatus.NOT_FOUND, f"job {job_id} not found")
        return job


# HTTP ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    content_type: str
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise FelisError(HTTPStatus.UNPROCESSABLE_ENTITY, f"body: not JSON ({e})") from e

    def part(self, name: str) -> bytes:
        """The multipart/form-data part called ``name``."""
        if not self.content_type.startswith("multipart/form-data"):
            raise FelisError(HTTPStatus.UNPROCESSABLE_ENTITY, "body: not multipart/form-data")
        head = f"Content-Type: {self.content_type}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + self.body)
        for part in message.walk():
            if part.get_param("name", header="content-disposition") == name:
                payload = part.get_payload(decode=True)
                if isinstance(payload, bytes):
                    return payload
        raise FelisError(HTTPStatus.UNPROCESSABLE_ENTITY, f"body: no part {name!r}")


Handler = Callable[[Felis, Request, str], tuple[str, str | dict[str, Any]]]
"""(service, request, job id from the path) -> (content type, body)."""


def _create(felis: Felis, request: Request, _: str) -> tuple[str, dict[str, Any]]:
    return JSON, felis.create_job(request.json())


def _upload(felis: Felis, request: Request, job_id: str) -> tuple[str, dict[str, Any]]:
    return JSON, felis.upload_input(job_id, request.part("input").decode())


def _get(felis: Felis, _: Request, job_id: str) -> tuple[str, dict[str, Any]]:
    return JSON, felis.get_job(job_id)


def _output(felis: Felis, _: Request, job_id: str) -> tuple[str, str]:
    return TEXT, felis.output(job_id)


def _cancel(felis: Felis, _: Request, job_id: str) -> tuple[str, dict[str, Any]]:
    return JSON, felis.cancel(job_id)


JOB = r"(?P<job>[0-9a-f-]+)"
ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    ("POST", re.compile(r"/v1/jobs/?"), _create),
    ("POST", re.compile(rf"/v1/jobs/{JOB}/input"), _upload),
    ("GET", re.compile(rf"/v1/jobs/{JOB}"), _get),
    ("GET", re.compile(rf"/v1/jobs/{JOB}/output"), _output),
    ("DELETE", re.compile(rf"/v1/jobs/{JOB}"), _cancel),
)


def _basic_key(authorization: str | None) -> str | None:
    scheme, _, credentials = (authorization or "").partition(" ")
    return credentials.strip() if scheme.lower() == "basic" else None


def handler_class(felis: Felis) -> type[BaseHTTPRequestHandler]:
    """The request handler of ``felis``: routes, authenticates, records each call."""

    class FelisHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def _serve(self) -> None:
            path = re.sub(r"/+", "/", self.path.split("?", 1)[0])
            key = _basic_key(self.headers.get("Authorization"))
            body = self._body()
            felis.record(Call(self.command, path, key))
            try:
                if key != felis.api_key:
                    raise FelisError(HTTPStatus.UNAUTHORIZED, "Not authenticated")
                for method, pattern, handle in ROUTES:
                    match = pattern.fullmatch(path)
                    if match and method == self.command:
                        request = Request(self.headers.get("Content-Type", ""), body)
                        content_type, answer = handle(
                            felis, request, match.groupdict().get("job") or ""
                        )
                        self._send(HTTPStatus.OK, content_type, answer)
                        return
                raise FelisError(HTTPStatus.NOT_FOUND, f"no route {self.command} {path}")
            except FelisError as e:
                self._send(e.status, JSON, {"detail": e.detail})

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _send(self, status: HTTPStatus, content_type: str, answer: Any) -> None:
            data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Calls are recorded in :meth:`Felis.calls`; nothing to print."""

    return FelisHandler


class FelisStandIn:
    """The stand-in served over HTTP on ``host`` (a free port) from a thread."""

    def __init__(self, felis: Felis, host: str) -> None:
        self.felis = felis
        self.server = ThreadingHTTPServer((host, 0), handler_class(felis))
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/"
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="felis-standin", daemon=True
        )

    def __enter__(self) -> FelisStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
