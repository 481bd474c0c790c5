"""Where a pod's ResourceClaims (dynamic resource allocation) can be met, as kube-scheduler's
DynamicResources filter decides it.

A pod the queue pins to a node passes that filter only if each of its claims is
allocated with devices the node reaches (an allocated claim: its ``nodeSelector``
admits the node; an unallocated one: the node reaches enough free devices that its
DeviceClass's and its request's selectors pick). kube-scheduler allocates a pinned
pod's claims only when it binds the pod, so the queue keeps its own count of the
devices the pods it placed will take (:class:`DevicesByNode`), as it does for volumes.

Devices are counted from complete pools (the slices of a pool's newest generation, all
of them published), less those allocated to any claim (admin access takes none) and
those the queue's own placements will take; devices tainted ``NoSchedule`` or
``NoExecute`` count only for requests that tolerate the taint. A request is met by its
first choice that fits (``firstAvailable``), its devices found one request after the
other; ``matchAttribute`` constraints are met by trying each value of the attribute the
node's devices have (up to :data:`CONSTRAINED_VALUES` combinations; past that they are
left to kube-scheduler), the devices of the requests they name taken from those with
that value. An extended resource a DeviceClass backs (its ``extendedResourceName``, or
``deviceclass.resource.kubernetes.io/<class>``) asks, on a node whose allocatable lacks
it, for as many of the class's devices. Left to kube-scheduler: ``distinctAttribute``
constraints, devices shared by capacity
(``allowMultipleAllocations``: counted as free) and counters of partitionable devices,
DeviceTaintRules, and the amount of a DeviceClass-backed resource a device plugin also
gives some nodes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from fluence import names
from fluence.device_selectors import device_value, matches
from fluence.node_rules import allocatable, term_admits, unmodelled_requests
from fluence.pods import Node, NodeSelector, Pod, tolerated
from fluence.resource_claims import (
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceSlice,
    device_id,
)

REFUSING_EFFECTS = ("NoSchedule", "NoExecute")
CONSTRAINED_VALUES = 256
"""Combinations of attribute values tried for a claim's ``matchAttribute`` constraints."""

AttributeValue = tuple[str, Any]
"""An attribute's type and value: devices agree when both are equal."""
NO_VALUE: AttributeValue = ("", None)
"""No device's attribute is this."""


@dataclass(eq=False)
class Devices:
    """What the cluster says about ResourceClaims, ResourceSlices and DeviceClasses."""

    claim: Callable[[str], ResourceClaim | None]
    """``namespace/name`` -> the claim, if the cluster has it."""
    claims: Callable[[], Iterable[ResourceClaim]]
    slices: Callable[[], Iterable[ResourceSlice]]
    device_class: Callable[[str], DeviceClass | None]
    classes: Callable[[], Iterable[DeviceClass]] = tuple

    def backing(self) -> dict[str, DeviceClass]:
        """Extended resource name -> the DeviceClass whose devices a pod asking it gets on
        a node whose allocatable lacks it (its own name, or the class's implicit one)."""
        out: dict[str, DeviceClass] = {}
        for cls in self.classes():
            out[names.EXTENDED_RESOURCE_CLASS_PREFIX + cls.metadata.name] = cls
            if cls.spec.extended_resource_name:
                out[cls.spec.extended_resource_name] = cls
        return out


def uses_devices(pod: Pod) -> bool:
    return bool(pod.spec.resource_claims)


def backed(asks: Mapping[str, Decimal], backing: Mapping[str, DeviceClass]) -> dict[str, int]:
    """The extended resources of ``asks`` that DeviceClasses back, as device counts."""
    return {n: int(q.to_integral_value(ROUND_CEILING)) for n, q in asks.items() if n in backing}


def resource_claim_keys(pod: Pod) -> list[str]:
    """The ``namespace/name`` of each ResourceClaim the pod uses (made ones only)."""
    ns = pod.metadata.namespace
    return [
        f"{ns}/{name}" for e in pod.spec.resource_claims if (name := pod.resource_claim_name(e))
    ]


def unmet(pod: Pod, devices: Devices) -> str:
    """Why no node can take ``pod`` now for its ResourceClaims ("" if one may): as
    kube-scheduler, which keeps such a pod out of every node until it changes."""
    for entry in pod.spec.resource_claims:
        name = pod.resource_claim_name(entry)
        if name is None:
            continue  # its template needed no claim
        if not name:
            template = entry.resource_claim_template_name
            return f"waiting for its ResourceClaim {entry.name} to be made from {template}"
        claim = devices.claim(f"{pod.metadata.namespace}/{name}")
        if claim is None:
            return f"waiting for ResourceClaim {name} to exist"
        if claim.metadata.deletion_timestamp:
            return f"ResourceClaim {name} is being deleted"
        owner = claim.metadata.controller
        if entry.resource_claim_template_name and (owner is None or owner.uid != pod.metadata.uid):
            return f"ResourceClaim {name} was not made for it"
        if claim.status.allocation is None:
            for request in claim.spec.devices.requests:
                for choice in request.choices:
                    if devices.device_class(choice.device_class_name) is None:
                        return f"waiting for DeviceClass {choice.device_class_name} to exist"
    return ""


@dataclass
class _Entry:
    id: str
    driver: str
    device: Device
    value: dict[str, Any] | None = None

    def cel(self) -> dict[str, Any]:
        if self.value is None:
            self.value = device_value(self.driver, self.device)
        return self.value

    def attribute(self, name: str) -> AttributeValue | None:
        """Attribute ``name`` (``domain/id``; the driver's own also found by its id), as
        kube-scheduler looks it up."""
        attrs = self.device.attributes
        found = attrs.get(name)
        if found is None:
            domain, _, ident = name.partition("/")
            found = attrs.get(ident) if ident and domain == self.driver else None
        if found is None:
            return None
        for kind in ("int_", "bool_", "string", "version"):
            if (value := getattr(found, kind)) is not None:
                return kind, value
        return None


@dataclass
class DevicesByNode:
    """One round's devices: which each node reaches, which are taken, and the claims
    placed pods will have allocated on their nodes."""

    devices: Devices
    nodes: Mapping[str, Node]
    taken: set[str] = field(default_factory=set)
    """Devices allocated, or to be allocated for pods placed (by id)."""
    pending: dict[str, str] = field(default_factory=dict)
    """Claim key -> the node a placed pod will have it allocated on."""
    _reach: dict[str, list[_Entry]] = field(default_factory=dict)
    _everywhere: list[tuple[ResourceSlice, Device, _Entry]] | None = None
    _local: dict[str, list[_Entry]] | None = None
    _local_ids: set[str] = field(default_factory=set)
    _matched: dict[tuple[str, tuple[str, ...]], bool] = field(default_factory=dict)
    backing: dict[str, DeviceClass] = field(default_factory=dict)
    """Extended resources DeviceClasses back (:meth:`Devices.backing`)."""

    def __post_init__(self) -> None:
        self.backing = self.devices.backing()
        for claim in self.devices.claims():
            if claim.status.allocation is not None:
                self.taken.update(
                    r.id for r in claim.status.allocation.devices.results if not r.admin_access
                )

    # ---- what each node reaches ---------------------------------------------------------

    def _gather(self) -> None:
        """Sort the devices of complete pools into per-node ones and the others."""
        pools: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self.devices.slices():
            pools.setdefault((s.spec.driver, s.spec.pool.name), []).append(s)
        local: dict[str, list[_Entry]] = {}
        everywhere: list[tuple[ResourceSlice, Device, _Entry]] = []
        for (driver, pool), slices in sorted(pools.items()):
            newest = max(s.spec.pool.generation for s in slices)
            current = [s for s in slices if s.spec.pool.generation == newest]
            if len(current) != max(1, current[0].spec.pool.resource_slice_count):
                continue  # a pool being published: kube-scheduler takes nothing from it
            for s in sorted(current, key=lambda s: s.metadata.name):
                for d in s.spec.devices:
                    entry = _Entry(device_id(driver, pool, d.name), driver, d)
                    node = d.node_name if s.spec.per_device_node_selection else s.spec.node_name
                    if node:
                        local.setdefault(node, []).append(entry)
                        self._local_ids.add(entry.id)
                    else:
                        everywhere.append((s, d, entry))
        self._local, self._everywhere = local, everywhere

    def reach(self, node: str) -> list[_Entry]:
        """The devices ``node`` reaches, in kube-scheduler's order (driver, pool, slice)."""
        if node in self._reach:
            return self._reach[node]
        if self._local is None or self._everywhere is None:
            self._gather()
        assert self._local is not None and self._everywhere is not None
        out = list(self._local.get(node, ()))
        n = self.nodes.get(node)
        for s, d, entry in self._everywhere:
            per_device = bool(s.spec.per_device_node_selection)
            every = d.all_nodes if per_device else s.spec.all_nodes
            selector = d.node_selector if per_device else s.spec.node_selector
            if every or (n is not None and _admits(selector, n)):
                out.append(entry)
        self._reach[node] = out
        return out

    # ---- allocating -----------------------------------------------------------------------

    def _picks(self, entry: _Entry, choice: ExactDeviceRequest) -> bool:
        if any(
            t.effect in REFUSING_EFFECTS and not tolerated(choice.tolerations, t)
            for t in entry.device.taints
        ):
            return False
        cls = self.devices.device_class(choice.device_class_name)
        if cls is None:
            return False
        expressions = cls.expressions + choice.expressions
        key = (entry.id, expressions)
        if key not in self._matched:
            self._matched[key] = matches(expressions, entry.cel())
        return self._matched[key]

    def _free(self, entry: _Entry, taken: set[str]) -> bool:
        return entry.id not in taken or bool(entry.device.allow_multiple_allocations)

    def allocate(self, claim: ResourceClaim, node: str, taken: set[str]) -> list[str] | None:
        """The devices ``node`` would give ``claim`` besides ``taken`` (None: it cannot)."""
        reach = self.reach(node)
        constraints = [c for c in claim.spec.devices.constraints if c.match_attribute]
        if not constraints:
            return self._allocate(claim, reach, taken, [])
        # No device with the attribute: only requests it does not constrain can be met.
        values = [_values(reach, c) or [NO_VALUE] for c in constraints]
        for chosen in itertools.islice(itertools.product(*values), CONSTRAINED_VALUES):
            got = self._allocate(claim, reach, taken, list(zip(constraints, chosen, strict=True)))
            if got is not None:
                return got
        if math.prod(len(v) for v in values) > CONSTRAINED_VALUES:
            return self._allocate(claim, reach, taken, [])  # too many: kube-scheduler's
        return None

    def _allocate(
        self,
        claim: ResourceClaim,
        reach: list[_Entry],
        taken: set[str],
        agreed: list[tuple[DeviceConstraint, AttributeValue]],
    ) -> list[str] | None:
        """Devices for each request in turn, those of constrained requests with the
        attribute values ``agreed``."""
        mine: list[str] = []
        used = set(taken)
        for request in claim.spec.devices.requests:
            got = None
            for choice in request.choices:
                rules = [
                    (str(c.match_attribute), value)
                    for c, value in agreed
                    if _constrains(c, request, choice)
                ]
                got = self._meet(choice, reach, used, rules)
                if got is not None:
                    break
            if got is None:
                return None
            mine += got
            used.update(got)
        return mine

    def _meet(
        self,
        choice: ExactDeviceRequest,
        reach: list[_Entry],
        used: set[str],
        rules: Sequence[tuple[str, AttributeValue]] = (),
    ) -> list[str] | None:
        picked = [e for e in reach if self._picks(e, choice)]
        admin = bool(choice.admin_access)
        agreeing = [e for e in picked if all(e.attribute(n) == v for n, v in rules)]
        if choice.allocation_mode == names.ALLOCATE_ALL:
            if len(agreeing) < len(picked):
                return None  # all means all: each must agree
            if not admin and any(not self._free(e, used) for e in picked):
                return None
            return [] if admin else [e.id for e in picked]
        free = [e for e in agreeing if admin or self._free(e, used)]
        if len(free) < choice.count:
            return None
        return [] if admin else [e.id for e in free[: choice.count]]

    def fits(
        self, pod: Pod, node: str, taken: set[str], pending: Mapping[str, str]
    ) -> list[str] | None:
        """The devices ``pod``'s unallocated claims would take on ``node`` (None: a claim
        cannot be met there)."""
        got: list[str] = []
        for key in resource_claim_keys(pod):
            claim = self.devices.claim(key)
            if claim is None:
                return None
            allocation = claim.status.allocation
            if allocation is not None:
                n = self.nodes.get(node)
                if allocation.node_selector is not None and (
                    n is None or not _admits(allocation.node_selector, n)
                ):
                    return None
                continue
            if key in pending:
                if pending[key] and pending[key] != node:
                    return None
                continue
            mine = self.allocate(claim, node, taken | set(got))
            if mine is None:
                return None
            got += mine
        if pod.bound:
            return got  # what its extended resources took is in a claim of its own now
        n = self.nodes.get(node)
        for name, count in backed(unmodelled_requests(pod), self.backing).items():
            if n is not None and allocatable(n, name) > 0:
                continue  # a device plugin's: kube-scheduler counts the node's allocatable
            choice = ExactDeviceRequest(
                device_class_name=self.backing[name].metadata.name, count=count
            )
            mine = self._meet(choice, self.reach(node), taken | set(got))
            if mine is None:
                return None
            got += mine
        return got

    def refusing(self, pod: Pod) -> set[str]:
        """The nodes where ``pod``'s claims cannot be met now."""
        return {n for n in self.nodes if self.fits(pod, n, self.taken, self.pending) is None}

    def capacity(self, pods: Sequence[Pod]) -> dict[str, int]:
        """Per node, how many of ``pods`` (one after another) it meets the claims of: what
        members share out before a match (:func:`fluence.node_requests.share`)."""
        out: dict[str, int] = {}
        for n in self.nodes:
            taken, pending = set(self.taken), dict(self.pending)
            count = 0
            for pod in pods:
                got = self.fits(pod, n, taken, pending)
                if got is None:
                    continue
                taken.update(got)
                pending.update(self._pending(pod, n, got))
                count += 1
            out[n] = count
        return out

    def overflow(self, matched: Sequence[tuple[Pod, str]]) -> set[str]:
        """Nodes a match put more claims on than their free devices meet (members one
        after the other): left out of the next match."""
        taken, pending = set(self.taken), dict(self.pending)
        out: set[str] = set()
        for pod, node in matched:
            got = self.fits(pod, node, taken, pending)
            if got is None:
                out.add(node)
                continue
            taken.update(got)
            pending.update(self._pending(pod, node, got))
        return out

    def take(self, pod: Pod, node: str) -> None:
        """``pod`` goes to ``node``: its unallocated claims will take devices there."""
        got = self.fits(pod, node, self.taken, self.pending) or []
        self.taken.update(got)
        self.pending.update(self._pending(pod, node, got))

    def _pending(self, pod: Pod, node: str, got: Iterable[str]) -> dict[str, str]:
        """The claims of ``pod`` that binding it on ``node`` allocates, with ``got``: on
        ``node`` alone when a device of theirs is that node's (else "": the others who
        share the claim may go elsewhere)."""
        where = node if any(d in self._local_ids for d in got) else ""
        out = {}
        for key in resource_claim_keys(pod):
            claim = self.devices.claim(key)
            if claim is not None and claim.status.allocation is None and key not in self.pending:
                out[key] = where
        return out


def _constrains(c: DeviceConstraint, request: DeviceRequest, choice: ExactDeviceRequest) -> bool:
    """Does constraint ``c`` apply to the devices of ``request`` met by ``choice``?"""
    if not c.requests:
        return True
    return request.name in c.requests or (
        bool(choice.name) and f"{request.name}/{choice.name}" in c.requests
    )


def _values(reach: Iterable[_Entry], c: DeviceConstraint) -> list[AttributeValue]:
    """The values of ``c``'s attribute among the devices reached, each once, in order."""
    out: dict[AttributeValue, None] = {}
    for e in reach:
        value = e.attribute(str(c.match_attribute))
        if value is not None:
            out.setdefault(value, None)
    return list(out)


def _admits(selector: NodeSelector | None, node: Node) -> bool:
    if selector is None:
        return False
    return any(term_admits(t, node) for t in selector.node_selector_terms)
