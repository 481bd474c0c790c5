"""Which gang a pod belongs to and how many pods that gang needs before it may be placed.

Sources, first match wins:

1. native ``spec.schedulingGroup.podGroupName`` -> PodGroup ``scheduling.k8s.io``
   (``v1beta1``, or ``v1alpha2`` on Kubernetes 1.36),
   size ``spec.schedulingPolicy.gang.minCount``;
2. label ``scheduling.k8s.io/pod-group`` naming such a PodGroup (early v2 fluence);
3. label ``fluence.flux-framework.org/group``, size from annotation ``group-size``
   (else the PodGroup of that name when one exists);
4. label ``scheduling.x-k8s.io/pod-group`` -> scheduler-plugins PodGroup ``spec.minMember``;
5. otherwise the pod is a group of one, keyed by its own name.

The key is ``<namespace>/<name>`` so groups in different namespaces never meet.
A native PodGroup that is the child of a CompositePodGroup with a gang policy
(Kubernetes 1.37, alpha) is placed with its siblings as one group, keyed
``<namespace>/composite:<name>`` (``:`` is in no object name, so no PodGroup's
key is the same): every child whole, or nothing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from fluence import names
from fluence.pods import CompositePodGroup, Pod, PodGroup

PodGroupLookup = Callable[[str, str, str], PodGroup | None]
"""(api group, namespace, name) -> the PodGroup, or None when it is not known."""


@runtime_checkable
class CompositeView(Protocol):
    """Where CompositePodGroups and their children are looked up (the reflectors)."""

    def composite(self, namespace: str, name: str) -> CompositePodGroup | None: ...

    def children(self, namespace: str, name: str) -> Sequence[PodGroup]: ...


NATIVE = "native"
LABEL_K8S = "label-k8s"
LABEL_FLUENCE = "label-fluence"
LABEL_X_K8S = "label-x-k8s"
SINGLE = "single"
COMPOSITE = "composite"
COMPOSITE_KIND = "CompositePodGroup"


@dataclass(frozen=True)
class GroupRef:
    """A pod's gang: its key, where the membership came from, and its quorum."""

    key: str
    namespace: str
    name: str
    source: str
    min_count: int
    topology: str = ""
    """Node label key one domain of which must hold the whole group ("" when none)."""
    priority: int | None = None
    """The PodGroup's own priority (scheduling.k8s.io/v1beta1, set at admission), if any."""
    singly: bool = False
    """Its PodGroup lets its pods be preempted one at a time; else only the whole group."""
    preempts: bool = True
    """False when its PodGroup's ``preemptionPolicy`` is ``Never``."""
    unknown: bool = False
    """Its pods name a PodGroup (``spec.schedulingGroup``) not known yet: its quorum is too."""
    waiting: str = ""
    """Why its quorum is not known yet (what is missing), when ``unknown``."""
    children: tuple[str, ...] = ()
    """A composite's child PodGroups: its members are theirs."""
    child_topology: tuple[tuple[str, str], ...] = ()
    """(child PodGroup, node label key) for each child that must be in one domain of it."""

    @property
    def single(self) -> bool:
        return self.source == SINGLE


def _no_lookup(api: str, ns: str, name: str) -> PodGroup | None:
    return None


def owned_workload(kind: str, name: str, uid: str) -> str:
    """The ``created-for`` value of a PodGroup the webhook made for a controller's pods."""
    return f"{kind}/{name}/{uid}"


def made_for(pg: PodGroup, pod: Pod) -> bool:
    """Did the webhook make ``pg`` for ``pod``'s controlling owner?

    A label gang takes nothing (quorum, priority, topology) from any other
    PodGroup of its name: whoever may create PodGroups in the namespace could
    otherwise make the gang wait forever or become preemptible. Bare pods'
    PodGroups are made for a user, which the extender cannot check; the webhook
    links those pods through ``spec.schedulingGroup`` instead.
    """
    owner = pod.metadata.controller
    annotations = pg.metadata.annotations
    return (
        owner is not None
        and annotations.get(names.ANNOTATION_CREATED_BY) == names.CREATED_BY_WEBHOOK
        and annotations.get(names.ANNOTATION_CREATED_FOR)
        == owned_workload(owner.kind, owner.name, owner.uid)
    )


def group_priority(ref: GroupRef, members: Sequence[Pod]) -> int:
    """The priority a group is queued and preempts with: never above any member's own.

    Admission resolves each pod's priority from its PriorityClass; a PodGroup's
    ``spec.priority`` is only as trustworthy as its writer (and unchecked when the
    GenericWorkload gate is off), so it may lower the group's priority, never raise it.
    """
    lowest = min((m.spec.priority or 0 for m in members), default=0)
    return lowest if ref.priority is None else min(ref.priority, lowest)


def group_name(pod: Pod) -> tuple[str, str]:
    """(source, group name) of a pod, without looking at PodGroup objects."""
    sg = pod.spec.scheduling_group
    if sg and sg.pod_group_name:
        return NATIVE, sg.pod_group_name
    labels = pod.metadata.labels
    if labels.get(names.LABEL_K8S_POD_GROUP):
        return LABEL_K8S, labels[names.LABEL_K8S_POD_GROUP]
    if labels.get(names.LABEL_GROUP):
        return LABEL_FLUENCE, labels[names.LABEL_GROUP]
    if labels.get(names.LABEL_X_K8S_POD_GROUP):
        return LABEL_X_K8S, labels[names.LABEL_X_K8S_POD_GROUP]
    return SINGLE, pod.metadata.name


MAX_GROUP_SIZE = 100_000
"""Largest gang size accepted from the group-size annotation (larger: ignored)."""

_PLAIN_DECIMAL = re.compile(r"[0-9]{1,6}")


def parse_group_size(text: str) -> int | None:
    """A group-size annotation's value: a plain ASCII decimal from 1 to MAX_GROUP_SIZE, else None.

    ``int()`` also reads other scripts' digits, underscores, signs and spaces;
    what a user meant by those is a guess, so they count as no size at all.
    """
    if not _PLAIN_DECIMAL.fullmatch(text):
        return None
    size = int(text)
    return size if 1 <= size <= MAX_GROUP_SIZE else None


def identify(
    pod: Pod, lookup: PodGroupLookup = _no_lookup, composites: CompositeView | None = None
) -> GroupRef:
    """The pod's group with its quorum (1 when the size is not known yet).

    ``composites``: where a PodGroup's parent CompositePodGroup is found; without
    it every PodGroup is a group of its own.
    """
    ns = pod.metadata.namespace
    source, name = group_name(pod)
    min_count = 1
    pg: PodGroup | None = None
    if source in (NATIVE, LABEL_K8S):
        pg = lookup(names.PODGROUP_GROUP, ns, name)
        min_count = pg.min_count if pg else 1
        if source == NATIVE and pg is not None and pg.parent and composites is not None:
            whole = _composite(ns, pg.parent, composites)
            if whole is not None and (whole.unknown or pg.metadata.name in whole.children):
                return whole
    elif source == LABEL_FLUENCE:
        size = parse_group_size(pod.metadata.annotations.get(names.ANNOTATION_GROUP_SIZE, ""))
        pg = lookup(names.PODGROUP_GROUP, ns, name)
        if pg is not None and not made_for(pg, pod):
            pg = None
        if size is not None:
            min_count = size
        elif pg is not None:
            min_count = pg.min_count
    elif source == LABEL_X_K8S:
        pg = lookup(names.X_PODGROUP_GROUP, ns, name)
        min_count = pg.min_count if pg else 1
    topology = (pg.topology_key if pg else "") or pod.metadata.annotations.get(
        names.ANNOTATION_TOPOLOGY, ""
    )
    native = pg if source != LABEL_X_K8S else None
    return GroupRef(
        key=f"{ns}/{name}",
        namespace=ns,
        name=name,
        source=source,
        min_count=min_count,
        topology=topology,
        # Only the native PodGroup's: admission sets its priority from its PriorityClass
        # and its disruption mode is the API's; a CRD's spec is whatever its writer put there.
        priority=native.spec.priority if native is not None else None,
        singly=native is not None and native.disrupted_singly,
        preempts=native is None or native.spec.preemption_policy != "Never",
        unknown=source == NATIVE and pg is None,
    )


def _composite(ns: str, name: str, composites: CompositeView) -> GroupRef | None:
    """The group a child of CompositePodGroup ``ns/name`` is placed in (None: on its own)."""
    key = f"{ns}/{COMPOSITE}:{name}"
    comp = composites.composite(ns, name)
    if comp is None:
        # As kube-scheduler: no child goes before its composite is known.
        waiting = f"waiting for CompositePodGroup {ns}/{name} to exist"
        return GroupRef(key, ns, name, COMPOSITE, 1, unknown=True, waiting=waiting)
    if not comp.min_groups:
        return None
    children = sorted(
        (c for c in composites.children(ns, name) if adopted(comp, c)),
        key=lambda c: c.metadata.name,
    )
    if len(children) < comp.min_groups:
        waiting = (
            f"waiting for {comp.min_groups - len(children)} more PodGroup(s) of "
            f"CompositePodGroup {ns}/{name} ({len(children)} of {comp.min_groups} exist)"
        )
        return GroupRef(key, ns, name, COMPOSITE, 1, unknown=True, waiting=waiting)
    return GroupRef(
        key=key,
        namespace=ns,
        name=name,
        source=COMPOSITE,
        min_count=sum(c.min_count for c in children),
        topology=comp.topology_key,
        priority=comp.spec.priority,
        children=tuple(c.metadata.name for c in children),
        child_topology=tuple((c.metadata.name, c.topology_key) for c in children if c.topology_key),
    )


def adopted(comp: CompositePodGroup, child: PodGroup) -> bool:
    """Does ``comp`` consent to ``child``: is the child owned by it, or made for it?

    Naming a parent is all a PodGroup needs to do to join a composite; without
    consent anyone who may create PodGroups in the namespace could raise a
    composite's quorum until it never starts.
    """
    meta = comp.metadata
    owned = any(
        o.kind == COMPOSITE_KIND and o.name == meta.name and o.uid == meta.uid
        for o in child.metadata.owner_references
    )
    made = child.metadata.annotations.get(names.ANNOTATION_CREATED_FOR) == owned_workload(
        COMPOSITE_KIND, meta.name, meta.uid
    )
    return owned or made


def same_group(pod: Pod, ref: GroupRef) -> bool:
    """Is ``pod`` a member of ``ref``'s group?"""
    if pod.metadata.namespace != ref.namespace:
        return False
    if ref.children:
        source, name = group_name(pod)
        return source == NATIVE and name in ref.children
    return group_name(pod) == (ref.source, ref.name)


class PodsByGroup:
    """Pods indexed by their gang, so finding a gang's members does not scan every pod.

    Fed with every pod event (``update``/``remove``); thread-safe. Pods that
    are groups of one are not indexed: they have no other members.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[tuple[str, str, str], dict[str, Pod]] = {}
        self._where: dict[str, tuple[str, str, str]] = {}

    def update(self, pod: Pod) -> None:
        key = pod.key
        source, name = group_name(pod)
        slot = (pod.metadata.namespace, source, name)
        with self._lock:
            self._drop(key)
            if source == SINGLE:
                return
            self._members.setdefault(slot, {})[key] = pod
            self._where[key] = slot

    def remove(self, pod: Pod) -> None:
        with self._lock:
            self._drop(pod.key)

    def _drop(self, key: str) -> None:
        slot = self._where.pop(key, None)
        if slot is None:
            return
        members = self._members[slot]
        members.pop(key, None)
        if not members:
            del self._members[slot]

    def members(self, ref: GroupRef) -> list[Pod]:
        """The pods known to be in ``ref``'s group (same namespace, source and name)."""
        with self._lock:
            if ref.children:
                return [
                    p
                    for child in ref.children
                    for p in self._members.get((ref.namespace, NATIVE, child), {}).values()
                ]
            return list(self._members.get((ref.namespace, ref.source, ref.name), {}).values())
