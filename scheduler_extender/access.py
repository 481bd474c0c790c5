"""Who may call the extender from beyond its pod.

kube-scheduler runs in the same pod and calls the extender on loopback, as do
``kubectl port-forward`` sessions (which the API server authorised) and the
probes. Anything arriving from another address, once the extender listens
beyond loopback, must carry a bearer token: the API server says whose it is
(TokenReview) and whether that user may use the path (SubjectAccessReview on
the non-resource URL, so RBAC ``nonResourceURLs`` rules grant it). Probes stay
open so the kubelet can reach them. Answers are cached briefly, because a
Prometheus scrape every few seconds must not cost two API calls each time.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

from fluence import telemetry

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered to anyone: the kubelet's probes carry no credentials."""

_denied = telemetry.meter("fluence.extender").create_counter(
    "fluence_extender_access_denied",
    description="Requests from beyond the pod refused: no token, an unknown token, or no RBAC",
)


@dataclass(frozen=True)
class Caller:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class AccessReviewer(Protocol):
    """The two questions asked of the API server (blocking; run in a thread)."""

    def authenticate(self, token: str) -> Caller | None: ...

    def authorize(self, caller: Caller, path: str, verb: str) -> bool: ...


class KubeAccessReviewer:
    """:class:`AccessReviewer` over the official kubernetes client."""

    def __init__(self, api_client: Any, *, timeout: float = 5.0) -> None:
        from kubernetes import client

        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._timeout = timeout

    def authenticate(self, token: str) -> Caller | None:
        from kubernetes import client

        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        answer = self._authn.create_token_review(review, _request_timeout=self._timeout)
        status = answer.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.extra or {}).items()))
        return Caller(user.username or "", user.uid or "", tuple(user.groups or ()), extra)

    def authorize(self, caller: Caller, path: str, verb: str) -> bool:
        from kubernetes import client

        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=caller.username,
                uid=caller.uid or None,
                groups=list(caller.groups) or None,
                extra={k: list(v) for k, v in caller.extra} or None,
                non_resource_attributes=client.V1NonResourceAttributes(path=path, verb=verb),
            )
        )
        answer = self._authz.create_subject_access_review(review, _request_timeout=self._timeout)
        return bool(answer.status and answer.status.allowed)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _TTLCache:
    def __init__(self, ttl: float, size: int, clock: Callable[[], float]) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._items: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self._items.get(key)
        if hit is None or hit[0] <= self.clock():
            return False, None
        return True, hit[1]

    def put(self, key: Any, value: Any) -> None:
        self._items[key] = (self.clock() + self.ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class RemoteAccess:
    """ASGI middleware: loopback and probes pass; anyone else needs a token and RBAC."""

    def __init__(
        self,
        app: ASGIApp,
        reviewer: AccessReviewer | None,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.reviewer = reviewer
        self._callers = _TTLCache(cache_seconds, 1024, clock)
        self._decisions = _TTLCache(cache_seconds, 4096, clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if is_loopback(client[0] if client else None):
            await self.app(scope, receive, send)
            return
        status, why = await self._check(scope)
        if status == 200:
            await self.app(scope, receive, send)
            return
        _denied.add(1, {"reason": "unauthenticated" if status == 401 else "forbidden"})
        body = msgspec.json.encode({"Error": why})
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="fluence-extender"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _check(self, scope: Scope) -> tuple[int, str]:
        """200, or the status and message refusing the request."""
        token = _bearer(scope)
        if not token:
            return 401, (
                "requests from outside the extender's pod need 'Authorization: Bearer <token>' "
                "(a Kubernetes token); or use kubectl port-forward"
            )
        if self.reviewer is None:
            return 401, "this extender cannot verify tokens (no API server credentials)"
        path = scope.get("path", "")
        verb = str(scope.get("method", "GET")).lower()
        digest = hashlib.sha256(token.encode()).digest()
        found, caller = self._callers.get(digest)
        try:
            if not found:
                caller = await asyncio.to_thread(self.reviewer.authenticate, token)
                self._callers.put(digest, caller)
            if caller is None:
                return 401, "the token was not accepted by the API server (TokenReview)"
            key = (caller, path, verb)
            found, allowed = self._decisions.get(key)
            if not found:
                allowed = await asyncio.to_thread(self.reviewer.authorize, caller, path, verb)
                self._decisions.put(key, allowed)
        except Exception as exc:
            log.warning("cannot review a request's access", extra={"error": str(exc)})
            return 401, "the API server could not review this request's token; retry"
        if not allowed:
            return 403, (
                f"{caller.username!r} may not {verb} {path} on the extender; grant it with an RBAC "
                "rule on nonResourceURLs (see the chart's fluence-extender-viewer ClusterRole)"
            )
        return 200, ""


def _bearer(scope: Scope) -> str:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""
