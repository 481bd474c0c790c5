"""Which containers get which backend variables; idempotence of the whole mutation."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluence import names, resources
from tests.support.admission import QPU, apply_patch, container, pod
from webhook.admission import mutate
from webhook.env import ContractFile, EnvContract, valid_annotation_key
from webhook.review import Pod

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "resources.yaml"
CONTRACT = EnvContract.from_config(resources.load(EXAMPLE), loaded=True)
BACKEND_PATH = names.annotation_fieldpath(names.ANNOTATION_BACKEND)


def run(obj: dict[str, Any], contract: EnvContract = CONTRACT) -> tuple[list[Any], list[str]]:
    m = mutate(msgspec.convert(obj, Pod), "default", contract, queue=False)
    return m.patch.ops, m.warnings


def env_of(obj: dict[str, Any], index: int = 0, field: str = "containers") -> dict[str, Any]:
    return {e["name"]: e for e in obj["spec"][field][index].get("env", [])}


def test_contract_from_example_config_reads_backend_and_every_attribute() -> None:
    assert [n for n, _ in CONTRACT.variables] == [
        "QRMI_BACKEND",
        "FLUXION_BACKEND",
        "FLUXION_QRMI_TYPE",
        "FLUXION_VENDOR",
    ]
    assert dict(CONTRACT.variables)["FLUXION_QRMI_TYPE"] == names.attr_annotation("qrmi_type")
    assert CONTRACT.known_types == frozenset({"qdevice", "qpu", "qubit"})


def test_quantum_container_gets_fieldrefs_on_the_annotations() -> None:
    p = pod(container(requests={QPU: "1"}), container("side"))
    ops, warnings = run(p)
    assert warnings == []
    out = apply_patch(p, ops)
    env = env_of(out)
    assert env["QRMI_BACKEND"]["valueFrom"]["fieldRef"]["fieldPath"] == BACKEND_PATH
    assert env["FLUXION_BACKEND"]["valueFrom"]["fieldRef"]["fieldPath"] == BACKEND_PATH
    assert env["FLUXION_VENDOR"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['fluence.flux-framework.org/attr-vendor']"
    )
    assert "env" not in out["spec"]["containers"][1]
    # One op creates the absent env list whole.
    assert [op["path"] for op in ops] == ["/spec/containers/0/env"]


def test_limits_alone_count_as_a_request() -> None:
    p = pod(container(limits={QPU: 1}))
    assert "QRMI_BACKEND" in env_of(apply_patch(p, run(p)[0]))


def test_opt_in_annotation_adds_env_to_named_sidecars_and_init_containers() -> None:
    p = pod(
        container(requests={QPU: "1"}),
        container("proxy"),
        container("other"),
        annotations={names.ANNOTATION_ENV_CONTAINERS: " proxy , setup,ghost"},
        init=[container("setup")],
    )
    ops, warnings = run(p)
    out = apply_patch(p, ops)
    assert "QRMI_BACKEND" in env_of(out, 1)
    assert "env" not in out["spec"]["containers"][2]
    assert "QRMI_BACKEND" in env_of(out, 0, "initContainers")
    assert any("'ghost'" in w for w in warnings)


def test_user_set_variables_are_kept_and_others_appended() -> None:
    mine = {"name": "QRMI_BACKEND", "value": "ibm_torino"}
    p = pod(container(requests={QPU: "1"}, env=[mine, {"name": "X", "value": "1"}]))
    ops, _ = run(p)
    assert all(op["path"] == "/spec/containers/0/env/-" for op in ops)
    env = env_of(apply_patch(p, ops))
    assert env["QRMI_BACKEND"] == mine
    assert env["X"] == {"name": "X", "value": "1"}
    assert "FLUXION_BACKEND" in env


def test_classical_fluence_pod_is_untouched() -> None:
    p = pod(container(requests={"cpu": "1"}), annotations={"a": "b"})
    assert run(p) == ([], [])


def test_opt_in_without_a_fluxion_request_adds_nothing_but_says_so() -> None:
    p = pod(container("a"), annotations={names.ANNOTATION_ENV_CONTAINERS: "a"})
    ops, warnings = run(p)
    assert ops == []
    assert len(warnings) == 1


def test_other_scheduler_requesting_fluxion_gets_a_warning_and_no_patch() -> None:
    ops, warnings = run(pod(container(requests={QPU: "1"}), scheduler="default-scheduler"))
    assert ops == []
    assert len(warnings) == 1
    assert "schedulerName" in warnings[0]


def test_unknown_fluxion_type_is_warned_but_env_still_added() -> None:
    p = pod(container(requests={names.resource_name("gpu-qpu"): "1"}))
    ops, warnings = run(p)
    assert ops
    assert any("gpu-qpu" in w for w in warnings)
    # Without a config there is nothing to compare against.
    assert run(p, EnvContract())[1] == []


def test_attribute_keys_that_cannot_be_annotation_names_are_skipped() -> None:
    # The config parser refuses such keys; a config built another way is still safe here.
    with pytest.raises(resources.ResourcesConfigError, match="bad key"):
        resources.parse("resources:\n- type: qpu\n  name: b\n  attributes: {'bad key': x}\n")
    attrs = {"bad key": "x", "a.b-c": "y"}
    qpu = resources.Resource("qpu", "b", 1, "cluster", attrs, "b")
    config = resources.ResourcesConfig((qpu,))
    contract = EnvContract.from_config(config, loaded=True)
    assert [n for n, _ in contract.variables][2:] == ["FLUXION_A_B_C"]
    assert valid_annotation_key("fluence.flux-framework.org/attr-a.b-c")
    assert not valid_annotation_key("fluence.flux-framework.org/attr-bad key")
    assert not valid_annotation_key("x/" + "a" * 64)


def test_contract_file_follows_changes_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    missing = ContractFile(path)
    assert [n for n, _ in missing.current().variables] == ["QRMI_BACKEND", "FLUXION_BACKEND"]
    assert missing.current().known_types is None
    path.write_text("resources:\n- type: qpu\n  name: b\n  attributes: {region: eu}\n")
    assert "FLUXION_REGION" in dict(missing.current().variables)
    stamp = time.time() + 5
    path.write_text("resources: [ {type: }\n")  # unparsable
    os.utime(path, (stamp, stamp))
    assert "FLUXION_REGION" in dict(missing.current().variables)
    path.write_text("resources:\n- type: qpu\n  name: b\n  attributes: {zone: z}\n")
    os.utime(path, (stamp + 5, stamp + 5))
    variables = dict(missing.current().variables)
    assert "FLUXION_ZONE" in variables and "FLUXION_REGION" not in variables


# --- idempotence -------------------------------------------------------------------

env_names = st.sampled_from(["QRMI_BACKEND", "FLUXION_BACKEND", "FLUXION_VENDOR", "HOME", "X"])
resource_names = st.sampled_from([QPU, names.resource_name("qubit"), "cpu", "memory"])
container_names = st.sampled_from(["main", "side", "init", "proxy", "x/y"])
user_env = st.none() | st.lists(
    st.builds(lambda n: {"name": n, "value": "u"}, env_names), max_size=3
)
quantities = st.none() | st.dictionaries(resource_names, st.just("1"), max_size=2)
containers = st.builds(
    lambda name, requests, limits, env: container(name, requests=requests, limits=limits, env=env),
    container_names,
    quantities,
    quantities,
    user_env,
)
opt_in = st.none() | st.fixed_dictionaries(
    {names.ANNOTATION_ENV_CONTAINERS: st.sampled_from(["", "side", "side,proxy", "init"])}
)
pods = st.builds(
    lambda main, init, scheduler, annotations, labels: pod(
        *main, init=init, scheduler=scheduler, annotations=annotations, labels=labels
    ),
    st.lists(containers, min_size=1, max_size=4),
    st.none() | st.lists(containers, max_size=2),
    st.sampled_from([names.SCHEDULER_NAME, "default-scheduler"]),
    opt_in,
    st.none() | st.just({names.LABEL_GROUP: "g1"}),
)


@settings(max_examples=250, deadline=None)
@given(pods)
def test_mutation_is_idempotent_and_preserves_user_env(p: dict[str, Any]) -> None:
    ops, _ = run(p)
    once = apply_patch(p, ops)
    assert run(once)[0] == []
    for field in ("containers", "initContainers"):
        before_all, after_all = p["spec"].get(field) or [], once["spec"].get(field) or []
        for before, after in zip(before_all, after_all, strict=True):
            old = before.get("env") or []
            # User entries stay, first and unchanged; nothing is added twice.
            assert after.get("env", [])[: len(old)] == old
            names_after = [e["name"] for e in after.get("env", [])]
            added = names_after[len(old) :]
            assert len(set(added)) == len(added)
            assert not set(added) & {e["name"] for e in old}
