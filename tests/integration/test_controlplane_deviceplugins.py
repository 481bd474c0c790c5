"""The harness's Registration server against the real ``fluence-deviceplugin`` process."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluence import names
from testbed.deviceplugins import DevicePluginRegistry
from tests.support.deviceplugin_process import DevicePluginProcess, short_tempdir

RESOURCES = Path(__file__).resolve().parents[2] / "examples" / "resources.yaml"
TYPES = ("qdevice", "qpu", "qubit")


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    directory = short_tempdir("fdpreg")
    try:
        yield directory / "dp"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_registry_learns_every_advertised_resource_and_sees_the_plugin_go(
    plugin_dir: Path,
) -> None:
    wanted = [names.resource_name(t) for t in TYPES]
    with DevicePluginRegistry(plugin_dir) as registry:
        assert (plugin_dir / "kubelet.sock").exists()
        with DevicePluginProcess(plugin_dir, RESOURCES, capacity=7) as proc:
            try:
                counts = registry.wait_for_resources(wanted, timeout_s=30)
            except TimeoutError:
                pytest.fail(f"plugin never registered; its log:\n{proc.logs()}")
            assert {n: counts[n] for n in wanted} == dict.fromkeys(wanted, 7)
            assert proc.terminate() == 0
        # A plugin that stops ends its streams: the kubelet then counts no devices.
        assert registry.wait_for(lambda d: all(d.get(n) == 0 for n in wanted), timeout_s=15)
    assert not (plugin_dir / "kubelet.sock").exists()


def test_wait_for_resources_names_what_is_missing(plugin_dir: Path) -> None:
    with (
        DevicePluginRegistry(plugin_dir) as registry,
        pytest.raises(TimeoutError, match="fluxion.flux-framework.org/qpu"),
    ):
        registry.wait_for_resources([names.resource_name("qpu")], timeout_s=0.3)
