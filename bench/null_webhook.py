"""The smallest correct mutating webhook: allow every object, echo the uid, no patch.

``--patch FILE`` answers every review with the same JSON Patch instead (the
one fluence makes for the benchmark's pods), which separates what the API
server spends applying a patch from what the fluence webhook spends making it.

``GET /reviews`` (any GET with the threaded server) returns how many reviews
it has answered, so a caller can tell when the API server started calling it.

It is the baseline of ``bench/webhook.py``: the API server pays for TLS and the
AdmissionReview round trip whatever the webhook decides, so "fluence / null"
shows what our own code costs on top of calling a webhook at all. The default
stack is the one fluence serves with (Starlette app with one route, Hypercorn
through :func:`fluence.serving.serve_app`); ``--server hypercorn-h1`` is the
same with HTTP/2 left out of ALPN, ``--server aiohttp`` and
``--server threaded`` (``http.server`` with ``ssl`` in a thread per connection)
show how much of the cost is the server stack. Usage::

    python bench/null_webhook.py --bind 127.0.0.1:PORT --cert C --key K [--server hypercorn]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.server
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fluence.serving import ReloadingTLS, TLSFiles, hypercorn_config, serve_app  # noqa: E402

SERVERS = ("hypercorn", "hypercorn-h1", "aiohttp", "threaded")


class _Request(msgspec.Struct):
    uid: str


class _Review(msgspec.Struct):
    request: _Request


_decode = msgspec.json.Decoder(_Review).decode

_patch = [b""]
"""``,"patchType":"JSONPatch","patch":"<base64>"`` to add to every answer, or empty."""

_answered = [0]
"""Reviews answered so far (``GET /reviews``): lets the benchmark see when it is called."""


def answer(body: bytes) -> bytes:
    """The AdmissionReview allowing the object unchanged; ValueError for an unusable body."""
    try:
        uid = _decode(body).request.uid
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise ValueError(f"not an AdmissionReview with request.uid: {e}") from None
    _answered[0] += 1
    return (
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
        b'"response":{"uid":' + msgspec.json.encode(uid) + b',"allowed":true' + _patch[0] + b"}}"
    )


def tls_context(cert: str, key: str, alpn: list[str]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(alpn)
    context.load_cert_chain(cert, key)
    return context


def null_app() -> Any:
    """Starlette with the one route, as ``fluence-webhook`` builds its app."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def mutate(request: Request) -> Response:
        try:
            body = answer(await request.body())
        except ValueError as e:
            return Response(str(e), status_code=400, media_type="text/plain")
        return Response(body, media_type="application/json")

    async def reviews(request: Request) -> Response:
        return Response(str(_answered[0]), media_type="text/plain")

    return Starlette(
        routes=[
            Route("/mutate", mutate, methods=["POST"]),
            Route("/reviews", reviews, methods=["GET"]),
        ]
    )


def serve_hypercorn(host: str, port: int, cert: str, key: str) -> None:
    """The same stack as ``fluence-webhook``: Starlette, one route, Hypercorn via serve_app."""
    files = TLSFiles(Path(cert), Path(key))
    asyncio.run(serve_app(null_app(), f"{host}:{port}", tls_files=files))


def serve_hypercorn_h1(host: str, port: int, cert: str, key: str) -> None:
    """Hypercorn configured as serve_app does, but offering only HTTP/1.1 in ALPN."""
    from hypercorn.asyncio import serve

    tls = ReloadingTLS(TLSFiles(Path(cert), Path(key)))
    tls.context.set_alpn_protocols(["http/1.1"])
    config = hypercorn_config(f"{host}:{port}", tls)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await serve(null_app(), config, shutdown_trigger=stop.wait)

    asyncio.run(run())


def serve_aiohttp(host: str, port: int, cert: str, key: str) -> None:
    """aiohttp's own server (HTTP/1.1 only): a different asyncio HTTP stack."""
    from aiohttp import web

    async def mutate(request: web.Request) -> web.Response:
        try:
            body = answer(await request.read())
        except ValueError as e:
            return web.Response(status=400, text=str(e))
        return web.Response(body=body, content_type="application/json")

    async def reviews(request: web.Request) -> web.Response:
        return web.Response(text=str(_answered[0]))

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/reviews", reviews)
    web.run_app(
        app,
        host=host,
        port=port,
        ssl_context=tls_context(cert, key, ["http/1.1"]),
        access_log=None,
        print=None,
    )


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    # Headers and body are separate writes; with Nagle the body waits for a delayed ACK.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        try:
            body, status, kind = answer(self.rfile.read(length)), 200, "application/json"
        except ValueError as e:
            body, status, kind = str(e).encode(), 400, "text/plain"
        self._reply(status, kind, body)

    def do_GET(self) -> None:
        self._reply(200, "text/plain", str(_answered[0]).encode())

    def _reply(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_threaded(host: str, port: int, cert: str, key: str) -> None:
    """``http.server`` with ``ssl``, one thread per connection: no asyncio at all."""
    server = http.server.ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    # Handshakes happen in the connection's thread, so a slow client never stalls accept().
    context = tls_context(cert, key, ["http/1.1"])
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True, help="host:port to listen on")
    parser.add_argument("--cert", required=True, help="PEM serving certificate")
    parser.add_argument("--key", required=True, help="PEM private key of --cert")
    parser.add_argument("--server", choices=SERVERS, default="hypercorn")
    parser.add_argument("--patch", type=Path, help="JSON Patch (a list of ops) for every pod")
    args = parser.parse_args(argv)
    if args.patch:
        encoded = base64.b64encode(
            msgspec.json.encode(msgspec.json.decode(args.patch.read_bytes()))
        )
        _patch[0] = b',"patchType":"JSONPatch","patch":"' + encoded + b'"'
    host, _, port = args.bind.rpartition(":")
    serve = {
        "hypercorn": serve_hypercorn,
        "hypercorn-h1": serve_hypercorn_h1,
        "aiohttp": serve_aiohttp,
        "threaded": serve_threaded,
    }
    serve[args.server](host, int(port), args.cert, args.key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
