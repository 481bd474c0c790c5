"""Device selectors: CEL on a device, as kube-scheduler evaluates it."""

from __future__ import annotations

import pytest

from fluence.device_selectors import device_value, matches
from fluence.resource_claims import Device, DeviceAttribute, DeviceCapacity

DRIVER = "gpu.example.com"
DEVICE = device_value(
    DRIVER,
    Device(
        "g0",
        attributes={
            "model": DeviceAttribute(string="a100"),
            "cores": DeviceAttribute(int_=108),
            "vendor.example.com/ecc": DeviceAttribute(bool_=True),
        },
        capacity={"memory": DeviceCapacity("40Gi")},
    ),
)


@pytest.mark.parametrize(
    ("expression", "matched"),
    [
        (f'device.driver == "{DRIVER}"', True),
        ('device.driver == "other.example.com"', False),
        # A name without a domain is the driver's.
        (f'device.attributes["{DRIVER}"].model == "a100"', True),
        (f'device.attributes["{DRIVER}"].cores >= 100', True),
        ('device.attributes["vendor.example.com"].ecc', True),
        # A domain the device lacks reads as an empty map.
        ('has(device.attributes["other.example.com"].model)', False),
        # A missing attribute is an error: the device fails.
        (f'device.attributes["{DRIVER}"].missing == 1', False),
        # Not a bool, or not CEL: fails.
        ('"a100"', False),
        ("device.driver ==", False),
        # Kubernetes' own functions: left to kube-scheduler.
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0', True),
    ],
)
def test_an_expression_on_a_device(expression: str, matched: bool) -> None:
    assert matches([expression], DEVICE) is matched


def test_every_expression_must_hold() -> None:
    yes, no = f'device.driver == "{DRIVER}"', "false"
    assert matches([yes, yes], DEVICE)
    assert not matches([yes, no], DEVICE)
    assert matches([], DEVICE)
