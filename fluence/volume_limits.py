"""How many volumes each CSI driver may attach to a node, counted as kube-scheduler's
NodeVolumeLimits filter counts them.

A node's CSINode says, per driver, how many of its volumes the node can attach
(``allocatable.count``). kube-scheduler refuses a pod on a node where the volumes its
claims would add, beside those the node's pods use and those attached to it
(VolumeAttachments), exceed a driver's count; a volume two pods share counts once, and a
claim not bound yet counts as a new volume of its class's provisioner. The queue pins
pods to nodes, so it counts the same: :func:`attachable` names a pod's volumes and
:class:`AttachedByNode` says which nodes a pod would take past a count, how many of a
group's members each node can take, and which members of a match go past a count
together.

Left to kube-scheduler: in-tree volumes it translates to a CSI driver (CSI migration).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from fluence.pods import Pod
from fluence.volume_nodes import Storage, claim_class, claim_keys

Volumes = dict[str, str]
"""A volume's unique name (``driver/handle``) -> its driver."""


def attachable(pod: Pod, storage: Storage) -> Volumes:
    """The volumes the pod's claims attach: a bound claim's CSI volume, or for a claim not
    bound yet (or whose volume is gone) one new volume of its class's provisioner."""
    out: Volumes = {}
    for key in claim_keys(pod):
        claim = storage.claim(key)
        if claim is None:
            continue
        name = claim.spec.volume_name
        volume = storage.volume(name) if name else None
        if volume is not None:
            csi = volume.spec.csi
            if csi is not None and csi.driver and csi.volume_handle:
                out[f"{csi.driver}/{csi.volume_handle}"] = csi.driver
            continue
        cls_name = claim_class(claim)
        cls = storage.storage_class(cls_name) if cls_name else None
        if cls is not None and cls.provisioner:
            # Not a handle any real volume has: it counts once, as a volume of its own.
            out[f"{cls.provisioner}/claim {key}"] = cls.provisioner
    return out


class AttachedByNode:
    """Per node with a limit, its limits per driver and the volumes attached or used there."""

    def __init__(self, storage: Storage) -> None:
        self.limits: dict[str, dict[str, int]] = {}
        for csi_node in storage.csi_nodes():
            counts = {
                d.name: d.allocatable.count
                for d in csi_node.spec.drivers
                if d.allocatable is not None and d.allocatable.count is not None
            }
            if counts:
                self.limits[csi_node.metadata.name] = counts
        self.on: dict[str, Volumes] = {n: {} for n in self.limits}
        if not self.limits:
            return
        for va in storage.attachments():
            spec = va.spec
            name = spec.source.persistent_volume_name
            if spec.node_name not in self.on or not spec.attacher or not name:
                continue
            volume = storage.volume(name)
            csi = volume.spec.csi if volume is not None else None
            if csi is not None:
                self.on[spec.node_name][f"{spec.attacher}/{csi.volume_handle}"] = spec.attacher

    def __bool__(self) -> bool:
        return bool(self.limits)

    def add(self, node: str, volumes: Volumes) -> None:
        if node in self.on:
            self.on[node].update(volumes)

    def _added(self, node: str, volumes: Volumes) -> Counter[str]:
        """Per driver with a limit on ``node``, how many of ``volumes`` are new there."""
        limits, there = self.limits.get(node, {}), self.on.get(node, {})
        return Counter(d for v, d in volumes.items() if d in limits and v not in there)

    def _past(self, node: str, added: Counter[str]) -> bool:
        used = Counter(self.on[node].values())
        return any(used[d] + n > self.limits[node][d] for d, n in added.items())

    def refusing(self, volumes: Volumes) -> set[str]:
        """The nodes where ``volumes`` would take a driver past its count."""
        return {n for n in self.limits if self._past(n, self._added(n, volumes))}

    def capacity(self, members: Iterable[Volumes], nodes: Iterable[str]) -> dict[str, int]:
        """How many of ``members`` each node can take, each served as the one adding most
        volumes of each driver (``len(members)`` where no count binds)."""
        members = list(members)
        out = {}
        for n in nodes:
            if n not in self.limits:
                out[n] = len(members)
                continue
            need: Counter[str] = Counter()
            for m in members:
                need |= self._added(n, m)
            used = Counter(self.on[n].values())
            room = [(self.limits[n][d] - used[d]) // k for d, k in need.items() if k]
            out[n] = max(0, min(room)) if room else len(members)
        return out

    def overflow(self, matched: Iterable[tuple[str, str, Volumes]]) -> dict[str, str]:
        """Of the members a match put on nodes (key, node, volumes), in the order given,
        those whose volumes would take a driver past its count beside the ones before
        them: key -> node."""
        extra: dict[str, Volumes] = {}
        out: dict[str, str] = {}
        for key, n, volumes in matched:
            if n not in self.limits or not volumes:
                continue
            mine = extra.setdefault(n, {})
            added = self._added(n, {**mine, **volumes})
            if self._past(n, added):
                out[key] = n
                continue
            mine.update(volumes)
        return out


def by_pod(pods: Iterable[Pod], storage: Storage) -> Mapping[str, Volumes]:
    """Each of ``pods`` that attaches volumes: key -> its volumes."""
    return {p.key: v for p in pods if claim_keys(p) and (v := attachable(p, storage))}
