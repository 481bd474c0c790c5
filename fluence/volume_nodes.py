"""Volumes and the nodes a pod can use with them, as kube-scheduler's VolumeBinding
filter decides it.

The queue pins pods to nodes, and kube-scheduler refuses a pinned pod on a node where

- a bound claim's volume does not admit the node (``spec.nodeAffinity``: a local disk,
  a zonal volume);
- an unbound claim of a ``WaitForFirstConsumer`` class finds no available volume the
  node reaches, and its class cannot provision one there (no provisioner, or its
  ``allowedTopologies`` rule the node out); each claim takes a volume of its own;
- or, on every node, while a claim is missing, being deleted, bound but not yet
  complete, or unbound with ``Immediate`` binding (kube-scheduler tries again when the
  claim changes; so does the queue);
- or, by its VolumeZone filter, a bound claim's volume is labelled with zones or regions
  (``topology.kubernetes.io/zone``, the beta labels) and the node carries such labels
  but not one of those values (:func:`volume_zones`, :func:`out_of_zone`).

So the queue keeps the same rules: :func:`volume_terms` names, per claim, the nodes it
admits alone; :func:`volume_room` how many of a group's members each node's volumes made
in advance can serve (to share them out before a match), and :func:`short` the pods
matched onto a node where they would not each get a volume of their own (two pods, one
local volume).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from fluence import names
from fluence.node_rules import term_admits
from fluence.pod_affinity import selects
from fluence.pods import (
    CSINode,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    QuantityError,
    StorageClass,
    VolumeAttachment,
    parse_quantity,
)

NOWHERE: list[NodeSelectorTerm] = []
"""A claim's terms when no node can take the pod now."""
ONE_POD = "ReadWriteOncePod"
"""The access mode of a claim one pod at a time may use (kube-scheduler's
VolumeRestrictions refuses a second everywhere)."""


@dataclass(eq=False)
class Storage:
    """What the cluster says about claims, volumes and classes (lookups, by key)."""

    claim: Callable[[str], PersistentVolumeClaim | None]
    """``namespace/name`` -> the claim, if the cluster has it."""
    volume: Callable[[str], PersistentVolume | None]
    volumes: Callable[[], Iterable[PersistentVolume]]
    storage_class: Callable[[str], StorageClass | None]
    csi_nodes: Callable[[], Iterable[CSINode]] = tuple
    """Each node's CSI drivers and how many volumes each may attach there."""
    attachments: Callable[[], Iterable[VolumeAttachment]] = tuple
    memo: dict[str, list[PersistentVolume]] | None = None
    """Each claim's candidates, once a round (None: worked out on every call)."""
    by_class: dict[str, list[PersistentVolume]] | None = None

    def for_round(self) -> Storage:
        """The same lookups for one round: the volumes listed once, by class, and each
        claim's candidates worked out once, however many pods and tries ask (a tenant's
        pod with many claims costs one pass, not one per try)."""
        return Storage(
            self.claim,
            self.volume,
            self.volumes,
            self.storage_class,
            self.csi_nodes,
            self.attachments,
            memo={},
        )

    def of_class(self, name: str) -> list[PersistentVolume]:
        """The volumes of one class (kube-scheduler binds a claim only to those)."""
        if self.memo is None:
            return [v for v in self.volumes() if volume_class(v) == name]
        if self.by_class is None:
            self.by_class = {}
            for v in self.volumes():
                self.by_class.setdefault(volume_class(v), []).append(v)
        return self.by_class.get(name, [])


def claim_keys(pod: Pod) -> list[str]:
    """The ``namespace/name`` of every claim the pod's volumes use (generic ephemeral
    volumes' claims are named ``<pod>-<volume>``)."""
    ns, out = pod.metadata.namespace, []
    for v in pod.spec.volumes:
        if v.persistent_volume_claim is not None and v.persistent_volume_claim.claim_name:
            out.append(f"{ns}/{v.persistent_volume_claim.claim_name}")
        elif v.ephemeral is not None:
            out.append(f"{ns}/{pod.metadata.name}-{v.name}")
    return out


def claim_class(claim: PersistentVolumeClaim) -> str:
    beta = claim.metadata.annotations.get(names.ANNOTATION_BETA_STORAGE_CLASS)
    return beta if beta is not None else claim.spec.storage_class_name or ""


def volume_class(volume: PersistentVolume) -> str:
    beta = volume.metadata.annotations.get(names.ANNOTATION_BETA_STORAGE_CLASS)
    return beta if beta is not None else volume.spec.storage_class_name


def bound(claim: PersistentVolumeClaim) -> bool:
    """Bound for scheduling: named volume and the binder done with it."""
    return bool(claim.spec.volume_name) and (
        names.ANNOTATION_BIND_COMPLETED in claim.metadata.annotations
    )


def waits_for_consumer(claim: PersistentVolumeClaim, storage: Storage) -> bool:
    """Unbound, and of a class that binds once a pod using it has a node."""
    if claim.spec.volume_name:
        return False
    name = claim_class(claim)
    cls = storage.storage_class(name) if name else None
    return cls is not None and cls.volume_binding_mode == names.WAIT_FOR_FIRST_CONSUMER


def _size(values: Mapping[str, str | int | float]) -> Decimal:
    try:
        return parse_quantity(values.get("storage", 0))
    except QuantityError:
        return Decimal(0)


def _reaches(volume: PersistentVolume, node: Node) -> bool:
    affinity = volume.spec.node_affinity
    if affinity is None or affinity.required is None:
        return True
    return any(term_admits(t, node) for t in affinity.required.node_selector_terms)


def _everywhere(volume: PersistentVolume) -> bool:
    affinity = volume.spec.node_affinity
    return affinity is None or affinity.required is None


def _bound_to(volume: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    ref = volume.spec.claim_ref
    return (
        ref is not None
        and (ref.namespace, ref.name) == (claim.metadata.namespace, claim.metadata.name)
        and (not ref.uid or ref.uid == claim.metadata.uid)
    )


def candidates(claim: PersistentVolumeClaim, storage: Storage) -> list[PersistentVolume]:
    """The volumes the claim could bind to on some node, smallest first: the one made
    for it alone if there is one, else the available ones of its class, size, mode,
    selector and access modes."""
    memo = storage.memo
    key = f"{claim.key}@{claim.metadata.resource_version}"
    if memo is not None and key in memo:
        return memo[key]
    found = _candidates(claim, storage)
    if memo is not None:
        memo[key] = found
    return found


def _candidates(claim: PersistentVolumeClaim, storage: Storage) -> list[PersistentVolume]:
    want = _size(claim.spec.resources.requests)
    cls = claim_class(claim)
    mode = claim.spec.volume_mode or "Filesystem"
    fit: list[PersistentVolume] = []
    for v in storage.of_class(cls):
        if v.spec.claim_ref is not None and not _bound_to(v, claim):
            continue
        if _size(v.spec.capacity) < want or (v.spec.volume_mode or "Filesystem") != mode:
            continue
        if v.metadata.deletion_timestamp:
            continue
        if _bound_to(v, claim):
            return [v]
        if v.status.phase != names.VOLUME_AVAILABLE:
            continue
        if claim.spec.selector is not None and not selects(claim.spec.selector, v.metadata.labels):
            continue
        if not set(claim.spec.access_modes) <= set(v.spec.access_modes):
            continue
        fit.append(v)
    return sorted(fit, key=lambda v: (_size(v.spec.capacity), v.metadata.name))


def _provisioned_on(
    claim: PersistentVolumeClaim, storage: Storage
) -> list[NodeSelectorTerm] | None:
    """Where the claim's class can make it a volume: None anywhere, [] nowhere, else the
    terms its ``allowedTopologies`` make (any one admits a node)."""
    cls = storage.storage_class(claim_class(claim))
    if cls is None or not cls.provisioner or cls.provisioner == names.NO_PROVISIONER:
        return NOWHERE
    if not cls.allowed_topologies:
        return None
    return [
        NodeSelectorTerm(
            match_expressions=[
                NodeSelectorRequirement(key=r.key, operator="In", values=r.values)
                for r in t.match_label_expressions
            ]
        )
        for t in cls.allowed_topologies
    ]


def _selected(node: str) -> list[NodeSelectorTerm]:
    field = NodeSelectorRequirement(key=names.NODE_NAME_FIELD, operator="In", values=[node])
    return [NodeSelectorTerm(match_fields=[field])]


def _claim_terms(
    key: str, claim: PersistentVolumeClaim | None, storage: Storage
) -> tuple[list[NodeSelectorTerm] | None, str]:
    """The nodes one claim admits: None any, else terms (any one admits a node); and when
    it admits none, why."""
    name = key.partition("/")[2]
    if claim is None:
        return NOWHERE, f"claim {name} does not exist"
    if claim.metadata.deletion_timestamp:
        return NOWHERE, f"claim {name} is being deleted"
    if bound(claim):
        volume = storage.volume(claim.spec.volume_name)
        if volume is None:
            return (
                NOWHERE,
                f"claim {name} is bound to volume {claim.spec.volume_name}, which is gone",
            )
        if _everywhere(volume):
            return None, ""
        assert volume.spec.node_affinity is not None and volume.spec.node_affinity.required
        return volume.spec.node_affinity.required.node_selector_terms, ""
    if claim.spec.volume_name:
        return NOWHERE, f"claim {name} is being bound to volume {claim.spec.volume_name}"
    if not waits_for_consumer(claim, storage):
        return NOWHERE, f"claim {name} is not bound yet (its class binds it at once, or is missing)"
    selected = claim.metadata.annotations.get(names.ANNOTATION_SELECTED_NODE)
    if selected is not None:
        return _selected(selected), ""
    found = candidates(claim, storage)
    if any(_everywhere(v) for v in found):
        return None, ""
    provisioned = _provisioned_on(claim, storage)
    if provisioned is None:
        return None, ""
    terms = list(provisioned)
    for v in found:
        assert v.spec.node_affinity is not None and v.spec.node_affinity.required
        terms.extend(v.spec.node_affinity.required.node_selector_terms)
    if not terms:
        return NOWHERE, (
            f"no available volume fits claim {name}, and its class {claim_class(claim)} makes none"
        )
    return terms, ""


def volume_terms(pod: Pod, storage: Storage) -> list[list[NodeSelectorTerm]]:
    """Per claim of the pod that admits only some nodes: its terms (any one admits a
    node; none: no node admits the pod now)."""
    out = []
    for key in claim_keys(pod):
        terms, _ = _claim_terms(key, storage.claim(key), storage)
        if terms is not None:
            out.append(terms)
    return out


ZONE_LABELS = (names.LABEL_BETA_ZONE, names.LABEL_BETA_REGION, names.LABEL_ZONE, names.LABEL_REGION)
_GA_LABEL = {names.LABEL_BETA_ZONE: names.LABEL_ZONE, names.LABEL_BETA_REGION: names.LABEL_REGION}

Zones = list[tuple[str, frozenset[str]]]
"""(label key, the values a node may have for it), one per label of a volume."""


def volume_zones(pod: Pod, storage: Storage) -> Zones:
    """The zone and region labels of the volumes the pod's bound claims (not its
    ephemeral ones, as kube-scheduler) use; a label naming an empty zone is ignored."""
    out: Zones = []
    ns = pod.metadata.namespace
    for v in pod.spec.volumes:
        if v.persistent_volume_claim is None:
            continue
        claim = storage.claim(f"{ns}/{v.persistent_volume_claim.claim_name}")
        volume = (
            storage.volume(claim.spec.volume_name) if claim and claim.spec.volume_name else None
        )
        if volume is None:
            continue
        for key in ZONE_LABELS:
            value = volume.metadata.labels.get(key)
            if value is None:
                continue
            zones = [z.strip() for z in value.split(names.MULTI_ZONE_DELIMITER)]
            if all(zones):
                out.append((key, frozenset(zones)))
    return out


def out_of_zone(node: Node, zones: Zones) -> bool:
    """Is ``node`` outside one of the volumes' zones? A node without zone or region labels
    is in all of them."""
    labels = node.metadata.labels
    if not zones or not any(k in labels for k in ZONE_LABELS):
        return False
    for key, values in zones:
        value = labels.get(key)
        if value is None:
            value = labels.get(_GA_LABEL.get(key, key))
        if value is None or value not in values:
            return True
    return False


def unmet(pod: Pod, storage: Storage) -> str:
    """Why no node can take the pod now for one of its claims ("" when some node can
    by its claims alone)."""
    why = _not_its_own(pod, storage)
    for key in claim_keys(pod):
        if why:
            break
        _, why = _claim_terms(key, storage.claim(key), storage)
    return why


def _not_its_own(pod: Pod, storage: Storage) -> str:
    """Why a generic ephemeral volume's claim is not the pod's ("" if each is): a claim of
    that name the pod does not control (kube-scheduler refuses the pod everywhere until
    it is gone and made again for the pod)."""
    uid = pod.metadata.uid
    for v in pod.spec.volumes:
        if v.ephemeral is None or not uid:
            continue
        name = f"{pod.metadata.name}-{v.name}"
        claim = storage.claim(f"{pod.metadata.namespace}/{name}")
        owners = claim.metadata.owner_references if claim is not None else []
        if claim is not None and not any(o.controller and o.uid == uid for o in owners):
            return f"claim {name} of its ephemeral volume {v.name} was not made for it"
    return ""


def in_use(pods: Iterable[Pod], users: Mapping[str, str], storage: Storage) -> str:
    """Why one of ``pods`` cannot start now: a claim of it only one pod may use is used
    by another placed pod (``users``: claim key -> pod key) or member ("" if none)."""
    mine: dict[str, str] = {}
    for p in pods:
        for key in claim_keys(p):
            claim = storage.claim(key)
            if claim is None or ONE_POD not in claim.spec.access_modes:
                continue
            other = users.get(key) or mine.get(key)
            if other and other != p.key:
                name, who = key.partition("/")[2], other.partition("/")[2]
                return f"pod {p.metadata.name}: claim {name} is {ONE_POD} and pod {who} uses it"
            mine[key] = p.key
    return ""


def unreachable(node: Node, terms: list[list[NodeSelectorTerm]]) -> bool:
    """Does one of the claims (its terms) not admit ``node``?"""
    return any(not any(term_admits(t, node) for t in claim) for claim in terms)


def to_bind(pod: Pod, storage: Storage) -> list[PersistentVolumeClaim]:
    """The pod's claims kube-scheduler will pick a volume for on the pod's node (unbound,
    waiting for their first consumer, no node chosen yet), smallest first as it does."""
    out = []
    for key in claim_keys(pod):
        claim = storage.claim(key)
        if (
            claim is not None
            and waits_for_consumer(claim, storage)
            and names.ANNOTATION_SELECTED_NODE not in claim.metadata.annotations
        ):
            out.append(claim)
    return sorted(out, key=lambda c: _size(c.spec.resources.requests))


def volume_room(
    pods: Iterable[Pod], nodes: Mapping[str, Node], storage: Storage, taken: set[str]
) -> tuple[list[str], dict[str, int]]:
    """The pods whose claims still to bind only volumes made in advance can meet (their
    class provisions none), and per node how many of them its available volumes (not in
    ``taken``) can serve, each taking as many as the most claims one of them has."""
    members, need, pool = [], 0, {}
    for p in pods:
        claims = [c for c in to_bind(p, storage) if _provisioned_on(c, storage) is NOWHERE]
        if not claims:
            continue
        members.append(p.key)
        need = max(need, len(claims))
        for c in claims:
            for v in candidates(c, storage):
                if v.metadata.name not in taken:
                    pool[v.metadata.name] = v
    if not members:
        return [], {}
    room = {
        n: sum(1 for v in pool.values() if _reaches(v, node)) // need for n, node in nodes.items()
    }
    return members, room


def short(
    matched: Iterable[tuple[Pod, str]],
    nodes: Mapping[str, Node],
    storage: Storage,
    chosen: set[str],
) -> dict[str, str]:
    """The pods matched onto nodes (pod key -> node) that would not each get a volume of
    their own there for their claims still to bind, after the volumes in ``chosen``
    (which gets the ones picked here: the caller's to keep or drop)."""
    out: dict[str, str] = {}
    for pod, name in matched:
        node = nodes.get(name)
        if node is None:
            continue
        for claim in to_bind(pod, storage):
            pick = next(
                (
                    v
                    for v in candidates(claim, storage)
                    if v.metadata.name not in chosen and _reaches(v, node)
                ),
                None,
            )
            if pick is not None:
                chosen.add(pick.metadata.name)
                continue
            provisioned = _provisioned_on(claim, storage)
            if provisioned is None or any(term_admits(t, node) for t in provisioned):
                continue
            out[pod.key] = name
            break
    return out
