"""Device naming and the pure decisions of the plugin (preferred sets, Allocate answers).

Each resource type is advertised as ``capacity`` interchangeable virtual
devices: Fluxion decides which real backend a pod gets, the kubelet only needs
a count to admit the pod. Nothing here depends on pod identity, because the
kubelet never tells a device plugin which pod it is serving.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fluence import names

MAX_DEVICE_ID = 63
"""The kubelet's limit on a device ID's length (api.proto, Device.ID)."""


def socket_name(rtype: str) -> str:
    """The plugin's socket file name for ``rtype``, e.g. ``fluence-qpu.sock``."""
    return f"{names.DEVICE_PLUGIN_SOCKET_PREFIX}{rtype}.sock"


def device_id(rtype: str, index: int) -> str:
    """``<type>-<index>``, with the type shortened when the ID would exceed 63 characters."""
    suffix = f"-{index}"
    return rtype[: MAX_DEVICE_ID - len(suffix)] + suffix


def device_ids(rtype: str, capacity: int) -> list[str]:
    return [device_id(rtype, i) for i in range(capacity)]


def preferred_allocation(
    available: Sequence[str], must_include: Iterable[str], size: int
) -> list[str]:
    """The set the kubelet should pick: every ``must_include`` first, then available ones in order.

    The result never exceeds ``size`` (unless must_include alone does, in which case
    must_include is returned as is: the kubelet requires it), holds no duplicates,
    and only holds IDs from ``must_include`` or ``available``.
    """
    chosen: list[str] = []
    seen: set[str] = set()
    for dev in must_include:
        if dev not in seen:
            chosen.append(dev)
            seen.add(dev)
    for dev in available:
        if len(chosen) >= size:
            break
        if dev not in seen:
            chosen.append(dev)
            seen.add(dev)
    return chosen


def allocation_envs(rtype: str, device_ids_granted: Sequence[str]) -> dict[str, str]:
    """Env vars for a container granted ``device_ids_granted``: FLUENCE_<TYPE>_DEVICES=a,b,c."""
    return {names.devices_env(rtype): ",".join(device_ids_granted)}
