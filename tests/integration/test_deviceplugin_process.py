"""``fluence-deviceplugin`` as a real process against the stand-in kubelet.

Each test starts the plugin process with settings pointing at a fresh
directory, drives it through :class:`testbed.fake_kubelet.FakeKubelet`
and stops both, also when the test fails.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from deviceplugin.proto import HEALTHY, UNHEALTHY
from fluence import names
from testbed.fake_kubelet import FakeKubelet, socket_files, wipe_sockets
from tests.support.deviceplugin_process import DevicePluginProcess

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resources.yaml"
QDEVICE, QPU, QUBIT = (names.resource_name(t) for t in ("qdevice", "qpu", "qubit"))
CAPACITY = 50


@pytest.fixture
def plugin_dir(workdir: Path) -> Path:
    d = workdir / "dp"
    d.mkdir()
    return d


@pytest.fixture
def resources_file(workdir: Path) -> Path:
    path = workdir / "resources.yaml"
    shutil.copy(EXAMPLE, path)
    return path


@pytest.fixture
async def kubelet(plugin_dir: Path) -> AsyncIterator[FakeKubelet]:
    async with FakeKubelet(plugin_dir) as k:
        yield k


@pytest.fixture
def plugin(plugin_dir: Path, resources_file: Path) -> Iterator[DevicePluginProcess]:
    with DevicePluginProcess(plugin_dir, resources_file, capacity=CAPACITY) as proc:
        yield proc


async def wait_all(kubelet: FakeKubelet, resources: list[str], timeout: float = 15) -> None:
    await kubelet.wait_for(
        lambda: all(
            r in kubelet.endpoints and kubelet.endpoints[r].healthy == CAPACITY for r in resources
        ),
        timeout,
    )


async def scrape(plugin: DevicePluginProcess) -> str:
    async with httpx.AsyncClient(base_url=plugin.base_url) as http:
        return (await http.get("/metrics", follow_redirects=True)).text


def metric(text: str, name: str, *label_parts: str) -> float | None:
    """The value of the one sample of ``name`` whose labels contain every ``label_parts``."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(part in line.split("}")[0] for part in label_parts)
    ]
    assert len(values) <= 1, f"{name} {label_parts} matches {len(values)} samples"
    return values[0] if values else None


async def test_example_config_registers_every_type_with_its_devices(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, plugin_dir: Path
) -> None:
    await wait_all(kubelet, [QDEVICE, QPU, QUBIT])

    assert sorted(kubelet.endpoints) == [QDEVICE, QPU, QUBIT]
    for reg in kubelet.registrations:
        assert reg.version == "v1beta1"
        assert reg.endpoint == f"fluence-{names.resource_type(reg.resource_name)}.sock"
        assert reg.request_options.get_preferred_allocation_available
        assert not reg.request_options.pre_start_required
        assert reg.plugin_options == reg.request_options
    for rtype in ("qdevice", "qpu", "qubit"):
        ids = [d for d, _ in kubelet.endpoints[names.resource_name(rtype)].devices]
        assert ids == [f"{rtype}-{i}" for i in range(CAPACITY)]
        assert all(len(d) <= 63 for d in ids)
    assert socket_files(plugin_dir) == [
        "fluence-qdevice.sock",
        "fluence-qpu.sock",
        "fluence-qubit.sock",
        "kubelet.sock",
    ]

    response = await kubelet.allocate(QPU, [["qpu-3"], ["qpu-7", "qpu-8"]])
    assert [dict(c.envs) for c in response.container_responses] == [
        {"FLUENCE_QPU_DEVICES": "qpu-3"},
        {"FLUENCE_QPU_DEVICES": "qpu-7,qpu-8"},
    ]
    preferred = await kubelet.preferred(QUBIT, ["qubit-5", "qubit-1", "qubit-2"], ["qubit-9"], 3)
    assert preferred == ["qubit-9", "qubit-5", "qubit-1"]

    async with httpx.AsyncClient(base_url=plugin.base_url) as http:
        health = await http.get("/healthz")
        assert health.status_code == 200
        assert all(r["registered"] for r in health.json()["resources"].values())
    metrics = await scrape(plugin)
    for name in (QDEVICE, QPU, QUBIT):
        assert metric(metrics, "fluence_deviceplugin_devices_advertised", f'"{name}"') == CAPACITY
        ok = metric(metrics, "fluence_deviceplugin_registrations_total", f'"{name}"', 'result="ok"')
        assert ok == 1


@pytest.mark.parametrize("http", [True, False], ids=["with-http", "without-http"])
async def test_sigterm_exits_zero_and_removes_sockets(
    kubelet: FakeKubelet, plugin_dir: Path, resources_file: Path, http: bool
) -> None:
    extra = {} if http else {"FLUENCE_HTTP_BIND": ""}
    with DevicePluginProcess(plugin_dir, resources_file, capacity=CAPACITY, extra_env=extra) as p:
        await wait_all(kubelet, [QDEVICE, QPU, QUBIT])
        code = await asyncio.to_thread(p.terminate)
        assert code == 0, p.logs()
    assert socket_files(plugin_dir) == ["kubelet.sock"]
    await kubelet.wait_for(lambda: all(ep.stream_ended for ep in kubelet.endpoints.values()))


async def test_config_change_adds_and_withdraws_types(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, plugin_dir: Path, resources_file: Path
) -> None:
    await wait_all(kubelet, [QDEVICE, QPU, QUBIT])
    qubit_stream = kubelet.endpoints[QUBIT]

    # A ConfigMap update: a new file is written beside and renamed over the old one.
    new = resources_file.with_suffix(".new")
    new.write_text(
        "resources:\n"
        "  - type: qdevice\n    name: ibm_fez\n    with:\n      - type: qpu\n"
        "  - type: annealer\n    name: dwave\n"
    )
    new.replace(resources_file)

    await wait_all(kubelet, [names.resource_name("annealer")])
    await kubelet.wait_for(lambda: qubit_stream.stream_ended)
    assert qubit_stream.lists[-1] == [(f"qubit-{i}", UNHEALTHY) for i in range(CAPACITY)]
    assert qubit_stream.lists[0][0] == ("qubit-0", HEALTHY)
    await kubelet.wait_for(lambda: "fluence-qubit.sock" not in socket_files(plugin_dir))
    assert socket_files(plugin_dir) == [
        "fluence-annealer.sock",
        "fluence-qdevice.sock",
        "fluence-qpu.sock",
        "kubelet.sock",
    ]
    # The kept types were not disturbed.
    assert len(kubelet.registered(QPU)) == 1
    assert not kubelet.endpoints[QPU].stream_ended

    # A broken config keeps what is advertised.
    resources_file.write_text("resources: [this is not: valid")
    await asyncio.sleep(1.5)
    assert plugin.proc is not None and plugin.proc.poll() is None
    assert "fluence-annealer.sock" in socket_files(plugin_dir)
    assert "resources config cannot be used" in plugin.logs()
    metrics = await scrape(plugin)
    assert metric(metrics, "fluence_deviceplugin_config_reloads_total", 'result="error"') == 1
    assert metric(metrics, "fluence_deviceplugin_config_reloads_total", 'result="ok"') == 2
    assert metric(metrics, "fluence_deviceplugin_devices_advertised", "qubit") is None


async def test_kubelet_restart_reregisters_within_five_seconds(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, plugin_dir: Path
) -> None:
    await wait_all(kubelet, [QDEVICE, QPU, QUBIT])

    await kubelet.stop()
    wipe_sockets(plugin_dir)
    restarted = FakeKubelet(plugin_dir)
    started = time.monotonic()
    await restarted.start()
    try:
        await wait_all(restarted, [QDEVICE, QPU, QUBIT], timeout=10)
        elapsed = max(r.at for r in restarted.registrations) - started
        print(f"\nre-registration after kubelet restart: {elapsed:.3f} s for 3 resources")
        assert elapsed < 5.0
        assert sorted(r.resource_name for r in restarted.registrations) == [QDEVICE, QPU, QUBIT]
        metrics = await scrape(plugin)
        for name in (QDEVICE, QPU, QUBIT):
            # At least once: a wipe racing with a restart can cost a second one.
            restarts = metric(metrics, "fluence_deviceplugin_server_restarts_total", name)
            assert restarts is not None and restarts >= 1
            again = metric(
                metrics, "fluence_deviceplugin_registrations_total", name, "again", 'result="ok"'
            )
            assert again == 1
    finally:
        await restarted.stop()


async def test_missing_config_advertises_nothing_then_picks_the_file_up(
    kubelet: FakeKubelet, plugin_dir: Path, workdir: Path
) -> None:
    resources = workdir / "later.yaml"
    with DevicePluginProcess(plugin_dir, resources, capacity=CAPACITY) as proc:
        async with httpx.AsyncClient(base_url=proc.base_url) as http:
            for _ in range(100):
                try:
                    health = await http.get("/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            assert health.status_code == 200
            assert health.json()["resources"] == {}
        assert kubelet.registrations == []

        shutil.copy(EXAMPLE, resources)
        await wait_all(kubelet, [QDEVICE, QPU, QUBIT])


async def test_plugin_started_before_the_kubelet_registers_when_it_appears(
    plugin_dir: Path, resources_file: Path
) -> None:
    # A socket left by a previous plugin process that died: it must be replaced.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(plugin_dir / "fluence-qpu.sock"))
    stale.close()
    with DevicePluginProcess(plugin_dir, resources_file, capacity=CAPACITY):
        await asyncio.sleep(1.5)  # a few polls with no kubelet.sock
        async with FakeKubelet(plugin_dir, wipe_on_start=False) as kubelet:
            await wait_all(kubelet, [QDEVICE, QPU, QUBIT])
