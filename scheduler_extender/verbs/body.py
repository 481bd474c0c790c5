"""Reading and decoding request bodies with a size cap, so bad input is a clear 4xx.

Every route that takes a body reads it through :func:`read_body`, which stops
at the cap instead of reading the whole body first. Decoding turns every way a
body can be wrong (not UTF-8, not JSON, the wrong shapes, numbers out of range,
nesting past msgspec's recursion guard) into a 400, before the scheduler sees
anything, so a refused request has changed nothing.
"""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Iterator
from typing import TypeVar

import msgspec
from starlette.requests import Request

from fluence.pods import Pod, QuantityError, decode_pod, pod_requests
from fluence.serving import BodyTooLarge, read_capped_body
from scheduler_extender import wire
from scheduler_extender.candidates import Candidates

T = TypeVar("T")

MAX_BODY_SETTING = "FLUENCE_MAX_BODY_BYTES"

_UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What msgspec raises for bytes that are not the JSON expected (ValidationError included)."""


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_body(request: Request, limit: int, setting: str = MAX_BODY_SETTING) -> bytes:
    """The body, or a 413 naming ``setting`` as soon as more than ``limit`` bytes arrive."""
    try:
        return await read_capped_body(request.scope, request.receive, limit)
    except BodyTooLarge:
        raise BadRequest(413, f"request body exceeds the {limit}-byte limit ({setting})") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: {exc}"
    return str(exc)


def _check_utf8(body: bytes, chunk: int = 1 << 16) -> None:
    """Raise UnicodeDecodeError unless ``body`` is UTF-8, checked a piece at a time.

    Decoding it whole would hold the body again as a str, up to four times its size.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(body)
    for start in range(0, len(body), chunk):
        decoder.decode(view[start : start + chunk])
    decoder.decode(b"", final=True)


def decode(decoder: msgspec.json.Decoder[T], body: bytes, what: str) -> T:
    if not body:
        raise BadRequest(400, f"empty body: expected {what} as JSON")
    if not body.isascii():
        # msgspec checks UTF-8 only in the strings it decodes, not in values it skips or
        # keeps raw; JSON is UTF-8 throughout, so check all of it (ASCII needs no look).
        try:
            _check_utf8(body)
        except UnicodeDecodeError as exc:
            raise BadRequest(400, f"malformed {what}: the body is not UTF-8: {exc}") from exc
    try:
        return decoder.decode(body)
    except (*_UNREADABLE, QuantityError) as exc:
        raise BadRequest(400, f"malformed {what}: {_why(exc)}") from exc


def pod_of(raw: msgspec.Raw) -> Pod:
    """The Pod inside a request, decoded only now (its bytes were kept raw)."""
    try:
        pod = decode_pod(raw)
    except _UNREADABLE as exc:
        raise BadRequest(400, f"malformed Pod in request: {_why(exc)}") from exc
    if not pod.metadata.name or not pod.metadata.namespace:
        raise BadRequest(400, "the Pod in the request has no metadata.name or metadata.namespace")
    try:
        pod_requests(pod)
    except QuantityError as exc:
        raise BadRequest(400, f"the Pod's resource requests cannot be read: {exc}") from exc
    return pod


def candidates_of(args: wire.ExtenderArgs) -> Candidates:
    """The offered node names, checked before any decision so a bad list changes nothing."""
    field = "NodeNames" if args.has_node_names else "Nodes.items"
    try:
        return args.candidates()
    except _UNREADABLE as exc:
        raise BadRequest(400, f"malformed ExtenderArgs.{field}: {_why(exc)}") from exc


@contextlib.contextmanager
def offered_names(args: wire.ExtenderArgs) -> Iterator[Candidates]:
    """The offered node names, for a decision that reads them as it needs them.

    NodeNames are checked to be all names when the decision first needs them whole
    (before it changes anything); a list that is not is a 400 here.
    """
    field = "NodeNames" if args.has_node_names else "Nodes.items"
    candidates = candidates_of(args)
    try:
        yield candidates
    except _UNREADABLE as exc:
        raise BadRequest(400, f"malformed ExtenderArgs.{field}: {_why(exc)}") from exc
