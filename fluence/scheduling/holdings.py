"""Who holds what: one holding per pod, and the backend devices a group's members share.

A holding is ``tentative`` (matched at filter time, not bound yet),
``committed`` (bound; its record is on the pod) or ``foreign`` (a pod fluence
did not place, or whose record it does not trust: its requests are held on its
node while it runs). This module owns the holdings' shape and their index by
group; it never matches, and never reads the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fluence import names, qrmi
from fluence.cluster_graph import ClusterGraph
from fluence.placement import BackendChoice
from fluence.scheduling.record import (
    AllocationRecord,
    BackendRecord,
    DeviceRecord,
    PendingMember,
    RecordSeal,
    encode_record,
)
from fluxion_nb.errors import NotFoundError, StateError

log = logging.getLogger(__name__)

TENTATIVE = "tentative"
COMMITTED = "committed"
FOREIGN = "foreign"


@dataclass
class Holding:
    pod: str
    uid: str
    group: str
    node: str
    amounts: dict[str, int]
    jobid: int
    state: str
    since: float
    backend: BackendChoice | None = None
    """The first of ``backends``: the one ``QRMI_BACKEND`` and the record name."""
    devices: list[DeviceRecord] = field(default_factory=list)
    backends: list[BackendChoice] = field(default_factory=list)
    """Every backend the group got, in order (a pod asking for two qpus gets two)."""
    seen_bound: bool = False
    """The watch has shown the pod bound where this holding is."""
    placed: float = 0.0
    """When the group's match made this holding; filter retries do not move it."""
    runtime: int = 0
    """Expected runtime in seconds (0: until released): how long the graph plans it held."""
    priority: int = 0
    """The group's priority when it was placed: who may preempt it."""
    singly: bool = False
    """Its group (a PodGroup with ``disruptionMode`` single) may lose this pod alone."""

    @property
    def unit(self) -> str:
        """What preemption takes at once: the pod (``"pod <key>"``) or its whole group."""
        return f"pod {self.pod}" if self.singly else self.group

    def record(self, pending: Sequence[PendingMember] = ()) -> AllocationRecord:
        return AllocationRecord(
            group=self.group,
            node=self.node,
            amounts=dict(self.amounts),
            jobid=self.jobid,
            backend=self.backend.name if self.backend else "",
            attributes=dict(self.backend.attributes) if self.backend else {},
            devices=list(self.devices),
            more_backends=[BackendRecord(b.name, dict(b.attributes)) for b in self.backends[1:]],
            pending=list(pending),
            priority=self.priority or None,
            singly=self.singly,
        )

    def annotations(
        self, seal: RecordSeal, pending: Sequence[PendingMember] = ()
    ) -> dict[str, str]:
        """Annotations the Binding writes onto the pod with its node, the record sealed."""
        record = encode_record(self.record(pending))
        out = {
            names.ANNOTATION_ALLOCATION: record,
            names.ANNOTATION_ALLOCATION_SEAL: seal.sign(self.pod, self.uid, record),
        }
        if self.backend:
            out[names.ANNOTATION_BACKEND] = self.backend.name
            for k, v in self.backend.attributes.items():
                out[names.attr_annotation(k)] = v
            # What QRMI programs read (QRMI_JOB_QPU_RESOURCES/TYPES) through the webhook's env.
            every = self.backends or [self.backend]
            out.update(qrmi.placement_annotations([(b.name, b.attributes) for b in every]))
        return out


@dataclass
class GroupDevices:
    """The backend devices a group holds: one matcher hold each, shared by every member.

    A gang's backend belongs to the group, not to the member that happened to ask
    for it first: it is released when the group's last member lets go.
    """

    devices: list[DeviceRecord]
    backends: list[BackendChoice]
    members: set[str] = field(default_factory=set)

    @property
    def backend(self) -> BackendChoice | None:
        return self.backends[0] if self.backends else None


class HoldingsByPod(dict[str, Holding]):
    """Holdings by pod key, each group's at hand: a bind asks for its group's others,
    and a scan of every holding per bind grows with the cluster."""

    def __init__(self) -> None:
        super().__init__()
        self._groups: dict[str, dict[str, Holding]] = {}

    def of_group(self, group: str) -> list[Holding]:
        return list(self._groups.get(group, {}).values())

    def __setitem__(self, pod: str, h: Holding) -> None:
        self._forget(pod)
        super().__setitem__(pod, h)
        self._groups.setdefault(h.group, {})[pod] = h

    def __delitem__(self, pod: str) -> None:
        self._forget(pod)
        super().__delitem__(pod)

    def pop(self, pod: str, default: Holding | None = None) -> Holding | None:  # type: ignore[override]
        self._forget(pod)
        return super().pop(pod, default)

    def clear(self) -> None:
        self._groups.clear()
        super().clear()

    def _forget(self, pod: str) -> None:
        old = super().get(pod)
        if old is not None:
            members = self._groups.get(old.group)
            if members is not None:
                members.pop(pod, None)
                if not members:
                    del self._groups[old.group]


class Holdings:
    """Every pod's holding and every group's shared devices, with the matcher jobs behind them.

    The one place that hands out matcher job ids and holds or lets go of a
    group's devices; the units that place, follow or preempt change holdings
    only through it (or the holdings it returns). Callers hold the ledger's lock.
    """

    def __init__(self, graph: ClusterGraph) -> None:
        self.graph = graph
        self.by_pod = HoldingsByPod()
        self.devices: dict[str, GroupDevices] = {}
        """Group key -> the devices its members share."""
        self.freed: list[Callable[[str], None]] = []
        """Called with each backend name a group let go of."""
        self._next_id = 1

    def new_id(self) -> int:
        """A matcher job id no job in the graph has."""
        while True:
            jid = self._next_id
            self._next_id += 1
            if not self.graph.holds(jid):
                return jid

    def hold_compute(self, node: str, amounts: Mapping[str, int], runtime: int = 0) -> int:
        """Hold ``amounts`` of ``node`` as a new job (of ``runtime`` seconds); its id.

        StateError or NotFoundError when they are not free there: nothing is held then.
        """
        jid = self.new_id()
        self.graph.hold_compute(jid, node, amounts, runtime)
        return jid

    def unbound_for(self, now: float, timeout: float) -> list[str]:
        """Pods whose tentative holding was not handed out again for ``timeout`` seconds."""
        return [
            k for k, h in self.by_pod.items() if h.state == TENTATIVE and now - h.since >= timeout
        ]

    def stuck_groups(self, now: float, timeout: float) -> dict[str, list[str]]:
        """Groups not all bound ``timeout`` seconds after their match -> their unbound pods.

        Filter retries renew each member's holding, so without this rule a gang with
        one member that can never bind would keep the others' capacity for ever.
        """
        stuck = {
            h.group
            for h in self.by_pod.values()
            if h.state == TENTATIVE and h.placed and now - h.placed >= timeout
        }
        return {
            group: [h.pod for h in self.by_pod.of_group(group) if h.state == TENTATIVE]
            for group in sorted(stuck)
        }

    def join(self, h: Holding, shared: GroupDevices) -> None:
        """``h`` shares ``shared``'s devices (its backend) with the rest of its group."""
        h.devices = shared.devices
        h.backend = shared.backend
        h.backends = list(shared.backends)
        shared.members.add(h.pod)

    def hold_devices(
        self,
        group: str,
        wanted: Sequence[tuple[str, str, str]],
        backends: Sequence[BackendChoice],
        runtime: int = 0,
    ) -> GroupDevices:
        """Hold each (type, path, name) backend device for ``group``'s members to share.

        All or none: on StateError/NotFoundError what was held is let go and the
        error raised; on success the devices are the group's until its last member goes.
        """
        devices: list[DeviceRecord] = []
        try:
            for t, path, name in wanted:
                jid = self.new_id()
                self.graph.hold_backend(jid, path, runtime)
                devices.append(DeviceRecord(t, path, name, jid))
        except (StateError, NotFoundError):
            for d in devices:
                self.graph.release(d.jobid)
            raise
        shared = GroupDevices(devices, list(backends))
        self.devices[group] = shared
        return shared

    def release_jobs(self, h: Holding) -> None:
        """Let go of ``h``'s own job, and of its group's devices when it was their last user."""
        if h.jobid:
            self.graph.release(h.jobid)
        shared = self.devices.get(h.group)
        if shared is not None and h.devices is shared.devices:
            shared.members.discard(h.pod)
            self.drop_unused(h.group)

    def drop_unused(self, group: str) -> None:
        """Release a group's devices once no member holds them any more."""
        shared = self.devices.get(group)
        if shared is None or shared.members:
            return
        del self.devices[group]
        for d in shared.devices:
            if d.jobid and self.graph.holds(d.jobid):
                self.graph.release(d.jobid)
        if shared.devices:
            log.info("group backend released", extra={"group": group})
        for name in sorted({d.name for d in shared.devices}):
            for fn in self.freed:
                fn(name)
