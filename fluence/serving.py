"""Serving an ASGI app with Hypercorn: HTTP/1.1 and HTTP/2, optional TLS that follows cert rotation.

Hypercorn reads certificates once, at startup. Here the server keeps its own
``SSLContext`` and loads the files into it again when they change (a Secret
mount updated by cert-manager swaps them in place), so new connections get the
new certificate without a restart and any number of replicas can share it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvloop
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.types import Receive, Scope

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TLSFiles:
    cert: Path
    key: Path


class ReloadingTLS:
    """TLS for a server whose certificate chain, and client CA if any, follow their files.

    With ``client_ca`` every client must present a certificate that CA signed
    (mutual TLS) and nothing else is trusted: the context is built bare, not
    from ``ssl.create_default_context``, which would also trust every public CA
    of the system store. A CA loaded into a context cannot be taken out again,
    so each reload builds a new context, and the listening context hands every
    new connection to the newest one from its SNI callback (OpenSSL calls it
    with or without SNI in the client hello).
    """

    def __init__(
        self, files: TLSFiles, *, http2: bool = True, client_ca: Path | None = None
    ) -> None:
        self.files = files
        self.client_ca = client_ca
        # Clients pick HTTP/2 only when it is offered here (ALPN).
        self._alpn = ["h2", "http/1.1"] if http2 else ["http/1.1"]
        # The first load must succeed: a server without a certificate fails every handshake.
        self._stamp = self._current_stamp()
        self.context = self._build()
        self.current = self.context
        """The newest context, which new connections get."""
        self.context.sni_callback = self._hand_over

    def _paths(self) -> list[Path]:
        return [self.files.cert, self.files.key, *([self.client_ca] if self.client_ca else [])]

    def _current_stamp(self) -> tuple[float, ...]:
        return tuple(os.stat(p).st_mtime for p in self._paths())

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(self._alpn)
        context.load_cert_chain(self.files.cert, self.files.key)
        if self.client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=self.client_ca)
        return context

    def _hand_over(self, connection: ssl.SSLObject, _name: str | None, _ctx: Any) -> None:
        if self.current is not self.context:
            connection.context = self.current

    def reload_if_changed(self) -> bool:
        """Load the files if they changed since the last load; a bad set keeps the old one."""
        try:
            stamp = self._current_stamp()
        except OSError as e:
            log.warning("tls files unreadable", extra={"error": str(e)})
            return False
        if stamp == self._stamp:
            return False
        try:
            self.current = self._build()
        except (ssl.SSLError, OSError) as e:
            log.error("tls reload failed, keeping the old certificate", extra={"error": str(e)})
            return False
        log.info(
            "tls certificate reloaded",
            extra={"cert": str(self.files.cert), "client_ca": str(self.client_ca or "")},
        )
        self._stamp = stamp
        return True

    async def watch(self, interval: float = 2.0) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()


class _Config(Config):
    """Hypercorn config that hands out our own (reloadable) SSLContext."""

    tls: ReloadingTLS | None = None

    @property
    def ssl_enabled(self) -> bool:
        return self.tls is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.context if self.tls else None


def hypercorn_config(
    bind: str, tls: ReloadingTLS | None = None, insecure_bind: str | None = None
) -> Config:
    """``insecure_bind`` adds a plain-HTTP socket beside a TLS one (scope scheme ``http``)."""
    config = _Config()
    config.tls = tls
    if tls is not None:
        config.bind = [bind]
        config.insecure_bind = [insecure_bind] if insecure_bind else []
    else:
        config.bind = [bind, *([insecure_bind] if insecure_bind else [])]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.keep_alive_timeout = 75
    # kube-apiserver and kube-scheduler multiplex every call over one long-lived HTTP/2
    # connection; Hypercorn's default of closing it after 1000 requests drops the calls
    # in flight, so never close for that reason.
    config.keep_alive_max_requests = 2**62
    return config


async def serve_app(
    app: Any,
    bind: str,
    *,
    tls_files: TLSFiles | None = None,
    client_ca: Path | None = None,
    insecure_bind: str | None = None,
    background: list[Callable[[], Coroutine[Any, Any, None]]] | None = None,
    on_ready: Callable[[], None] | None = None,
    http2: bool = True,
) -> None:
    """Serve until SIGTERM/SIGINT, running background coroutines beside the server.

    ``http2=False`` offers only HTTP/1.1 to TLS clients: Hypercorn's HTTP/2 costs
    more CPU per request (bench/serving.py). ``client_ca`` makes TLS clients
    present a certificate it signed; ``insecure_bind`` also serves plain HTTP
    there (for probes and scrapes that hold no client certificate), and the app
    tells the two apart by the scope's ``scheme``.
    """
    tls = ReloadingTLS(tls_files, http2=http2, client_ca=client_ca) if tls_files else None
    config = hypercorn_config(bind, tls, insecure_bind)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[None]] = [asyncio.create_task(fn()) for fn in (background or [])]
    if tls:
        tasks.append(asyncio.create_task(tls.watch()))
    if on_ready:
        on_ready()
    log.info(
        "serving",
        extra={
            "bind": bind,
            "tls": bool(tls),
            "client_certificates": bool(tls and tls.client_ca),
            "insecure_bind": insecure_bind,
        },
    )
    try:
        await serve(app, config, shutdown_trigger=stop.wait)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


EventLoop = Literal["uvloop", "asyncio"]


def run(main: Coroutine[Any, Any, None], loop: EventLoop = "uvloop") -> None:
    """Run a server's main coroutine, on uvloop unless told otherwise.

    uvloop's transports and TLS are compiled; asyncio's are Python. bench/serving.py
    measures both loops side by side (the webhook: 2-8 % less CPU per request on
    uvloop). ``asyncio`` is kept for debugging with the standard loop's tooling.
    """
    if loop == "uvloop":
        uvloop.run(main)
    else:
        asyncio.run(main)


class BodyTooLarge(Exception):
    """A request body over the configured limit (answered with HTTP 413)."""


async def read_capped_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body; :class:`BodyTooLarge` for anything over ``limit`` bytes.

    Over HTTP/1 an oversized body is refused as soon as it is declared (the
    connection is then closed). Over HTTP/2 it is read and thrown away first:
    answering a stream that is still sending makes Hypercorn drop the whole
    connection, and with it every other review in flight on it.
    """
    http2 = scope.get("http_version") == "2"
    if not http2:
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif not http2:
            raise BodyTooLarge
        if not message.get("more_body", False):
            break
    if size > limit:
        raise BodyTooLarge
    return b"".join(chunks)
