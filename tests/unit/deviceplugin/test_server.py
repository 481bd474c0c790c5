"""The DevicePlugin RPCs of one resource type, called directly (no server)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from deviceplugin.proto import HEALTHY, UNHEALTHY, pb
from deviceplugin.server import FluxionDevicePlugin
from deviceplugin.settings import Settings


class AbortingContext:
    """The part of grpc.aio.ServicerContext the servicer uses."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise RuntimeError(f"{code.name}: {details}")


CTX: Any = AbortingContext()


async def test_options_say_preferred_allocation_without_prestart() -> None:
    options = await FluxionDevicePlugin("qpu", 4).GetDevicePluginOptions(pb.Empty(), CTX)
    assert options.get_preferred_allocation_available
    assert not options.pre_start_required


async def test_list_and_watch_sends_the_full_list_then_the_unhealthy_list_then_ends() -> None:
    plugin = FluxionDevicePlugin("qpu", 3)
    stream = plugin.ListAndWatch(pb.Empty(), CTX)
    first = await anext(stream)
    assert [(d.ID, d.health) for d in first.devices] == [
        ("qpu-0", HEALTHY),
        ("qpu-1", HEALTHY),
        ("qpu-2", HEALTHY),
    ]
    assert plugin.streams == 1
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.01)
    assert not pending.done()  # nothing changed, nothing sent
    await plugin.set_health(UNHEALTHY)
    second = await asyncio.wait_for(pending, 1)
    assert {d.health for d in second.devices} == {UNHEALTHY}
    assert plugin.sent_generation < plugin.generation  # recorded once the stream moves on
    await plugin.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(stream), 1)
    assert plugin.streams == 0
    assert plugin.sent_generation == plugin.generation


async def test_allocate_answers_every_container_request() -> None:
    plugin = FluxionDevicePlugin("qubit", 10)
    request = pb.AllocateRequest(
        container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["qubit-1", "qubit-2"]),
            pb.ContainerAllocateRequest(devices_ids=[]),
            pb.ContainerAllocateRequest(devices_ids=["qubit-9"]),
        ]
    )
    response = await plugin.Allocate(request, CTX)
    assert [dict(c.envs) for c in response.container_responses] == [
        {"FLUENCE_QUBIT_DEVICES": "qubit-1,qubit-2"},
        {"FLUENCE_QUBIT_DEVICES": ""},
        {"FLUENCE_QUBIT_DEVICES": "qubit-9"},
    ]


async def test_allocate_rejects_devices_it_does_not_advertise() -> None:
    plugin = FluxionDevicePlugin("qubit", 2)
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=["qubit-7"])]
    )
    with pytest.raises(RuntimeError, match="INVALID_ARGUMENT.*qubit-7"):
        await plugin.Allocate(request, CTX)


async def test_preferred_allocation_per_container() -> None:
    plugin = FluxionDevicePlugin("qpu", 10)
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["qpu-4", "qpu-2", "qpu-3"],
                must_include_deviceIDs=["qpu-2"],
                allocation_size=2,
            ),
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["qpu-5", "qpu-6"], allocation_size=1
            ),
        ]
    )
    response = await plugin.GetPreferredAllocation(request, CTX)
    assert [list(c.deviceIDs) for c in response.container_responses] == [
        ["qpu-2", "qpu-4"],
        ["qpu-5"],
    ]


async def test_prestart_is_a_no_op() -> None:
    plugin = FluxionDevicePlugin("qpu", 1)
    request = pb.PreStartContainerRequest(devices_ids=["qpu-0"])
    assert await plugin.PreStartContainer(request, CTX) == pb.PreStartContainerResponse()


def test_settings_read_fluence_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUENCE_RESOURCES", "/x/r.yaml")
    monkeypatch.setenv("FLUENCE_RESOURCE_CAPACITY", "7")
    monkeypatch.setenv("FLUENCE_DEVICE_PLUGIN_DIR", "/x/dp")
    settings = Settings()
    assert str(settings.resources) == "/x/r.yaml"
    assert settings.resource_capacity == 7
    assert str(settings.device_plugin_dir) == "/x/dp"
    monkeypatch.delenv("FLUENCE_RESOURCES")
    assert str(Settings().resources) == "/etc/fluence/resources.yaml"
