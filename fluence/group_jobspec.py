"""Pod group -> Fluxion jobspecs.

One *compute* jobspec per distinct pod shape (heterogeneous groups get one
slot shape each; the matcher takes one top-level slot per jobspec, so the
shapes are matched one after another under one lock, all or nothing),
constrained to ``virtual=false`` and, when some nodes are off limits for the
group, ``not hostlist``. Then one *device* jobspec per requested virtual type,
as the Go fluence does: ``slot{node: count}`` constrained to ``virtual=true``,
``class=<type>`` and every ``require-<attr>`` annotation of the group's pods.
Members that take the same host port (protocol and number) cannot share a node:
each set of them linked so is matched as ``node{slot}`` (one slot on each of distinct
nodes), for those pods alone.
Each carries the group's expected runtime as its duration (``0``: unknown,
held until released), so the planner knows when its capacity frees.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fluence import names
from fluence.host_ports import port_links
from fluence.pod_affinity import repelling
from fluence.pods import Pod, Split, pod_requests, split_requests
from fluence.topology_spread import spread_per_node

VERSION = 9999
COMPUTE_LABEL = "default"
DEVICE_LABEL = "device"


class JobspecError(ValueError):
    """The group cannot be turned into a jobspec; the message says why and what to change."""


Shape = tuple[tuple[str, int], ...]
"""A pod's node-resource request as sorted (type, amount) pairs: the slot it needs."""


@dataclass(frozen=True)
class ComputeSpec:
    shape: Shape
    count: int
    jobspec: dict[str, Any]
    pods: tuple[str, ...] = ()
    """The pods (keys) its slots are for, when only those may take them (a composite's
    child constrained to one domain); empty: any pods of its shape."""


@dataclass(frozen=True)
class DeviceSpec:
    type: str
    count: int
    jobspec: dict[str, Any]


@dataclass(frozen=True)
class GroupSpecs:
    compute: tuple[ComputeSpec, ...]
    devices: tuple[DeviceSpec, ...]

    def jobspecs(self) -> list[dict[str, Any]]:
        """Every jobspec, compute first, in the order they are matched."""
        return [c.jobspec for c in self.compute] + [d.jobspec for d in self.devices]


def shape_of(pod: Pod) -> Shape:
    compute, _ = split_requests(pod_requests(pod))
    return tuple(sorted(compute.items()))


def _constraints(
    props: Sequence[str], exclude: Collection[str], within: Sequence[str] = ()
) -> dict[str, Any]:
    base: dict[str, Any] = {"properties": list(props)}
    parts: list[dict[str, Any]] = [base]
    if within:
        parts.append({"hostlist": sorted(within)})
    if exclude:
        parts.append({"not": [{"hostlist": sorted(exclude)}]})
    return base if len(parts) == 1 else {"and": parts}


GROUP_TASK = "pod-group"
"""The command of a group's task. The matcher does not read it, and naming no group keeps
the jobspecs of alike groups the same text: the text a failed match is remembered by."""


def _jobspec(
    slot_count: int,
    label: str,
    with_: list[dict[str, Any]],
    constraints: dict[str, Any],
    command: str,
    duration: int = 0,
    per_node: bool = False,
) -> dict[str, Any]:
    if per_node:
        slot = {"type": "slot", "count": 1, "label": label, "with": with_}
        resources = [{"type": "node", "count": slot_count, "with": [slot]}]
    else:
        resources = [{"type": "slot", "count": slot_count, "label": label, "with": with_}]
    return {
        "version": VERSION,
        "resources": resources,
        "attributes": {"system": {"constraints": constraints, "duration": duration}},
        "tasks": [{"command": [command], "slot": label, "count": {"per_slot": 1}}],
    }


def with_duration(jobspec: Mapping[str, Any], duration: int) -> dict[str, Any]:
    """A copy of ``jobspec`` asking for ``duration`` seconds (0: the rest of the horizon)."""
    attributes = dict(jobspec.get("attributes") or {})
    attributes["system"] = {**(attributes.get("system") or {}), "duration": duration}
    return {**jobspec, "attributes": attributes}


def compute_jobspec(
    shape: Shape,
    count: int,
    command: str,
    exclude: Collection[str] = (),
    within: Sequence[str] = (),
    duration: int = 0,
    per_node: bool = False,
) -> dict[str, Any]:
    """``count`` slots of ``shape`` on nodes not in ``exclude`` (and in ``within``, if given);
    ``per_node``: each on a node of its own."""
    with_ = [{"type": t, "count": n} for t, n in shape]
    constraints = _constraints([names.PROPERTY_VIRTUAL_FALSE], exclude, within)
    return _jobspec(count, COMPUTE_LABEL, with_, constraints, command, duration, per_node)


def require_properties(pods: Iterable[Pod]) -> list[str]:
    """``require-<attr>: v`` annotations of every pod -> sorted unique properties."""
    props: set[str] = set()
    for p in pods:
        for k, v in p.metadata.annotations.items():
            if k.startswith(names.ANNOTATION_REQUIRE_PREFIX) and v:
                props.add(names.attr_property(k[len(names.ANNOTATION_REQUIRE_PREFIX) :], v))
    return sorted(props)


def device_jobspec(
    rtype: str, count: int, command: str, require: Sequence[str] = (), duration: int = 0
) -> dict[str, Any]:
    props = [names.PROPERTY_VIRTUAL_TRUE, names.PROPERTY_CLASS_PREFIX + rtype, *require]
    return _jobspec(
        1,
        DEVICE_LABEL,
        [{"type": "node", "count": count}],
        {"properties": props},
        command,
        duration,
    )


def group_jobspecs(
    group: str,
    pods: Sequence[Pod],
    known_types: Iterable[str],
    exclude: Collection[str] = (),
    *,
    split: Mapping[str, Split] | None = None,
    within: Sequence[str] = (),
    duration: int = 0,
    exclude_for: Mapping[str, Collection[str]] | None = None,
    spread_over: Callable[[], int] | None = None,
) -> GroupSpecs:
    """The jobspecs that place ``pods`` (members still to place) of ``group``.

    Pods that need nothing from a node (a quantum-only pod) get no compute slot.
    Device counts are the maximum any member asks for: one backend serves the group.
    ``split``: each pod's (compute, devices) requests by pod key, when the caller
    has worked them out already. ``within``: the only nodes the compute slots may use
    (one topology domain), when given. ``duration``: the group's expected runtime.
    ``exclude_for``: nodes some members may not use beyond ``exclude`` (by pod key):
    those members get specs of their own. ``spread_over``: how many nodes members spread
    per node may spread over; more such members than that are matched in rounds of that
    many, each on distinct nodes (so no node gets two more than another).
    """
    if not pods:
        raise JobspecError(f"pod group {group!r} has no pods to place")
    shapes: dict[Shape, int] = {}
    named: dict[tuple[Shape, str, frozenset[str]], list[str]] = {}
    apart, strict = kept_apart(pods)
    devices: dict[str, int] = {}
    for p in pods:
        compute, dev = split[p.key] if split is not None else split_requests(pod_requests(p))
        if compute:
            shape = tuple(sorted(compute.items()))
            root = apart.get(p.key, "")
            extra = frozenset(exclude_for.get(p.key, ())) if exclude_for else frozenset()
            if root or extra:
                named.setdefault((shape, root, extra), []).append(p.key)
            else:
                shapes[shape] = shapes.get(shape, 0) + 1
        for t, n in dev.items():
            devices[t] = max(devices.get(t, 0), n)
    known = set(known_types)
    for t in sorted(devices):
        if t not in known:
            where = (
                "which is not in the resources config (FLUENCE_RESOURCES)"
                if known
                else "but no resources config (FLUENCE_RESOURCES) is loaded"
            )
            raise JobspecError(
                f"pod group {group!r} requests {names.resource_name(t)} {where}; "
                "remove the request or add that type to the config"
            )
    require = require_properties(pods)
    # Specs for named pods come before the other specs of their shape, which take the
    # shape's pods in order (fluence.scheduling.match).
    # Named specs kept off more nodes go first: they have the fewest places to go.
    plain: list[tuple[Shape, int, tuple[str, ...], frozenset[str], bool]] = [
        (shape, n, (), frozenset(), False) for shape, n in shapes.items()
    ]
    width = 0
    if spread_over is not None and any(
        root and root not in strict and len(keys) > 1 for (_, root, _), keys in named.items()
    ):
        width = spread_over()
    by_weight = sorted(
        plain
        + [
            (shape, len(chunk), tuple(chunk), extra, bool(root))
            for (shape, root, extra), keys in named.items()
            for chunk in _rounds(keys, width if root and root not in strict else 0)
        ],
        key=lambda s: (-_weight(s[0]), s[0], not s[2], -len(s[3]), s[2]),
    )
    compute_specs = tuple(
        ComputeSpec(
            shape,
            n,
            compute_jobspec(
                shape,
                n,
                GROUP_TASK,
                sorted(set(exclude) | extra) if extra else exclude,
                within,
                duration,
                per_node=per_node,
            ),
            keys,
        )
        for shape, n, keys, extra, per_node in by_weight
    )
    device_specs = tuple(
        DeviceSpec(t, n, device_jobspec(t, n, GROUP_TASK, require, duration))
        for t, n in sorted(devices.items())
    )
    return GroupSpecs(compute_specs, device_specs)


def _rounds(keys: list[str], width: int) -> list[list[str]]:
    """``keys`` in rounds of ``width`` (0, or no more keys than that: one round)."""
    if width <= 0 or len(keys) <= width:
        return [keys]
    return [keys[i : i + width] for i in range(0, len(keys), width)]


def kept_apart(pods: Sequence[Pod]) -> tuple[dict[str, str], set[str]]:
    """Members to match on distinct nodes -> the first of the set they are linked in: they
    take one host port, or one's per-node anti-affinity or spread picks the other; and
    the sets that must be apart (ports, anti-affinity), not only spread evenly."""
    root: dict[str, str] = {}

    def find(k: str) -> str:
        root.setdefault(k, k)
        while root[k] != k:
            root[k] = root[root[k]]
            k = root[k]
        return k

    hard = port_links(pods) + repelling(pods)
    for a, b in hard + spread_per_node(pods):
        ra, rb = find(a), find(b)
        if ra != rb:
            root[rb] = ra
    return {k: find(k) for k in list(root)}, {find(a) for a, _ in hard}


def _weight(shape: Shape) -> int:
    """Bigger shapes are matched first, so the small ones fill the gaps they leave."""
    d: Mapping[str, int] = dict(shape)
    return d.get("core", 0) * 1_000_000 + d.get("gpu", 0) * 1000 + d.get("memory", 0)
