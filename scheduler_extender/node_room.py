"""What kube-scheduler checks on a node that the graph does not hold: pod counts, host
ports, inter-pod affinity, topology spread, volumes, and the sums of requests the graph
does not count (:mod:`fluence.node_requests`).

The queue pins each released pod to the node Fluxion chose, and kube-scheduler then
refuses it there if the node is at its allocatable pod count, if a port the pod takes is
taken, if pod (anti-)affinity rules the node out, or if one of its claims cannot have a
volume there (:mod:`fluence.volume_nodes`); a pinned pod's spread constraints
hold only if the queue keeps to them (:mod:`fluence.topology_spread`); it refuses one
whose CSI volumes would take a node past its attach limit (:mod:`fluence.volume_limits`).
:class:`PlacedOnNodes` follows the pods of every scheduler that are bound or released
pinned to a node; once a round the queue takes a :class:`NodeRoom` from it, leaves out of
each group's match the nodes that would refuse a member, and checks the match it gets
(members that met where they may not)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from fluence.device_claims import Devices, DevicesByNode, backed, uses_devices
from fluence.device_claims import unmet as devices_unmet
from fluence.host_ports import HostPort, PortsByNode, clashes
from fluence.node_requests import Asks, RequestedByNode, most, share
from fluence.node_rules import unmodelled_requests
from fluence.pod_affinity import NamespaceLabels, NodeLabels, PlacedPods, apart, crowded
from fluence.pods import Node, Pod, pod_requests
from fluence.resource_claims import DeviceClass
from fluence.scheduling.holdings import Holding
from fluence.topology_spread import hard_constraints, unspread
from fluence.topology_spread import refusing as spread_refusing
from fluence.topology_spread import shares as spread_shares
from fluence.volume_limits import AttachedByNode, attachable, by_pod
from fluence.volume_nodes import (
    Storage,
    claim_keys,
    in_use,
    out_of_zone,
    short,
    unmet,
    unreachable,
    volume_room,
    volume_terms,
    volume_zones,
)


class PlacedOnNodes:
    """Pods of any scheduler bound to a node or released pinned to one (not ended): the
    host ports they take and the pods pod affinity counts. Callers serialise access."""

    def __init__(self, namespaces: NamespaceLabels | None = None) -> None:
        self._ports: dict[str, tuple[str, frozenset[HostPort]]] = {}
        self.affinity = PlacedPods(namespaces)
        self._claiming: dict[str, tuple[Pod, str]] = {}
        """The placed pods that use claims: those still unbound take volumes kube-scheduler
        has not bound yet."""
        self._asking: dict[str, tuple[str, Asks]] = {}
        """What placed pods ask of their node beyond the graph's resources."""
        self._using_devices: dict[str, tuple[Pod, str]] = {}
        """The placed pods with ResourceClaims or extended resources (which a DeviceClass
        may back): those still unbound will have devices allocated that no claim shows."""

    def put(self, key: str, node: str, pod: Pod | None) -> None:
        """``pod`` is on ``node`` now (no pod or no node: it is gone, or not placed yet)."""
        ports = pod.host_ports if pod is not None and node else frozenset()
        if ports:
            self._ports[key] = (node, ports)
        else:
            self._ports.pop(key, None)
        self.affinity.put(key, node, pod)
        if pod is not None and node and claim_keys(pod):
            self._claiming[key] = (pod, node)
        else:
            self._claiming.pop(key, None)
        asks = unmodelled_requests(pod) if pod is not None and node else {}
        if pod is not None and node and (uses_devices(pod) or asks):
            # Extended resources DeviceClasses back may take devices too.
            self._using_devices[key] = (pod, node)
        else:
            self._using_devices.pop(key, None)
        if asks:
            self._asking[key] = (node, asks)
        else:
            self._asking.pop(key, None)

    def room(
        self,
        limits: dict[str, int],
        held: Iterable[Holding],
        nodes: Callable[[], Mapping[str, Node]],
        storage: Storage | None = None,
        free: Callable[[], Mapping[str, Mapping[str, int]]] | None = None,
        devices: Devices | None = None,
    ) -> NodeRoom:
        """What one round works from: a copy, which the round's own placements add to."""
        taken = PortsByNode()
        for node, used in self._ports.values():
            taken.add(node, used)
        placed = PlacedPods(self.affinity.namespaces)
        placed.on = dict(self.affinity.on)
        placed.repelling = dict(self.affinity.repelling)
        if storage is not None:
            storage = storage.for_round()
        room = NodeRoom(
            limits, Counter(h.node for h in held if h.node), taken, placed, nodes, storage
        )
        room.read_free = free
        room.devices = devices
        room.using_devices = list(self._using_devices.values())
        for node, asks in self._asking.values():
            room.requested.add(node, asks)
        if storage is not None and self._claiming:
            # Released pods whose claims kube-scheduler has yet to bind will take volumes.
            short(self._claiming.values(), room.nodes(), storage, room.volumes_taken)
            room.claim_users = {
                claim: pod.key for pod, _ in self._claiming.values() for claim in claim_keys(pod)
            }
            room.claimed = list(self._claiming.values())
        return room


@dataclass
class NodeRoom:
    """Each node's pod limit and the pods held on it, the host ports taken and the pods
    placed there, as one round sees them."""

    limits: dict[str, int]
    counts: Counter[str]
    ports: PortsByNode = field(default_factory=PortsByNode)
    placed: PlacedPods = field(default_factory=PlacedPods)
    read_nodes: Callable[[], Mapping[str, Node]] = dict
    storage: Storage | None = None
    """Claims, volumes and classes (None: volumes are left to kube-scheduler)."""
    volumes_taken: set[str] = field(default_factory=set)
    """Volumes pods placed before will bind to (by name)."""
    claim_users: dict[str, str] = field(default_factory=dict)
    """Claim key -> a placed pod that uses it."""
    requested: RequestedByNode = field(default_factory=RequestedByNode)
    """What placed pods ask of each node beyond the graph's resources."""
    claimed: list[tuple[Pod, str]] = field(default_factory=list)
    """Placed pods that use claims, and their nodes."""
    read_free: Callable[[], Mapping[str, Mapping[str, int]]] | None = None
    """Per node, the graph's free units by type (None: domains are dealt by count alone)."""
    _nodes: Mapping[str, Node] | None = None
    _labels: NodeLabels | None = None
    _free: dict[str, dict[str, int]] | None = None
    devices: Devices | None = None
    """ResourceClaims, ResourceSlices and DeviceClasses (None: left to kube-scheduler)."""
    using_devices: list[tuple[Pod, str]] = field(default_factory=list)
    """Placed pods with ResourceClaims or extended resources, and their nodes."""
    _attached: AttachedByNode | None = None
    _by_node: DevicesByNode | None = None
    _backing: dict[str, DeviceClass] | None = None
    _requests: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    """Pod key -> :func:`unmodelled_requests`, summed once a round."""
    _by_left: dict[int, set[str]] | None = None
    """Places left under the pod limit (0: full) -> the nodes with so many, worked out the
    first time a round asks and kept up by :meth:`take`: each group asks, and a deep queue
    on a large cluster would otherwise walk every node's limit per group."""
    _full: frozenset[str] | None = None
    """The nodes with no place left (:meth:`full`), until a match fills another."""

    def nodes(self) -> Mapping[str, Node]:
        """The nodes, read once a round and only when affinity or spread is in play."""
        if self._nodes is None:
            self._nodes = self.read_nodes()
        return self._nodes

    def free(self) -> dict[str, dict[str, int]] | None:
        """The graph's free units per node, read once a round (when members are dealt out
        over zones) and less what the round's own matches take."""
        if self._free is None and self.read_free is not None:
            self._free = {n: dict(units) for n, units in self.read_free().items()}
        return self._free

    def attached(self) -> AttachedByNode | None:
        """CSI volumes attached or used per node with attach limits, worked out the first
        time a pod with claims is placed in a round (None or empty: left to
        kube-scheduler)."""
        if self._attached is None and self.storage is not None:
            self._attached = AttachedByNode(self.storage)
            if self._attached:
                for pod, node in self.claimed:
                    self._attached.add(node, attachable(pod, self.storage))
        return self._attached

    def devices_by_node(self) -> DevicesByNode | None:
        """Devices per node, less those allocated or to be allocated for pods placed,
        worked out the first time a pod with ResourceClaims is placed in a round."""
        if self._by_node is None and self.devices is not None:
            self._by_node = DevicesByNode(self.devices, self.nodes())
            for pod, node in self.using_devices:
                self._by_node.take(pod, node)
        return self._by_node

    def _backed(self, pod: Pod) -> dict[str, int]:
        """The extended resources of ``pod`` that DeviceClasses back (read once a round)."""
        asks = self._unmodelled(pod) if self.devices is not None else {}
        if not asks:
            return {}
        if self._backing is None:
            assert self.devices is not None
            self._backing = self.devices.backing()
        return backed(asks, self._backing)

    def _uses_devices(self, pod: Pod) -> bool:
        return self.devices is not None and (uses_devices(pod) or bool(self._backed(pod)))

    def _asks(self, pod: Pod) -> Mapping[str, Decimal]:
        """What ``pod`` asks of its node's allocatable beyond the graph, less what
        DeviceClasses back (counted in devices: :meth:`devices_by_node`)."""
        asks = self._unmodelled(pod)
        if asks and self.devices is not None and (backed := self._backed(pod)):
            return {n: q for n, q in asks.items() if n not in backed}
        return asks

    def _unmodelled(self, pod: Pod) -> dict[str, Decimal]:
        asks = self._requests.get(pod.key)
        if asks is None:
            asks = self._requests[pod.key] = unmodelled_requests(pod)
        return asks

    def labels(self) -> NodeLabels:
        if self._labels is None:
            self._labels = {n: node.metadata.labels for n, node in self.nodes().items()}
        return self._labels

    def _left(self) -> dict[int, set[str]]:
        if self._by_left is None:
            self._by_left = {}
            for n, limit in self.limits.items():
                self._by_left.setdefault(max(limit - self.counts[n], 0), set()).add(n)
        return self._by_left

    def places_free_by(
        self,
        nodes: Collection[str],
        needed: int,
        now: float,
        ends: Mapping[str, Sequence[float]],
    ) -> float | None:
        """When ``needed`` places under the pod limits of ``nodes`` are free, at the latest,
        by ``ends``, when the pods held on each node are planned to end (``now`` if they are
        free; None: not foreseeable, too many of those pods are held until released)."""
        free = sum(max(self.limits[n] - self.counts[n], 0) for n in nodes if n in self.limits)
        if free >= needed:
            return now
        planned = sorted(e for n in nodes for e in ends.get(n, ()))
        short = needed - free
        if short > len(planned) or planned[short - 1] == math.inf:
            return None
        return max(planned[short - 1], now)

    def full(self) -> frozenset[str]:
        """The nodes at their pod limit: none of the round's pods may go there. One set
        until a match fills a node, so that the groups of a round share it, and what is
        worked out from it, rather than each copying thousands of names."""
        if self._full is None:
            self._full = frozenset(self._left().get(0, ()))
        return self._full

    def room_for(self, pods: Sequence[Pod]) -> dict[str, int]:
        """The nodes whose pod limit leaves room for fewer of ``pods`` than they are and
        than the node's free resources take (a limit that cannot bind deals nothing out),
        and that room."""
        by_left = self._left()
        short = {n: left for left, nodes in by_left.items() if 0 < left < len(pods) for n in nodes}
        free = self.free() if short else None
        if not free:
            return short
        asks = [pod_requests(p) for p in pods]
        least = {t: min(a.get(t, 0) for a in asks) for t in set().union(*asks)}
        least = {t: q for t, q in least.items() if q > 0}
        if not least:
            return short
        return {
            n: left
            for n, left in short.items()
            if n not in free or min(free[n].get(t, 0) // q for t, q in least.items()) > left
        }

    def past(self, more: Counter[str]) -> set[str]:
        """The nodes ``more`` pods would fill past their limit."""
        return {
            n for n, c in more.items() if n in self.limits and self.counts[n] + c > self.limits[n]
        }

    def refusing(self, pods: Sequence[Pod], places: bool = True) -> dict[str, set[str]]:
        """Per pod of ``pods``, the nodes beside those :meth:`full` that would refuse it:
        for a group, those with room under their pod limit for fewer members than it has
        (dealt out; not when ``places`` is False), one of its ports taken, ruled out by pod
        affinity with the pods placed, by its spread, where one of its claims cannot have a
        volume, or where its volumes would go past an attach limit."""
        out = {p.key: self.ports.refusing(p.host_ports) for p in pods}
        if places and len(pods) > 1:
            # Members share the places left under each node's pod limit: a match packs
            # them, and a node with room for fewer would be refused after it.
            for key, nodes in share(self.room_for(pods), sorted(out)).items():
                out[key] |= nodes
        if self.placed.repelling or any(_has_affinity(p) for p in pods):
            for key, nodes in self.placed.refusing(pods, self.labels()).items():
                out[key] |= nodes
            if any(p.anti_affinity_terms for p in pods):
                full = self.full()
                refused = {k: nodes | full for k, nodes in out.items()}
                dealt = apart(pods, self.labels(), refused, self.placed.namespaces)
                for key, nodes in dealt.items():
                    out[key] |= nodes
        if any(hard_constraints(p) for p in pods):
            placed = self.placed.on.values()
            # Members dealt out over zones are checked together once matched (unspread):
            # alone, each would be kept out of the zones others of its kind are dealt to.
            dealt = spread_shares(pods, self.nodes(), placed, self.free)
            for key, nodes in spread_refusing(pods, self.nodes(), placed).items():
                out[key] |= dealt.get(key, nodes)
        storage = self.storage
        claiming = [p for p in pods if claim_keys(p)] if storage is not None else []
        for p in claiming:
            assert storage is not None
            terms, zones = volume_terms(p, storage), volume_zones(p, storage)
            if terms or zones:
                out[p.key] |= {
                    n
                    for n, node in self.nodes().items()
                    if unreachable(node, terms) or out_of_zone(node, zones)
                }
        if len(claiming) > 1:
            # Members share the volumes made in advance on each node, one set each.
            assert storage is not None
            members, room = volume_room(claiming, self.nodes(), storage, self.volumes_taken)
            if len(members) > 1:
                for key, nodes in share(room, members).items():
                    out[key] |= nodes
        attached = self.attached() if claiming else None
        if attached:
            assert storage is not None
            attaching = by_pod(claiming, storage)
            if len(attaching) > 1:
                # Members share each node's attach limits, as for volumes made in advance.
                capacity = attached.capacity(attaching.values(), self.nodes())
                for key, nodes in share(capacity, sorted(attaching)).items():
                    out[key] |= nodes
            for key, volumes in attaching.items():
                out[key] |= attached.refusing(volumes)
        by_node = self.devices_by_node() if any(self._uses_devices(p) for p in pods) else None
        if by_node is not None:
            using = [p for p in pods if self._uses_devices(p)]
            for p in using:
                out[p.key] |= by_node.refusing(p)
            if len(using) > 1:
                # Members share each node's free devices, as its attach limits.
                capacity = by_node.capacity(using)
                for key, nodes in share(capacity, sorted(p.key for p in using)).items():
                    out[key] |= nodes
        asking = {p.key: asks for p in pods if (asks := self._asks(p))}
        if len(asking) > 1:
            # Members share each node's room for what the graph does not hold.
            capacity = self.requested.capacity(most(asking.values()), self.nodes())
            for key, nodes in share(capacity, sorted(asking)).items():
                out[key] |= nodes
        elif asking and self.requested.on:
            for key, asks in asking.items():
                out[key] |= self.requested.refusing(asks, self.nodes())
        return out

    def claims_unmet(self, pods: Sequence[Pod]) -> str:
        """Why no node can take one of ``pods`` now for its volume or resource claims
        ("" if none)."""
        if self.devices is not None:
            for p in pods:
                why = devices_unmet(p, self.devices) if uses_devices(p) else ""
                if why:
                    return f"pod {p.metadata.name}: {why}"
        if self.storage is None:
            return ""
        claiming = [p for p in pods if claim_keys(p)]
        for p in claiming:
            why = unmet(p, self.storage)
            if why:
                return f"pod {p.metadata.name}: {why}"
        return in_use(claiming, self.claim_users, self.storage) if claiming else ""

    def clashing(self, placed: Mapping[str, Holding], pods: Mapping[str, Pod]) -> set[str]:
        """Nodes a match just made filled past their limit, past their room for what the
        graph does not hold or past an attach limit, or put members on that take one
        port, that pod affinity keeps apart (or together), or that their spread would not
        take: left out of the next."""
        mine = Counter(h.node for h in placed.values() if h.node)
        out = self.past(mine) | _meeting(placed.values(), pods)
        matched = [(pods[k], h.node) for k, h in placed.items() if k in pods and h.node]
        asking = [(p.key, n, asks) for p, n in matched if (asks := self._asks(p))]
        if asking:
            out |= set(self.requested.overflow(asking, self.nodes()).values())
        attached = self.attached() if any(claim_keys(p) for p, _ in matched) else None
        if attached:
            assert self.storage is not None
            volumes = by_pod((p for p, _ in matched), self.storage)
            attaching = [(p.key, n, volumes[p.key]) for p, n in matched if p.key in volumes]
            out |= set(attached.overflow(attaching).values())
        using = [(p, n) for p, n in matched if self._uses_devices(p)]
        by_node = self.devices_by_node() if using else None
        if by_node is not None:
            out |= by_node.overflow(using)
        if any(_has_affinity(p) for p, _ in matched):
            out |= crowded(matched, self.labels(), self.placed.namespaces)
        if any(hard_constraints(p) for p, _ in matched):
            out |= unspread(matched, self.nodes(), self.placed.on.values())
        return out

    def unmet(
        self,
        placed: Mapping[str, Holding],
        pods: Mapping[str, Pod],
        left_out: Mapping[str, set[str]],
    ) -> dict[str, set[str]]:
        """Members a match put where their claims would not each get a volume of their own
        (more claims than local volumes left): per member, the node to leave out of the
        next match for it alone (the others may still take the volumes there). Members
        with the fewest nodes left (``left_out``) get the volumes first."""
        if self.storage is None:
            return {}
        matched = [(pods[k], h.node) for k, h in placed.items() if k in pods and h.node]
        claiming = [(p, n) for p, n in matched if claim_keys(p)]
        if not claiming:
            return {}
        claiming.sort(key=lambda pn: -len(left_out.get(pn[0].key, ())))
        missed = short(claiming, self.nodes(), self.storage, set(self.volumes_taken))
        return {key: {node} for key, node in missed.items()}

    def take(self, placed: Mapping[str, Holding], pods: Mapping[str, Pod]) -> None:
        """A match is kept: the round's next groups see its pods, ports and labels."""
        more = Counter(h.node for h in placed.values() if h.node)
        if self._by_left is not None:
            for n in more.keys() & self.limits.keys():
                limit = self.limits[n]
                self._by_left[max(limit - self.counts[n], 0)].discard(n)
                after = max(limit - self.counts[n] - more[n], 0)
                self._by_left.setdefault(after, set()).add(n)
                if after == 0:
                    self._full = None
        self.counts.update(more)
        claiming: list[tuple[Pod, str]] = []
        for key, h in placed.items():
            pod = pods.get(key)
            if pod is None or not h.node:
                continue
            self.ports.add(h.node, pod.host_ports)
            self.placed.put(key, h.node, pod)
            if self._free is not None and h.node in self._free:
                units = self._free[h.node]
                for t, q in pod_requests(pod).items():
                    units[t] = units.get(t, 0) - q
            asks = self._asks(pod)
            if asks:
                self.requested.add(h.node, asks)
            if self._uses_devices(pod):
                self.using_devices.append((pod, h.node))
                if self._by_node is not None:
                    self._by_node.take(pod, h.node)
            if self.storage is not None and claim_keys(pod):
                claiming.append((pod, h.node))
        if claiming:
            assert self.storage is not None
            short(claiming, self.nodes(), self.storage, self.volumes_taken)
            for p, n in claiming:
                self.claim_users.update(dict.fromkeys(claim_keys(p), p.key))
                self.claimed.append((p, n))
                if self._attached:
                    self._attached.add(n, attachable(p, self.storage))


def _has_affinity(pod: Pod) -> bool:
    return bool(pod.affinity_terms or pod.anti_affinity_terms)


def _meeting(held: Iterable[Holding], pods: Mapping[str, Pod]) -> set[str]:
    """Nodes where two of the just-matched ``held`` pods take clashing host ports."""
    on: dict[str, list[frozenset[HostPort]]] = {}
    out: set[str] = set()
    for h in held:
        pod = pods.get(h.pod)
        ports = pod.host_ports if pod is not None else frozenset()
        if not ports or not h.node:
            continue
        if any(clashes(ports, other) for other in on.get(h.node, ())):
            out.add(h.node)
        on.setdefault(h.node, []).append(ports)
    return out
