"""The plugin manager in-process against the stand-in kubelet: retries and kubelet restarts.

These drive :class:`deviceplugin.manager.PluginManager` tick by tick, so each
step's effect is checked without timing assumptions.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from deviceplugin.manager import PluginManager
from deviceplugin.proto import KUBELET_SOCKET
from deviceplugin.settings import Settings
from fluence import names
from testbed.fake_kubelet import FakeKubelet, socket_files

QPU = names.resource_name("qpu")
CONFIG = "resources:\n  - type: qpu\n    name: q1\n"


@pytest.fixture
async def manager(workdir: Path) -> AsyncIterator[PluginManager]:
    (workdir / "r.yaml").write_text(CONFIG)
    settings = Settings(
        resources=str(workdir / "r.yaml"),
        device_plugin_dir=workdir / "dp",
        resource_capacity=8,
        http_bind="",
        register_timeout=2.0,
    )
    m = PluginManager(settings)
    try:
        yield m
    finally:
        await m.shutdown()


async def test_stale_kubelet_socket_fails_registration_with_backoff_then_recovers(
    manager: PluginManager,
) -> None:
    plugin_dir = manager.settings.device_plugin_dir
    plugin_dir.mkdir()
    # A socket file nobody listens on: what a crashed kubelet leaves behind.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(plugin_dir / KUBELET_SOCKET))
    stale.close()

    await manager.tick()
    state = manager.status()["resources"][QPU]
    assert state["serving"] and not state["registered"]
    assert state["failed_attempts"] == 1
    await manager.tick()  # inside the backoff window: no new attempt
    assert manager.status()["resources"][QPU]["failed_attempts"] == 1

    async with FakeKubelet(plugin_dir) as kubelet:  # removes every socket, ours too
        assert socket_files(plugin_dir) == [KUBELET_SOCKET]
        await manager.tick()
        assert [r.resource_name for r in kubelet.registrations] == [QPU]
        await kubelet.wait_for(lambda: kubelet.endpoints[QPU].healthy == 8)
    assert manager.status()["resources"][QPU]["registered"]


async def test_new_kubelet_socket_without_wipe_triggers_registration_again(
    manager: PluginManager,
) -> None:
    plugin_dir = manager.settings.device_plugin_dir
    async with FakeKubelet(plugin_dir) as first:
        await manager.tick()
        assert len(first.registrations) == 1
        await manager.tick()
        assert len(first.registrations) == 1  # registered once, not on every tick
    sockets_before = socket_files(plugin_dir)
    async with FakeKubelet(plugin_dir, wipe_on_start=False) as second:
        assert socket_files(plugin_dir) == sockets_before + [KUBELET_SOCKET]
        await manager.tick()
        assert [r.resource_name for r in second.registrations] == [QPU]


async def test_shutdown_removes_only_our_sockets(manager: PluginManager) -> None:
    plugin_dir = manager.settings.device_plugin_dir
    async with FakeKubelet(plugin_dir):
        await manager.tick()
        assert socket_files(plugin_dir) == ["fluence-qpu.sock", KUBELET_SOCKET]
        await manager.shutdown()
        assert socket_files(plugin_dir) == [KUBELET_SOCKET]
