"""AdmissionReview v1 on the wire, and the slices of a Pod and a Job the webhook reads.

Decoding is strict where the API server's contract is (apiVersion, kind, a
request with a uid: anything else is a broken caller and gets HTTP 400) and
lenient about the object (a pod or Job that does not decode is answered
"allowed" with a warning, so a schema surprise never blocks its creation).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
PATCH_TYPE = "JSONPatch"


T = TypeVar("T")


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview v1; answered with HTTP 400."""


# --- the request -----------------------------------------------------------------


class GroupVersionKind(msgspec.Struct):
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(msgspec.Struct):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(msgspec.Struct):
    """Who asked the API server to create the object (authentication.k8s.io/v1 UserInfo)."""

    username: str = ""
    uid: str = ""
    groups: list[str] | None = None
    extra: dict[str, list[str]] | None = None


class AdmissionRequest(msgspec.Struct, rename="camel"):
    uid: str
    kind: GroupVersionKind = msgspec.field(default_factory=GroupVersionKind)
    resource: GroupVersionResource = msgspec.field(default_factory=GroupVersionResource)
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    operation: str = ""
    object: msgspec.Raw = msgspec.Raw(b"null")
    dry_run: bool | None = None
    user_info: UserInfo = msgspec.field(default_factory=UserInfo)

    @property
    def is_pod_create(self) -> bool:
        return (
            self.operation == "CREATE"
            and self.kind.group == ""
            and self.kind.kind == "Pod"
            and not self.sub_resource
        )

    @property
    def is_job_create(self) -> bool:
        return (
            self.operation == "CREATE"
            and self.kind.group == "batch"
            and self.kind.version == "v1"
            and self.kind.kind == "Job"
            and not self.sub_resource
        )


class AdmissionReview(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: AdmissionRequest | None = None


_review_decoder = msgspec.json.Decoder(AdmissionReview)


def decode_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview v1, or :class:`ReviewError` saying what is wrong."""
    try:
        review = _review_decoder.decode(body)
    except msgspec.ValidationError as e:
        raise ReviewError(f"AdmissionReview does not match admission.k8s.io/v1: {e}") from None
    except msgspec.DecodeError as e:
        raise ReviewError(f"body is not JSON: {e}; send an AdmissionReview object") from None
    if review.api_version != API_VERSION or review.kind != KIND:
        raise ReviewError(
            f"expected apiVersion {API_VERSION!r} kind {KIND!r}, got "
            f"{review.api_version!r} {review.kind!r}; list only v1 in admissionReviewVersions"
        )
    if review.request is None:
        raise ReviewError("AdmissionReview has no 'request'; nothing to review")
    if not review.request.uid:
        raise ReviewError("AdmissionReview request has an empty 'uid'; the response must echo it")
    return review.request


# --- the pod -----------------------------------------------------------------------


class EnvVar(msgspec.Struct):
    name: str = ""


class ResourceRequirements(msgspec.Struct):
    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class SecurityContext(msgspec.Struct, rename="camel"):
    run_as_user: int | None = None


class Container(msgspec.Struct, rename="camel"):
    name: str = ""
    env: list[EnvVar] | None = None
    resources: ResourceRequirements | None = None
    security_context: SecurityContext | None = None

    def resource_names(self) -> set[str]:
        """Every resource named in requests or limits."""
        if self.resources is None:
            return set()
        return set(self.resources.requests or ()) | set(self.resources.limits or ())

    def env_names(self) -> set[str]:
        return {e.name for e in self.env or ()}


class OwnerReference(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None


class SchedulingGate(msgspec.Struct):
    name: str = ""


class PodSpec(msgspec.Struct, rename="camel"):
    scheduler_name: str = ""
    scheduling_gates: list[SchedulingGate] | None = None
    containers: list[Container] = msgspec.field(default_factory=list)
    init_containers: list[Container] | None = None
    scheduling_group: dict[str, Any] | None = None
    active_deadline_seconds: int | None = None
    priority_class_name: str = ""
    security_context: SecurityContext | None = None


class Pod(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels or {}

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations or {}


_pod_decoder = msgspec.json.Decoder(Pod)


def _decode(decoder: msgspec.json.Decoder[T], raw: msgspec.Raw, kind: str) -> T:
    """``request.object`` as ``kind``; ValueError with the reason when it is not one."""
    data = bytes(raw)
    if data.strip() in (b"", b"null"):
        raise ValueError("request.object is empty")
    try:
        return decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise ValueError(f"request.object is not a {kind}: {e}") from None


def decode_pod(raw: msgspec.Raw) -> Pod:
    """The pod in ``request.object``; ValueError with the reason when it is not one."""
    return _decode(_pod_decoder, raw, "Pod")


# --- the Job ------------------------------------------------------------------------


class PodConditionPattern(msgspec.Struct):
    type: str = ""
    status: str = ""


class ExitCodesRequirement(msgspec.Struct, rename="camel"):
    container_name: str | None = None
    operator: str = ""
    values: list[int] | None = None


class PodFailurePolicyRule(msgspec.Struct, rename="camel"):
    action: str = ""
    on_exit_codes: ExitCodesRequirement | None = None
    on_pod_conditions: list[PodConditionPattern] | None = None


class PodFailurePolicy(msgspec.Struct):
    rules: list[PodFailurePolicyRule] | None = None


class TemplatePodSpec(msgspec.Struct, rename="camel"):
    scheduler_name: str = ""
    restart_policy: str = ""


class PodTemplate(msgspec.Struct):
    spec: TemplatePodSpec = msgspec.field(default_factory=TemplatePodSpec)


class JobSpec(msgspec.Struct, rename="camel"):
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)
    pod_failure_policy: PodFailurePolicy | None = None
    pod_replacement_policy: str | None = None


class Job(msgspec.Struct):
    spec: JobSpec = msgspec.field(default_factory=JobSpec)


_job_decoder = msgspec.json.Decoder(Job)


def decode_job(raw: msgspec.Raw) -> Job:
    """The batch/v1 Job in ``request.object``; ValueError with the reason when it is not one."""
    return _decode(_job_decoder, raw, "Job")


# --- the response ------------------------------------------------------------------


class AdmissionResponse(msgspec.Struct, rename="camel", omit_defaults=True):
    uid: str
    allowed: bool
    patch_type: str | None = None
    patch: str | None = None
    warnings: list[str] | None = None


class AdmissionReviewResponse(msgspec.Struct, rename="camel"):
    response: AdmissionResponse
    api_version: str = API_VERSION
    kind: str = KIND


_encoder = msgspec.json.Encoder()

MAX_WARNING_CHARS = 240
"""API servers may truncate longer warnings; ours are written to stay well below."""


def allow(uid: str, ops: list[dict[str, Any]] | None = None, warnings: Sequence[str] = ()) -> bytes:
    """The encoded AdmissionReview allowing the object, with a JSON Patch when there are ops."""
    response = AdmissionResponse(uid=uid, allowed=True)
    if ops:
        response.patch_type = PATCH_TYPE
        response.patch = base64.b64encode(_encoder.encode(ops)).decode("ascii")
    if warnings:
        response.warnings = [w[:MAX_WARNING_CHARS] for w in warnings]
    return _encoder.encode(AdmissionReviewResponse(response=response))
