"""Device naming and the preferred-allocation decision of the device plugin."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deviceplugin import devices
from fluence import names


def test_socket_and_device_names_follow_the_type() -> None:
    assert devices.socket_name("qpu") == "fluence-qpu.sock"
    assert devices.device_ids("qubit", 3) == ["qubit-0", "qubit-1", "qubit-2"]
    assert names.resource_name("qpu") == "fluxion.flux-framework.org/qpu"


def test_device_ids_never_exceed_63_characters_and_stay_unique() -> None:
    rtype = "a" * 80
    ids = devices.device_ids(rtype, 1200)
    assert max(len(i) for i in ids) == devices.MAX_DEVICE_ID
    assert len(set(ids)) == 1200
    assert ids[1199].endswith("-1199")


def test_allocation_env_lists_granted_devices() -> None:
    assert devices.allocation_envs("qpu", ["qpu-1", "qpu-4"]) == {
        "FLUENCE_QPU_DEVICES": "qpu-1,qpu-4"
    }
    assert names.devices_env("q-dev.x") == "FLUENCE_Q_DEV_X_DEVICES"


def test_preferred_allocation_takes_must_include_first_then_available_in_order() -> None:
    assert devices.preferred_allocation(["d3", "d1", "d2"], ["d9"], 3) == ["d9", "d3", "d1"]
    assert devices.preferred_allocation(["d1", "d2"], ["d2"], 2) == ["d2", "d1"]
    assert devices.preferred_allocation(["d1"], [], 3) == ["d1"]
    assert devices.preferred_allocation(["d1", "d2"], ["d5", "d6"], 1) == ["d5", "d6"]


ids = st.lists(st.sampled_from([f"d{i}" for i in range(20)]), max_size=20)


@given(available=ids, must=ids, size=st.integers(min_value=0, max_value=25))
def test_preferred_allocation_is_always_a_valid_answer(
    available: list[str], must: list[str], size: int
) -> None:
    chosen = devices.preferred_allocation(available, must, size)
    assert len(chosen) == len(set(chosen))
    assert set(chosen) <= set(available) | set(must)
    must_unique = list(dict.fromkeys(must))
    assert chosen[: len(must_unique)] == must_unique
    assert len(chosen) == max(len(must_unique), min(size, len(set(available) | set(must))))
