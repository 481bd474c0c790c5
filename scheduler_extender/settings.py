"""Settings of the fluence-extender binary, read from FLUENCE_* environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fluence.settings import ServerSettings
from scheduler_extender.qrmi_acquisition import default_python


class ExtenderSettings(ServerSettings):
    """Everything the extender can be told; each field's env var is FLUENCE_<NAME>."""

    bind: str = Field(
        default="127.0.0.1:8888", description="host:port the HTTP(S) server listens on."
    )
    tls_cert: str = Field(
        default="", description="PEM certificate file; with tls_key, serve HTTPS."
    )
    tls_key: str = Field(default="", description="PEM private key file for tls_cert.")
    match_policy: str = Field(
        default="first", description="Fluxion match policy (first, low, high, ...)."
    )
    record_key_file: str = Field(
        default="/etc/fluence/record-key/key",
        description="Secret key sealing the allocation records written at bind (the "
        "fluence-record-key Secret, mounted into the extender only); every replica needs the "
        "same key. Missing: a per-process key, so records do not survive a restart.",
    )
    topology_keys: str = Field(
        default="topology.kubernetes.io/zone,topology.kubernetes.io/rack",
        description="Comma-separated node label keys that become levels of the graph, "
        "outermost first; a group may require one domain of any of them (PodGroup "
        "schedulingConstraints.topology, or the fluence.flux-framework.org/topology annotation).",
    )
    scheduler_name: str = Field(
        default="fluence", description="spec.schedulerName of the pods this extender places."
    )
    unbound_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds an allocation made at filter may stay unbound before it is released.",
    )
    gang_timeout: float = Field(
        default=600.0,
        gt=0,
        description="Seconds a group may hold its capacity without every member bound; then "
        "all its unbound holdings are released and the group is matched again when retried.",
    )
    default_runtime: int = Field(
        default=3600,
        ge=0,
        description="Seconds a pod without activeDeadlineSeconds or a "
        "fluence.flux-framework.org/runtime annotation is expected to run, for planning "
        "reservations (0: unknown, nothing can be reserved behind it). Pods are held until "
        "they end whatever their estimate.",
    )
    backfill: Literal["conservative", "easy"] = Field(
        default="conservative",
        description="conservative: the first reserve_depth waiting groups hold reservations "
        "that nothing placed later may delay; easy: only the head of the queue does.",
    )
    spread: Literal["pack", "balanced"] = Field(
        default="pack",
        description="How a gang that no one topology domain holds is shared among the fewest "
        "that do: pack (as the match fills them) or balanced (as evenly as their room "
        "allows: 12 pods on two racks with room for 10 each go 6 and 6).",
    )
    reserve_depth: int = Field(
        default=32,
        gt=0,
        description="Waiting groups that hold reservations under conservative backfill.",
    )
    preemption: bool = Field(
        default=True,
        description="A waiting group may evict whole groups of lower priority when a what-if "
        "match shows it then fits (pods with preemptionPolicy Never never do).",
    )
    bind_concurrency: int = Field(
        default=16,
        gt=0,
        description=(
            "Bindings sent to the API server at once, each on its own kept-alive connection; "
            "more wait for a free one."
        ),
    )
    max_body_bytes: int = Field(
        default=64 << 20,
        gt=0,
        description="Largest request body accepted, in bytes (larger: HTTP 413).",
    )
    requeue_interval: float = Field(
        default=1.0,
        ge=0,
        description="Seconds between looks for waiting groups that fit now but whose pods have "
        "not asked since; their pods get the fluence.flux-framework.org/RoomFree condition, "
        "which makes kube-scheduler try them again (0: never).",
    )
    queue: bool = Field(
        default=True,
        description="Run the queue: place the groups of pods gated by "
        "fluence.flux-framework.org/queue and release them pinned to their nodes (only the "
        "extender holding the queue Lease does; the others follow).",
    )
    queue_lease_namespace: str = Field(
        default="kube-system",
        description="Namespace of the Lease fluence-queue, whose holder runs the queue "
        "(empty: no Lease, this extender always runs it: one replica only).",
    )
    queue_lease_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How long the queue Lease holds unrenewed: a replica takes over the queue "
        "this long after its leader stopped renewing.",
    )
    queue_retry_limit: int = Field(
        default=5,
        ge=1,
        description="Gang timeouts after which a released group is not placed again (its "
        "pods wait gated with the reason until this extender restarts); each timeout evicts "
        "the group and doubles its back-off, from 10 s.",
    )
    qrmi_python: str = Field(
        default_factory=default_python,
        description="Python interpreter that has the qrmi library (the qrmi dependency "
        "group), with which the queue acquires QRMI resources before a release and releases "
        "them after (default: the image's /opt/qrmi/bin/python; empty: groups given a "
        "resource fluence acquires wait, with the reason).",
    )
    qrmi_credentials_namespace: str = Field(
        default="kube-system",
        description="Namespace of the Secrets holding the credentials the queue acquires QRMI "
        "resources with (each resource's 'secret', keys <name>_<key>): the extender's own.",
    )
    queue_identity: str = Field(
        default="",
        description="This extender's name in the queue Lease (empty: the host name).",
    )
    expire_interval: float = Field(
        default=5.0, gt=0, description="Seconds between sweeps that release expired allocations."
    )
