"""Settings of the ``fluence-webhook`` binary, read from ``FLUENCE_*`` environment variables."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field

from fluence.settings import ServerSettings

TRUSTED_CONTROLLERS = (
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kube-system:replicaset-controller",
    "system:serviceaccount:kube-system:statefulset-controller",
    "system:serviceaccount:kube-system:replication-controller",
)
"""kube-controller-manager's identities (one shared, or one per controller with
--use-service-account-credentials)."""


class ClientAuth(StrEnum):
    """Whether the webhook knows its caller is the API server."""

    MTLS = "mtls"
    """Callers present a certificate from the client CA: the webhook acts for the API server."""
    NONE = "none"
    """Anyone who reaches the port is answered: the webhook acts on nothing but the pod."""


class WebhookSettings(ServerSettings):
    """Everything the webhook process can be told; defaults fit the in-cluster Deployment."""

    bind: str = Field(
        default="0.0.0.0:8443",
        description="host:port to listen on (HTTPS, HTTP/1.1 and HTTP/2): /mutate and the probes.",
    )
    tls_cert: Path = Field(
        default=Path("/etc/fluence/tls/tls.crt"),
        description="PEM serving certificate (chain); reloaded when the file changes.",
    )
    tls_key: Path = Field(
        default=Path("/etc/fluence/tls/tls.key"),
        description="PEM private key matching tls_cert; reloaded with it.",
    )
    client_ca: str = Field(
        default="/etc/fluence/client-ca/ca.crt",
        description=(
            "PEM CA that signs the API server's webhook client certificate (a CA for that "
            "alone; see webhook/README.md). When the file exists, TLS clients must present a "
            "certificate it signed (mutual TLS) and the webhook creates PodGroups and reads "
            "Jobs for the pods it admits; reloaded when the file changes. Empty or absent: "
            "any client is answered, so the webhook creates no PodGroup and reads no Job "
            "(decided at start)."
        ),
    )
    probe_bind: str = Field(
        default="0.0.0.0:8080",
        description=(
            "host:port of plain HTTP serving /healthz, /readyz and /metrics for the kubelet "
            "and Prometheus, which hold no client certificate; /mutate is refused there. "
            "Empty: no such port."
        ),
    )
    resources: str = Field(
        default="",
        description=(
            "Path of the resources config (FLUENCE_RESOURCES). Its attribute keys decide which "
            "FLUXION_<KEY> variables are injected; re-read when the file changes. Empty: none."
        ),
    )
    queue: bool = Field(
        default=True,
        description=(
            "Add the scheduling gate fluence.flux-framework.org/queue to every pod of the "
            "fluence profile: it waits gated until the extender's queue has placed its whole "
            "group, then kube-scheduler binds it where Fluxion chose. False: pods go to "
            "kube-scheduler at once and are placed through the extender's filter."
        ),
    )
    gang: bool = Field(
        default=True,
        description=(
            "Create a PodGroup for pods carrying the group label and link them through "
            "spec.schedulingGroup (only when the cluster serves PodGroups: scheduling.k8s.io "
            "v1beta1, or v1alpha2 on Kubernetes 1.36)."
        ),
    )
    api_recheck_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How often to ask the API server again whether it serves PodGroups.",
    )
    podgroup_cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description=(
            "How long a PodGroup known to exist is remembered, so that the other members of a "
            "gang skip the create call; 0 creates (or gets AlreadyExists) for every pod."
        ),
    )
    max_body_bytes: int = Field(
        default=3 * 1024 * 1024,
        gt=0,
        description="Largest AdmissionReview body accepted; larger ones get HTTP 413.",
    )
    api_budget_seconds: float = Field(
        default=3.0,
        gt=0,
        description="Time one review may spend on API server calls in all (PodGroup, Job); keep "
        "it below the MutatingWebhookConfiguration's timeoutSeconds. Past it the pod is admitted "
        "without its gang link, with a warning.",
    )
    trusted_controllers: str = Field(
        default=",".join(TRUSTED_CONTROLLERS),
        description=(
            "Comma-separated usernames of workload controllers: a pod they create with a "
            "controlling owner gets a PodGroup owned by that owner. Any other requester gets one "
            "only when a SubjectAccessReview says it may create PodGroups itself."
        ),
    )
    api_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description="Timeout of each API server call made while answering a review.",
    )

    def client_ca_file(self) -> Path | None:
        """The client CA, when it is set and the file exists."""
        if not self.client_ca:
            return None
        path = Path(self.client_ca)
        return path if path.exists() else None

    def client_auth(self) -> ClientAuth:
        return ClientAuth.MTLS if self.client_ca_file() else ClientAuth.NONE

    def trusted_controller_names(self) -> frozenset[str]:
        return frozenset(n.strip() for n in self.trusted_controllers.split(",") if n.strip())
