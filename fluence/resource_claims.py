"""Slim views of the dynamic resource allocation objects (resource.k8s.io/v1) that
kube-scheduler's DynamicResources filter reads: ResourceClaims, ResourceSlices and
DeviceClasses, decoded straight from API JSON as :mod:`fluence.pods` decodes pods.
"""

from __future__ import annotations

from typing import Any

import msgspec

from fluence.pods import NodeSelector, ObjectMeta, Taint, Toleration


class CELSelector(msgspec.Struct, omit_defaults=True):
    expression: str = ""


class DeviceSelector(msgspec.Struct, omit_defaults=True):
    cel: CELSelector | None = None


class ExactDeviceRequest(msgspec.Struct, rename="camel", omit_defaults=True):
    """Devices of one class: ``count`` of them, or all (``allocationMode: All``)."""

    name: str = ""
    """Set on a ``firstAvailable`` entry only."""
    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool | None = None
    tolerations: list[Toleration] = []

    @property
    def expressions(self) -> tuple[str, ...]:
        return tuple(s.cel.expression for s in self.selectors if s.cel is not None)


class DeviceRequest(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[ExactDeviceRequest] = []

    @property
    def choices(self) -> list[ExactDeviceRequest]:
        """What may satisfy the request, the preferred first."""
        return [self.exactly] if self.exactly is not None else list(self.first_available)


class DeviceConstraint(msgspec.Struct, rename="camel", omit_defaults=True):
    """The devices of ``requests`` (all of the claim's when empty; ``request/sub`` names
    one ``firstAvailable`` entry) must agree on attribute ``match_attribute``."""

    requests: list[str] = []
    match_attribute: str | None = None


class DeviceClaim(msgspec.Struct, omit_defaults=True):
    requests: list[DeviceRequest] = []
    constraints: list[DeviceConstraint] = []


class ResourceClaimSpec(msgspec.Struct, omit_defaults=True):
    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class DeviceResult(msgspec.Struct, rename="camel", omit_defaults=True):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    admin_access: bool | None = None
    share_id: str | None = msgspec.field(default=None, name="shareID")

    @property
    def id(self) -> str:
        return device_id(self.driver, self.pool, self.device)


class DeviceAllocation(msgspec.Struct, omit_defaults=True):
    results: list[DeviceResult] = []


class AllocationResult(msgspec.Struct, rename="camel", omit_defaults=True):
    devices: DeviceAllocation = msgspec.field(default_factory=DeviceAllocation)
    node_selector: NodeSelector | None = None
    """The nodes the allocated devices are reachable from (None: every node)."""


class ResourceClaimStatus(msgspec.Struct, omit_defaults=True):
    allocation: AllocationResult | None = None


class ResourceClaim(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class DeviceAttribute(msgspec.Struct, omit_defaults=True):
    """One typed value: exactly one field is set."""

    int_: int | None = msgspec.field(default=None, name="int")
    bool_: bool | None = msgspec.field(default=None, name="bool")
    string: str | None = None
    version: str | None = None

    @property
    def value(self) -> Any:
        for v in (self.int_, self.bool_, self.string, self.version):
            if v is not None:
                return v
        return None


class DeviceCapacity(msgspec.Struct, omit_defaults=True):
    value: str | int | float = 0


class Device(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    node_name: str | None = None
    """Which nodes reach the device, when its slice selects per device."""
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: list[Taint] = []
    allow_multiple_allocations: bool | None = None


class ResourcePool(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] = []


class ResourceSlice(msgspec.Struct, omit_defaults=True):
    """Devices a driver publishes, one pool's part, reachable from a node or many."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


class DeviceClassSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    selectors: list[DeviceSelector] = []
    extended_resource_name: str | None = None
    """An extended resource pods ask for devices of this class by (where no node's
    allocatable has it)."""


class DeviceClass(msgspec.Struct, omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)

    @property
    def expressions(self) -> tuple[str, ...]:
        return tuple(s.cel.expression for s in self.spec.selectors if s.cel is not None)


def device_id(driver: str, pool: str, device: str) -> str:
    """A device's name across the cluster, as allocation results name it."""
    return f"{driver}/{pool}/{device}"


decode_resource_claim = msgspec.json.Decoder(ResourceClaim).decode
decode_resource_slice = msgspec.json.Decoder(ResourceSlice).decode
decode_device_class = msgspec.json.Decoder(DeviceClass).decode
