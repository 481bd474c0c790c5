"""Device selectors: the CEL expressions of DeviceClasses and device requests, evaluated
on a device as kube-scheduler's DynamicResources filter does.

The expression sees one variable, ``device``: its ``driver``, its ``attributes`` and
``capacity`` as maps of domain to maps of name to value (a name without a domain is the
driver's), and ``allowMultipleAllocations``. A domain the device lacks reads as an empty
map. kube-scheduler's environment adds Kubernetes' own functions (quantities, semantic
versions, ...): an expression calling one of those here cannot be judged, and the device
is taken to match, leaving the last word to kube-scheduler. Any other error (a missing
attribute, a result that is not a bool) fails the device: kube-scheduler then fails the
pod's attempt, so no node takes it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import cel

from fluence.resource_claims import Device

_DOMAIN = re.compile(r"""\.(attributes|capacity)\[\s*["']([^"']+)["']\s*\]""")
"""A map of the device's indexed by a literal domain: such a domain must read as a map."""


@functools.lru_cache(maxsize=256)
def _compiled(expression: str) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """The program (None: it does not compile) and the domains it indexes."""
    try:
        program = cel.compile(expression)
    except (ValueError, RuntimeError):
        program = None
    return program, tuple((m.group(1), m.group(2)) for m in _DOMAIN.finditer(expression))


def device_value(driver: str, device: Device) -> dict[str, Any]:
    """``device`` as the CEL variable ``device``."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in device.attributes.items():
        domain, _, ident = name.partition("/") if "/" in name else (driver, "", name)
        attributes.setdefault(domain, {})[ident] = attr.value
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in device.capacity.items():
        domain, _, ident = name.partition("/") if "/" in name else (driver, "", name)
        capacity.setdefault(domain, {})[ident] = cap.value
    return {
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": bool(device.allow_multiple_allocations),
    }


def matches(expressions: Sequence[str], value: dict[str, Any]) -> bool:
    """Do all ``expressions`` hold for the device ``value`` (:func:`device_value`)?"""
    for expression in expressions:
        program, domains = _compiled(expression)
        if program is None:
            return False
        missing = [(m, d) for m, d in domains if d not in value[m]]
        if missing:
            value = {**value, **{m: dict(value[m]) for m, _ in missing}}
            for m, d in missing:
                value[m][d] = {}
        try:
            result = program.execute({"device": value})
        except RuntimeError as exc:
            if "Undefined variable or function" in str(exc):
                continue  # a Kubernetes function: kube-scheduler judges it
            return False
        except Exception:  # noqa: BLE001 - a missing key, a type error: the device fails
            return False
        if result is not True:
            return False
    return True
