"""The allocation record: what a bound pod holds, written on the pod, read back after a restart.

The record is an annotation the Binding writes; anyone who may patch the pod can
change it, so a record is trusted only with a seal beside it: an HMAC-SHA256,
under a key only the scheduler reads (a Secret mounted into the extender), over
the pod's namespace/name, its UID and the record's exact text. A record copied
to another pod, edited, or made up fails the check. This module owns the
record's schema and that check; it never holds anything in the graph.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from pathlib import Path

import msgspec

from fluence import names, untrusted
from fluence.events import PodEvents
from fluence.pods import Pod, pod_requests, split_requests

log = logging.getLogger(__name__)


class DeviceRecord(msgspec.Struct, omit_defaults=True):
    type: str
    path: str
    name: str
    jobid: int = 0


class BackendRecord(msgspec.Struct, omit_defaults=True):
    """A backend after the first, for a pod given several (its devices are in ``devices``)."""

    name: str
    attributes: dict[str, str] = {}


class PendingMember(msgspec.Struct, omit_defaults=True):
    """A member of the same group still waiting to be bound when this record was written."""

    pod: str
    uid: str = ""
    node: str = ""
    amounts: dict[str, int] = {}


class AllocationRecord(msgspec.Struct, omit_defaults=True):
    """What a bound pod holds; stored on the pod, read back to rebuild the ledger.

    ``pending`` lists the members of its group not bound yet, with where they are
    held: an extender that restarts in the middle of a gang's binds holds them
    again, so no other pod takes their capacity and the gang is not left partial.
    """

    group: str
    node: str = ""
    amounts: dict[str, int] = {}
    jobid: int = 0
    backend: str = ""
    attributes: dict[str, str] = {}
    devices: list[DeviceRecord] = []
    more_backends: list[BackendRecord] = []
    """The backends after ``backend``, in order, when the group got several."""
    pending: list[PendingMember] = []
    priority: int | None = None
    """The group's priority when placed (a PodGroup's may differ from the pod's own)."""
    singly: bool = False
    """Its group lets its pods be preempted one at a time."""
    v: int = 1


_record_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(AllocationRecord)


def encode_record(rec: AllocationRecord) -> str:
    return _record_encoder.encode(rec).decode()


def decode_record(text: str) -> AllocationRecord:
    return _record_decoder.decode(text)


def record_mismatch(pod: Pod, rec: AllocationRecord) -> str:
    """Why a sealed record does not fit its pod ("" when it does): a second line of defence."""
    compute, devices = split_requests(pod_requests(pod))
    if rec.amounts and rec.amounts != compute:
        return f"it holds {rec.amounts}, the pod requests {compute}"
    asked = set(devices)
    named = {rec.backend, *(b.name for b in rec.more_backends)} - {""}
    for d in rec.devices:
        # Every member of a gang records the group's backends; only some request them.
        if d.type not in asked and d.name not in named:
            return f"it holds a {d.type} the pod does not request"
    return ""


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


def trusted_record(pod: Pod, seal: RecordSeal, events: PodEvents) -> AllocationRecord | None:
    """The pod's allocation record if this scheduler wrote it for this pod; else None."""
    annotations = pod.metadata.annotations
    raw = annotations.get(names.ANNOTATION_ALLOCATION)
    if not raw:
        return None
    why = ""
    rec: AllocationRecord | None = None
    given = annotations.get(names.ANNOTATION_ALLOCATION_SEAL, "")
    if not seal.verify(pod.key, pod.metadata.uid, raw, given):
        reason = "unsealed-record"
        why = "no valid seal (not written by this scheduler for this pod)"
    else:
        try:
            rec = decode_record(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            reason, why = "unreadable-record", f"unreadable: {exc}"
        else:
            reason, why = "record-mismatch", record_mismatch(pod, rec)
    if not why:
        return rec
    untrusted.count(untrusted.POD.kind, reason)
    log.warning(
        "allocation record ignored; the pod is accounted by its own requests",
        extra={"pod": pod.key, "reason": why},
    )
    events.warn(
        pod.metadata.namespace,
        pod.metadata.name,
        pod.metadata.uid,
        "UntrustedAllocationRecord",
        f"fluence ignored the {names.ANNOTATION_ALLOCATION} annotation ({why}); "
        "the pod is accounted by its own resource requests and the backend it names",
    )
    return None
