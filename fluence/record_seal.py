"""Allocation records the extender can prove it wrote itself.

A bound pod's allocation record (an annotation written by the Binding) is read
back to rebuild the ledger after a restart. Anyone who may create or patch a
pod can write annotations, so a record is trusted only with a seal beside it:
an HMAC-SHA256, under a key only the scheduler reads (a Secret mounted into
the extender), over the pod's namespace/name, its UID and the record's exact
text. A record copied to another pod, edited, or made up fails the check.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from pathlib import Path

log = logging.getLogger(__name__)

MIN_KEY_BYTES = 16


class SealKeyError(ValueError):
    """The key file cannot be used; the message says what to fix."""


class RecordSeal:
    """Signs and checks allocation records with one secret key."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise SealKeyError(f"the record key must have at least {MIN_KEY_BYTES} bytes")
        self._key = key

    @classmethod
    def from_file(cls, path: str | Path) -> RecordSeal:
        """The key in ``path`` (a mounted Secret), surrounding whitespace ignored."""
        try:
            key = Path(path).read_bytes().strip()
        except OSError as exc:
            raise SealKeyError(f"cannot read the record key {path}: {exc}") from exc
        try:
            return cls(key)
        except SealKeyError as exc:
            raise SealKeyError(f"{path}: {exc}; write a random key into the Secret") from None

    def sign(self, pod: str, uid: str, record: str) -> str:
        message = b"\0".join((pod.encode(), uid.encode(), record.encode()))
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(self, pod: str, uid: str, record: str, seal: str) -> bool:
        """True only for the seal :meth:`sign` makes; any other text, of any characters, is False.

        Seals are compared as bytes: ``compare_digest`` refuses non-ASCII ``str``,
        and a seal is whatever a pod's writer put in an annotation.
        """
        if not uid:
            return False
        given = seal.encode("utf-8", "surrogatepass")
        return hmac.compare_digest(self.sign(pod, uid, record).encode(), given)


_process_seal: RecordSeal | None = None
_process_lock = threading.Lock()


def process_seal() -> RecordSeal:
    """A random key for this process alone: records it seals do not survive a restart.

    Used when no key is configured (tests, a single replica that may lose
    backends' holders on restart); the extender logs a warning when it runs so.
    """
    global _process_seal
    with _process_lock:
        if _process_seal is None:
            _process_seal = RecordSeal(secrets.token_bytes(32))
        return _process_seal


def load_seal(path: str) -> RecordSeal:
    """The configured key, or a per-process one (with a warning) when ``path`` does not exist."""
    if path and Path(path).exists():
        return RecordSeal.from_file(path)
    log.warning(
        "no record key: allocation records are sealed with a key that dies with this process, "
        "so after a restart bound pods are accounted by their requests only; mount the "
        "fluence-record-key Secret (FLUENCE_RECORD_KEY_FILE)",
        extra={"path": path},
    )
    return process_seal()
