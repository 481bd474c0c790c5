"""Who holds what: one holding per pod, and the backend devices a group's members share.

A holding is ``tentative`` (matched at filter time, not bound yet),
``committed`` (bound; its record is on the pod) or ``foreign`` (a pod fluence
did not place, or whose record it does not trust: its requests are held on its
node while it runs). This module owns the holdings' shape and their index by
group; it never matches, and never reads the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fluence import names
from fluence.placement import BackendChoice
from fluence.scheduling.record import (
    AllocationRecord,
    DeviceRecord,
    PendingMember,
    RecordSeal,
    encode_record,
)

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
    devices: list[DeviceRecord] = field(default_factory=list)
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
        return out


@dataclass
class GroupDevices:
    """The backend devices a group holds: one matcher hold each, shared by every member.

    A gang's backend belongs to the group, not to the member that happened to ask
    for it first: it is released when the group's last member lets go.
    """

    devices: list[DeviceRecord]
    backend: BackendChoice | None
    members: set[str] = field(default_factory=set)


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
