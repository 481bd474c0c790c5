"""The HTTP surface: ``POST /mutate``, probes and ``/metrics``. Handlers only translate.

``/mutate`` is a plain ASGI endpoint rather than a request/response function:
every pod creation in the cluster waits on it, and skipping the framework's
request and response objects halves the time spent outside the decision.

The same app serves the TLS port and the plain probe port; ``/mutate`` answers
only on TLS (scope scheme ``https``), where with a client CA only the API
server gets through the handshake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from fluence import telemetry
from fluence.serving import BodyTooLarge, read_capped_body
from webhook.admission import Admission
from webhook.review import ReviewError
from webhook.settings import ClientAuth, WebhookSettings

_JSON = [(b"content-type", b"application/json")]
_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_PLAIN_REFUSED = (
    b"POST /mutate is answered over TLS only (FLUENCE_BIND), not on the plain probe port"
)

_client_auth = telemetry.meter("fluence.webhook").create_gauge(
    "fluence_webhook_client_auth",
    description="1 for the client authentication in force: mtls (only the API server's "
    "certificate is answered) or none (no PodGroups, no Job reads)",
)


class MutateEndpoint:
    """ASGI endpoint for ``POST /mutate``: body in, AdmissionReview (or 400/413) out."""

    def __init__(self, admission: Admission, max_body_bytes: int) -> None:
        self.admission = admission
        self.max_body_bytes = max_body_bytes
        meter = telemetry.meter("fluence.webhook")
        self._reviews = meter.create_counter(
            "fluence_webhook_reviews", description="AdmissionReviews answered, by HTTP status"
        )
        self._latency = meter.create_histogram(
            "fluence_webhook_review_seconds", unit="s", description="Time to answer one review"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = telemetry.Stopwatch()
        status, headers = 200, _JSON
        if scope.get("scheme") != "https":
            await self._answer(send, 403, _TEXT, _PLAIN_REFUSED, watch)
            return
        try:
            body = await self.admission.review(
                await read_capped_body(scope, receive, self.max_body_bytes)
            )
        except BodyTooLarge:
            status, headers = 413, _TEXT
            if scope.get("http_version", "1.1").startswith("1"):
                # The unread body makes the HTTP/1 connection unusable; say so.
                headers = [*headers, (b"connection", b"close")]
            body = (
                f"AdmissionReview larger than {self.max_body_bytes} bytes; "
                "raise FLUENCE_MAX_BODY_BYTES"
            ).encode()
        except ReviewError as e:
            status, headers = 400, _TEXT
            body = str(e).encode()
        await self._answer(send, status, headers, body, watch)

    async def _answer(
        self,
        send: Send,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        watch: telemetry.Stopwatch,
    ) -> None:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self._reviews.add(1, {"code": status})
        self._latency.record(watch.seconds)


def create_app(
    settings: WebhookSettings,
    admission: Admission,
    *,
    ready: Callable[[], bool] = lambda: True,
    client_auth: ClientAuth = ClientAuth.NONE,
) -> Starlette:
    """The Starlette app; ``ready`` backs ``/readyz`` (false until startup work is done).

    ``client_auth`` is reported where an operator looks: ``/readyz``'s body and the
    ``fluence_webhook_client_auth`` gauge.
    """
    for mode in ClientAuth:
        _client_auth.set(int(mode is client_auth), {"mode": mode.value})
    said = f"client auth: {client_auth.value}"

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        if ready():
            return PlainTextResponse(f"ok; {said}")
        return PlainTextResponse(f"not ready; {said}", status_code=503)

    mutate: Any = MutateEndpoint(admission, settings.max_body_bytes)
    return Starlette(
        routes=[
            Route("/mutate", mutate, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Mount("/metrics", app=telemetry.metrics_app()),
        ]
    )
