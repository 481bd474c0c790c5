"""Reading and decoding request bodies with a size cap, so bad input is a clear 4xx."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from starlette.requests import Request

from fluence.pods import Pod, QuantityError, decode_pod, pod_requests
from fluence.serving import BodyTooLarge, read_capped_body

T = TypeVar("T")


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_body(request: Request, limit: int) -> bytes:
    try:
        return await read_capped_body(request.scope, request.receive, limit)
    except BodyTooLarge:
        raise BadRequest(
            413, f"request body exceeds the {limit}-byte limit (FLUENCE_MAX_BODY_BYTES)"
        ) from None


def decode(decoder: msgspec.json.Decoder[T], body: bytes, what: str) -> T:
    if not body:
        raise BadRequest(400, f"empty body: expected {what} as JSON")
    try:
        return decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, QuantityError) as exc:
        raise BadRequest(400, f"malformed {what}: {exc}") from exc


def pod_of(raw: msgspec.Raw) -> Pod:
    """The Pod inside a request, decoded only now (its bytes were kept raw)."""
    try:
        pod = decode_pod(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadRequest(400, f"malformed Pod in request: {exc}") from exc
    if not pod.metadata.name or not pod.metadata.namespace:
        raise BadRequest(400, "the Pod in the request has no metadata.name or metadata.namespace")
    try:
        pod_requests(pod)
    except QuantityError as exc:
        raise BadRequest(400, f"the Pod's resource requests cannot be read: {exc}") from exc
    return pod
