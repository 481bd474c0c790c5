"""Slim views of Pods, Nodes and PodGroups, decoded straight from API JSON, and what a pod asks for.

The scheduler only needs a handful of fields, so the structs below name just
those; msgspec skips the rest of each object while decoding, which keeps a
5,000-node list or a busy pod watch cheap. Requests are counted the way the
kubelet counts them (sum of containers, at least the largest init container,
plus pod overhead) and converted to the integer units of the graph: cpu in
millicores, memory in MiB (a pod's need rounded up, a node's capacity rounded
down), GPUs and fluxion resources in whole units.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from fluence import names

# Graph vertex types for the standard resources.
CORE = "core"
MEMORY = "memory"
GPU = "gpu"
COMPUTE_TYPES = (CORE, GPU, MEMORY)
"""Types that live on a Kubernetes node (sorted, as jobspecs list them)."""

MIB = 1 << 20

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


class QuantityError(ValueError):
    """A Kubernetes quantity string could not be read."""


QUANTITY_CACHE = 4096
"""Quantities read before, kept: a cluster uses few distinct ones ("500m", "1Gi"), and
reading every member's requests was a tenth of a gang's placement."""


@functools.lru_cache(maxsize=QUANTITY_CACHE)
def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a Kubernetes quantity such as ``500m``, ``8Gi`` or ``1e3``."""
    if isinstance(text, (int, float)):
        return Decimal(str(text))
    s = text.strip()
    if not s:
        raise QuantityError("empty quantity: give a number such as 500m, 2 or 8Gi")
    try:
        if s[-2:] in _BINARY:
            return Decimal(s[:-2]) * _BINARY[s[-2:]]
        if s[-1] in _DECIMAL and not s[-1].isdigit() and s[-1] not in "eE":
            return Decimal(s[:-1]) * _DECIMAL[s[-1]]
        if s[-1] == "E" and len(s) > 1 and s[-2].isdigit():
            return Decimal(s[:-1]) * _DECIMAL["E"]
        value = Decimal(s)
    except InvalidOperation as exc:
        raise QuantityError(
            f"quantity {text!r} is not a number with an optional Kubernetes suffix "
            "(m, k, Mi, Gi, ...)"
        ) from exc
    if not value.is_finite():
        raise QuantityError(f"quantity {text!r} is not finite")
    return value


@functools.lru_cache(maxsize=QUANTITY_CACHE)
def cpu_millicores(q: str | int | float) -> int:
    """cpu in millicores, rounded up (``0.5`` -> 500, ``1n`` -> 1)."""
    return int(math.ceil(parse_quantity(q) * 1000))


@functools.lru_cache(maxsize=QUANTITY_CACHE)
def memory_mib(q: str | int | float, *, round_up: bool) -> int:
    """memory in MiB: up for what a pod needs, down for what a node offers."""
    v = parse_quantity(q) / MIB
    return int(math.ceil(v) if round_up else math.floor(v))


@functools.lru_cache(maxsize=QUANTITY_CACHE)
def whole_units(q: str | int | float) -> int:
    """Devices and extended resources: whole units, rounded up."""
    return int(math.ceil(parse_quantity(q)))


# ---- slim API structs ------------------------------------------------------------------


class OwnerReference(msgspec.Struct, rename="camel", omit_defaults=True):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    deletion_timestamp: str | None = None
    creation_timestamp: str | None = None
    owner_references: list[OwnerReference] = []
    finalizers: list[str] = []

    @property
    def controller(self) -> OwnerReference | None:
        """The controlling owner (a Job, a ReplicaSet, ...), if any."""
        return next((o for o in self.owner_references if o.controller), None)


class ResourceRequirements(msgspec.Struct, omit_defaults=True):
    requests: dict[str, str | int | float] = {}
    limits: dict[str, str | int | float] = {}


class ContainerPort(msgspec.Struct, rename="camel", omit_defaults=True):
    container_port: int = 0
    host_port: int = 0
    protocol: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(msgspec.Struct, omit_defaults=True):
    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = []


class Toleration(msgspec.Struct, rename="camel", omit_defaults=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class SchedulingGroup(msgspec.Struct, rename="camel", omit_defaults=True):
    pod_group_name: str = ""


class SchedulingGate(msgspec.Struct, omit_defaults=True):
    name: str = ""


class NodeSelectorRequirement(msgspec.Struct, omit_defaults=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(msgspec.Struct, rename="camel", omit_defaults=True):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(msgspec.Struct, rename="camel", omit_defaults=True):
    node_selector_terms: list[NodeSelectorTerm] = []


class NodeAffinity(msgspec.Struct, omit_defaults=True):
    required: NodeSelector | None = msgspec.field(
        default=None, name="requiredDuringSchedulingIgnoredDuringExecution"
    )


class LabelSelectorRequirement(msgspec.Struct, omit_defaults=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class LabelSelector(msgspec.Struct, rename="camel", omit_defaults=True):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class PodAffinityTerm(msgspec.Struct, rename="camel", omit_defaults=True):
    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    namespace_selector: LabelSelector | None = None
    topology_key: str = ""


class PodAffinity(msgspec.Struct, omit_defaults=True):
    """Required terms only: the preferred ones are scores, which the queue leaves to
    kube-scheduler among the nodes it offers."""

    required: list[PodAffinityTerm] = msgspec.field(
        default_factory=list, name="requiredDuringSchedulingIgnoredDuringExecution"
    )


class Affinity(msgspec.Struct, rename="camel", omit_defaults=True):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class TopologySpreadConstraint(msgspec.Struct, rename="camel", omit_defaults=True):
    max_skew: int = 1
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = ""
    """``Honor`` when unsaid: only nodes the pod's node selector and affinity admit count."""
    node_taints_policy: str = ""
    """``Ignore`` when unsaid: tainted nodes count too."""
    match_label_keys: list[str] = []


class ClaimSource(msgspec.Struct, rename="camel", omit_defaults=True):
    claim_name: str = ""


class EphemeralSource(msgspec.Struct, omit_defaults=True):
    """A generic ephemeral volume: its claim, named ``<pod>-<volume>``, is made for the pod."""


class Volume(msgspec.Struct, rename="camel", omit_defaults=True):
    """A pod volume: only claims matter here (a claim's volume may admit few nodes)."""

    name: str = ""
    persistent_volume_claim: ClaimSource | None = None
    ephemeral: EphemeralSource | None = None


class PodResourceClaim(msgspec.Struct, rename="camel", omit_defaults=True):
    """A pod's ResourceClaim (dynamic resource allocation): named, or made from a template."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodResourceClaimStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    resource_claim_name: str | None = None
    """The claim made for the pod from the entry's template (None: none was needed)."""


class PodSecurityContext(msgspec.Struct, rename="camel", omit_defaults=True):
    run_as_user: int | None = None


class PodSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    node_selector: dict[str, str] = {}
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: dict[str, str | int | float] = {}
    tolerations: list[Toleration] = []
    scheduling_group: SchedulingGroup | None = None
    scheduling_gates: list[SchedulingGate] = []
    affinity: Affinity | None = None
    topology_spread_constraints: list[TopologySpreadConstraint] = []
    volumes: list[Volume] = []
    priority: int | None = None
    """Resolved from priorityClassName at admission, so a pod cannot claim any other."""
    preemption_policy: str = ""
    """``Never``: the pod waits rather than preempt (from its PriorityClass)."""
    active_deadline_seconds: int | None = None
    security_context: PodSecurityContext | None = None
    resource_claims: list[PodResourceClaim] = []


class PodStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    phase: str = ""
    start_time: str = ""
    """When the kubelet took the pod on (RFC 3339); ``activeDeadlineSeconds`` counts from it."""
    resource_claim_statuses: list[PodResourceClaimStatus] = []


class Pod(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def terminal(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")

    @property
    def bound(self) -> bool:
        return bool(self.spec.node_name)

    @property
    def gated(self) -> bool:
        return bool(self.spec.scheduling_gates)

    @property
    def host_ports(self) -> frozenset[tuple[str, str, int]]:
        """(protocol, host IP, port) of every port its containers take on their node, as
        kube-scheduler counts them (containers only; TCP and 0.0.0.0 when unsaid)."""
        return frozenset(
            (p.protocol or "TCP", p.host_ip or "0.0.0.0", p.host_port)
            for c in self.spec.containers
            for p in c.ports
            if p.host_port > 0
        )

    @property
    def affinity_terms(self) -> list[PodAffinityTerm]:
        """Required pod affinity terms: the pod goes only where pods they select run."""
        a = self.spec.affinity
        return a.pod_affinity.required if a is not None and a.pod_affinity is not None else []

    @property
    def anti_affinity_terms(self) -> list[PodAffinityTerm]:
        """Required pod anti-affinity terms: the pod never goes where pods they select run."""
        a = self.spec.affinity
        anti = a.pod_anti_affinity if a is not None else None
        return anti.required if anti is not None else []

    def gated_by(self, gate: str) -> bool:
        return any(g.name == gate for g in self.spec.scheduling_gates)

    def tolerates(self, taint: Taint) -> bool:
        return tolerated(self.spec.tolerations, taint)

    def resource_claim_name(self, entry: PodResourceClaim) -> str | None:
        """The ResourceClaim a ``spec.resourceClaims`` entry uses: its own name, or the one
        made from its template as the pod's status records it ("": not made yet; None:
        none was needed)."""
        if entry.resource_claim_name:
            return entry.resource_claim_name
        for s in self.status.resource_claim_statuses:
            if s.name == entry.name:
                return s.resource_claim_name
        return ""


class Taint(msgspec.Struct, omit_defaults=True):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(msgspec.Struct, omit_defaults=True):
    unschedulable: bool = False
    taints: list[Taint] = []


class NodeStatus(msgspec.Struct, omit_defaults=True):
    capacity: dict[str, str | int | float] = {}
    allocatable: dict[str, str | int | float] = {}


class Node(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)

    @property
    def name(self) -> str:
        return self.metadata.name


class Namespace(msgspec.Struct, omit_defaults=True):
    """A namespace: its labels are what pod affinity's ``namespaceSelector`` picks by."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class ClaimResources(msgspec.Struct, omit_defaults=True):
    requests: dict[str, str | int | float] = {}


class ClaimSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    volume_name: str = ""
    """The PersistentVolume the claim is bound to ("" while it is not)."""
    storage_class_name: str | None = None
    access_modes: list[str] = []
    volume_mode: str | None = None
    selector: LabelSelector | None = None
    resources: ClaimResources = msgspec.field(default_factory=ClaimResources)


class PersistentVolumeClaim(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ClaimSpec = msgspec.field(default_factory=ClaimSpec)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class VolumeNodeAffinity(msgspec.Struct, omit_defaults=True):
    required: NodeSelector | None = None


class ClaimRef(msgspec.Struct, omit_defaults=True):
    namespace: str = ""
    name: str = ""
    uid: str = ""


class CSIVolumeSource(msgspec.Struct, rename="camel", omit_defaults=True):
    driver: str = ""
    volume_handle: str = ""


class PersistentVolumeSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    node_affinity: VolumeNodeAffinity | None = None
    """The nodes the volume can be reached from (a local disk, a zonal volume)."""
    capacity: dict[str, str | int | float] = {}
    claim_ref: ClaimRef | None = None
    access_modes: list[str] = []
    volume_mode: str | None = None
    storage_class_name: str = ""
    csi: CSIVolumeSource | None = None
    """Set for a volume a CSI driver serves (its attach limits count it)."""


class VolumeStatus(msgspec.Struct, omit_defaults=True):
    phase: str = ""


class PersistentVolume(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)
    status: VolumeStatus = msgspec.field(default_factory=VolumeStatus)


class TopologyLabelRequirement(msgspec.Struct, omit_defaults=True):
    key: str = ""
    values: list[str] = []


class TopologySelectorTerm(msgspec.Struct, rename="camel", omit_defaults=True):
    match_label_expressions: list[TopologyLabelRequirement] = []


class StorageClass(msgspec.Struct, rename="camel", omit_defaults=True):
    """How a class's claims get volumes: by whom, when, and where (allowedTopologies)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: list[TopologySelectorTerm] = []


class VolumeCount(msgspec.Struct, omit_defaults=True):
    count: int | None = None


class CSINodeDriver(msgspec.Struct, omit_defaults=True):
    name: str = ""
    allocatable: VolumeCount | None = None
    """How many of the driver's volumes the node can attach (None: no limit)."""


class CSINodeSpec(msgspec.Struct, omit_defaults=True):
    drivers: list[CSINodeDriver] = []


class CSINode(msgspec.Struct, omit_defaults=True):
    """A node's CSI drivers (named as the node), written by its kubelet."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSINodeSpec = msgspec.field(default_factory=CSINodeSpec)


class AttachmentSource(msgspec.Struct, rename="camel", omit_defaults=True):
    persistent_volume_name: str | None = None


class AttachmentSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    attacher: str = ""
    node_name: str = ""
    source: AttachmentSource = msgspec.field(default_factory=AttachmentSource)


class VolumeAttachment(msgspec.Struct, omit_defaults=True):
    """A volume attached (or being attached) to a node by its CSI driver."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: AttachmentSpec = msgspec.field(default_factory=AttachmentSpec)


class Gang(msgspec.Struct, rename="camel", omit_defaults=True):
    min_count: int = 1


class SchedulingPolicy(msgspec.Struct, omit_defaults=True):
    gang: Gang | None = None


class TopologyConstraint(msgspec.Struct, omit_defaults=True):
    key: str = ""


class SchedulingConstraints(msgspec.Struct, omit_defaults=True):
    topology: list[TopologyConstraint] | None = None

    @property
    def topology_key(self) -> str:
        """The node label key whose one domain must hold the whole group ("" when none)."""
        return next((c.key for c in self.topology or () if c.key), "")


class DisruptionMode(msgspec.Struct, omit_defaults=True):
    """scheduling.k8s.io/v1beta1: exactly one of ``single`` (pods one by one) or ``all``."""

    single: dict[str, Any] | None = None
    all: dict[str, Any] | None = None


class PodGroupSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    scheduling_policy: SchedulingPolicy | None = None
    scheduling_constraints: SchedulingConstraints | None = None
    """scheduling.k8s.io/v1beta1: every pod of the group in one domain of a node label."""
    min_member: int | None = None
    """scheduling.x-k8s.io/v1alpha1 (scheduler-plugins) spelling of the gang size."""
    priority: int | None = None
    """scheduling.k8s.io/v1beta1: resolved from priorityClassName at admission."""
    disruption_mode: DisruptionMode | str | None = None
    """v1beta1: an object (``single`` or ``all``); v1alpha2: a string (see disrupted_singly)."""
    preemption_policy: str | None = None
    """v1beta1: ``Never`` keeps the whole group from preempting."""
    parent_composite_pod_group_name: str | None = None
    """v1beta1 (gate CompositePodGroup): the CompositePodGroup this group is a child of."""


class PodGroup(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    api_version: str = msgspec.field(default="", name="apiVersion")

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def topology_key(self) -> str:
        """The node label key whose one domain must hold the whole group ("" when none)."""
        constraints = self.spec.scheduling_constraints
        return constraints.topology_key if constraints else ""

    @property
    def parent(self) -> str:
        """The CompositePodGroup it belongs to ("" when it is a root)."""
        return self.spec.parent_composite_pod_group_name or ""

    @property
    def disrupted_singly(self) -> bool:
        """May its pods be evicted one at a time (rather than the whole group or none)?

        v1beta1 says ``single`` or ``all`` (the API server fills in ``single`` when
        the writer left it out). v1alpha2's string cannot say it: without its alpha
        WorkloadAwarePreemption gate the API server stores ``"Pod"`` whatever was
        written, so such a gang stays whole.
        """
        mode = self.spec.disruption_mode
        return isinstance(mode, DisruptionMode) and mode.single is not None and mode.all is None

    @property
    def min_count(self) -> int:
        if self.spec.scheduling_policy and self.spec.scheduling_policy.gang:
            return max(1, self.spec.scheduling_policy.gang.min_count)
        if self.spec.min_member is not None:
            return max(1, self.spec.min_member)
        return 1


class CompositeGang(msgspec.Struct, rename="camel", omit_defaults=True):
    min_group_count: int = 1


class CompositeSchedulingPolicy(msgspec.Struct, omit_defaults=True):
    gang: CompositeGang | None = None
    basic: dict[str, Any] | None = None


class CompositePodGroupSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    scheduling_policy: CompositeSchedulingPolicy | None = None
    scheduling_constraints: SchedulingConstraints | None = None
    priority: int | None = None


class CompositePodGroup(msgspec.Struct, omit_defaults=True):
    """scheduling.k8s.io/v1alpha3 (gate CompositePodGroup): PodGroups placed together.

    With a gang policy its child PodGroups are placed all or none (at least
    ``minGroupCount`` of them, each whole); with the basic policy each child is
    placed on its own.
    """

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CompositePodGroupSpec = msgspec.field(default_factory=CompositePodGroupSpec)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def min_groups(self) -> int:
        """Child groups that must all be placed at once (0: a basic policy, each alone)."""
        policy = self.spec.scheduling_policy
        if policy is None or policy.gang is None:
            return 0
        return max(1, policy.gang.min_group_count)

    @property
    def topology_key(self) -> str:
        constraints = self.spec.scheduling_constraints
        return constraints.topology_key if constraints else ""


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Does one of ``tolerations`` tolerate ``taint`` (a node's, or a device's)?"""
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(t: Toleration, taint: Taint) -> bool:
    if t.effect and t.effect != taint.effect:
        return False
    if t.operator == "Exists":
        return not t.key or t.key == taint.key
    return t.key == taint.key and t.value == taint.value


# ---- requests --------------------------------------------------------------------------


def _container_requests(c: Container) -> dict[str, int]:
    """One container's requests in graph units; a limit stands in for a missing request."""
    raw = dict(c.resources.limits)
    raw.update(c.resources.requests)
    return _to_units(raw, round_up=True)


def _to_units(raw: dict[str, str | int | float], *, round_up: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, q in raw.items():
        if name == names.RESOURCE_CPU:
            out[CORE] = cpu_millicores(q) if round_up else int(parse_quantity(q) * 1000)
        elif name == names.RESOURCE_MEMORY:
            out[MEMORY] = memory_mib(q, round_up=round_up)
        elif name == names.RESOURCE_GPU:
            out[GPU] = whole_units(q) if round_up else int(parse_quantity(q))
        else:
            t = names.resource_type(name)
            if t:
                out[t] = whole_units(q) if round_up else int(parse_quantity(q))
    return {k: v for k, v in out.items() if v > 0}


def pod_requests(pod: Pod) -> dict[str, int]:
    """What the pod needs, by graph type: max(sum of containers, each init container) + overhead."""
    total: dict[str, int] = {}
    for c in pod.spec.containers:
        for k, v in _container_requests(c).items():
            total[k] = total.get(k, 0) + v
    for c in pod.spec.init_containers:
        for k, v in _container_requests(c).items():
            total[k] = max(total.get(k, 0), v)
    for k, v in _to_units(pod.spec.overhead, round_up=True).items():
        total[k] = total.get(k, 0) + v
    return dict(sorted(total.items()))


def node_capacity(node: Node) -> dict[str, int]:
    """What the node offers, by graph type (allocatable, else capacity; rounded down)."""
    raw = node.status.allocatable or node.status.capacity
    caps = _to_units(raw, round_up=False)
    return {k: v for k, v in caps.items() if k in COMPUTE_TYPES}


Split = tuple[dict[str, int], dict[str, int]]
"""A pod's requests as (node resources, virtual resources), by graph type."""


def split_requests(req: dict[str, int]) -> Split:
    """(node resources, virtual resources) of one pod's requests."""
    compute = {k: v for k, v in req.items() if k in COMPUTE_TYPES}
    devices = {k: v for k, v in req.items() if k not in COMPUTE_TYPES}
    return compute, devices


class Status(msgspec.Struct):
    """The API server's answer to a failed request, or a watch ERROR event's object."""

    code: int = 0
    message: str = ""


_pod_decoder = msgspec.json.Decoder(Pod)
_node_decoder = msgspec.json.Decoder(Node)
_group_decoder = msgspec.json.Decoder(PodGroup)


def decode_pod(data: bytes | str) -> Pod:
    return _pod_decoder.decode(data)


def decode_node(data: bytes | str) -> Node:
    return _node_decoder.decode(data)


_claim_decoder = msgspec.json.Decoder(PersistentVolumeClaim)
_volume_decoder = msgspec.json.Decoder(PersistentVolume)
_storage_class_decoder = msgspec.json.Decoder(StorageClass)
_namespace_decoder = msgspec.json.Decoder(Namespace)
_csi_node_decoder = msgspec.json.Decoder(CSINode)
_attachment_decoder = msgspec.json.Decoder(VolumeAttachment)


def decode_claim(data: bytes | str) -> PersistentVolumeClaim:
    return _claim_decoder.decode(data)


def decode_volume(data: bytes | str) -> PersistentVolume:
    return _volume_decoder.decode(data)


def decode_namespace(data: bytes | str) -> Namespace:
    return _namespace_decoder.decode(data)


def decode_storage_class(data: bytes | str) -> StorageClass:
    return _storage_class_decoder.decode(data)


def decode_csi_node(data: bytes | str) -> CSINode:
    return _csi_node_decoder.decode(data)


def decode_attachment(data: bytes | str) -> VolumeAttachment:
    return _attachment_decoder.decode(data)


def decode_podgroup(data: bytes | str) -> PodGroup:
    return _group_decoder.decode(data)


_composite_decoder = msgspec.json.Decoder(CompositePodGroup)


def decode_compositepodgroup(data: bytes | str) -> CompositePodGroup:
    return _composite_decoder.decode(data)


_status_decoder = msgspec.json.Decoder(Status)


def decode_status(data: bytes | str) -> Status:
    return _status_decoder.decode(data)
