"""QRMI's variables: what a stock QRMI program reads, set as QRMI's Slurm plugin sets them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from fluence import names, resources
from tests.support.admission import QPU, apply_patch, container, pod, response_ops, review
from tests.unit.webhook.test_app import client_for, post
from tests.unit.webhook.test_job_runtime import JOB, Jobs
from webhook.admission import Admission, mutate
from webhook.env import ContractFile, EnvContract
from webhook.job_runtime import JobRuntimes
from webhook.review import Pod

QRMI_CONFIG = Path(__file__).resolve().parents[3] / "examples" / "qrmi" / "qrmi_config.json"
CONTRACT = EnvContract.from_config(resources.load(QRMI_CONFIG), loaded=True)
FELIS = "ab_emu_1q_lescanne_2020"


def admit(obj: dict[str, Any], contract: EnvContract = CONTRACT) -> dict[str, Any]:
    m = mutate(msgspec.convert(obj, Pod), "team", contract, queue=False)
    return dict(apply_patch(obj, m.patch.ops))


def env_of(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {e["name"]: e for e in obj["spec"]["containers"][index].get("env", [])}


def fieldpath(entry: dict[str, Any]) -> str:
    return str(entry["valueFrom"]["fieldRef"]["fieldPath"])


def test_job_resources_and_types_come_from_the_placement_annotations() -> None:
    env = env_of(admit(pod(container(requests={QPU: "1"}))))
    resources_path = names.annotation_fieldpath(names.ANNOTATION_QRMI_RESOURCES)
    types_path = names.annotation_fieldpath(names.ANNOTATION_QRMI_TYPES)
    assert fieldpath(env["QRMI_JOB_QPU_RESOURCES"]) == resources_path
    assert fieldpath(env["SLURM_JOB_QPU_RESOURCES"]) == resources_path
    assert fieldpath(env["QRMI_JOB_QPU_TYPES"]) == types_path
    assert fieldpath(env["SLURM_JOB_QPU_TYPES"]) == types_path
    # What was there stays: the backend name and the attributes.
    assert "QRMI_BACKEND" in env and "FLUXION_BACKEND" in env
    assert fieldpath(env["FLUXION_QRMI_TYPE"]) == names.annotation_fieldpath(
        names.attr_annotation("qrmi_type")
    )


def test_every_backend_the_pod_could_get_brings_its_settings() -> None:
    env = env_of(admit(pod(container(requests={QPU: "1"}))))
    assert env[f"{FELIS}_QRMI_AB_FELIS_BASE_ENDPOINT"] == {
        "name": f"{FELIS}_QRMI_AB_FELIS_BASE_ENDPOINT",
        "value": "https://api.alice-bob.com/",
    }
    assert env["test_heron_QRMI_IBM_QS_S3_BUCKET"]["value"] == "heron-results"
    assert env["FRESNEL_QRMI_PASQAL_CLOUD_PROJECT_ID"]["value"].startswith("0000")


def test_credentials_are_required_references_to_a_secret_in_the_pods_namespace() -> None:
    """Required: a missing Secret or key stops the container with the kubelet's Event
    (CreateContainerConfigError) instead of a program failing on an unset variable."""
    env = env_of(admit(pod(container(requests={QPU: "1"}))))
    assert env[f"{FELIS}_QRMI_AB_FELIS_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "fluence-qrmi", "key": f"{FELIS}_QRMI_AB_FELIS_API_KEY"}
    }
    assert env["FRESNEL_QRMI_PASQAL_CLOUD_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "pasqal-credentials",
        "key": "FRESNEL_QRMI_PASQAL_CLOUD_AUTH_TOKEN",
    }
    for entry in env.values():
        assert "value" in entry or "valueFrom" in entry
        if "APIKEY" in entry["name"] or "TOKEN" in entry["name"] or "SECRET" in entry["name"]:
            assert "value" not in entry


def test_the_acquisition_token_comes_from_the_annotation_the_queue_writes() -> None:
    config = resources.parse(
        "resources:\n"
        "  - {name: a, type: qiskit-runtime-service, environment: {QRMI_IBM_QRS_ENDPOINT: e}}\n"
        "  - {name: b, type: pasqal-cloud, acquire: false, environment: {X: y}}\n"
    )
    contract = EnvContract.from_config(config, loaded=True)
    obj = pod(container(requests={QPU: "1"}))
    queued = env_of(
        dict(apply_patch(obj, mutate(msgspec.convert(obj, Pod), "team", contract).patch.ops))
    )
    token = queued["a_QRMI_JOB_ACQUISITION_TOKEN"]
    assert fieldpath(token) == names.annotation_fieldpath(names.qrmi_token_annotation("a"))
    assert "b_QRMI_JOB_ACQUISITION_TOKEN" not in queued  # acquire: false, the program does it
    # Without the queue nothing acquires: no token (QRMI would take an empty one for a session).
    assert "a_QRMI_JOB_ACQUISITION_TOKEN" not in env_of(admit(obj, contract))


def test_required_attributes_narrow_the_backends_whose_settings_are_injected() -> None:
    by_type = {f"{names.ANNOTATION_REQUIRE_PREFIX}qrmi_type": "pasqal-cloud"}
    env = env_of(admit(pod(container(requests={QPU: "1"}), annotations=by_type)))
    assert "FRESNEL_QRMI_PASQAL_CLOUD_PROJECT_ID" in env
    assert not [n for n in env if n.startswith((FELIS, "test_heron"))]
    by_name = {f"{names.ANNOTATION_REQUIRE_PREFIX}backend": "test_heron"}
    env = env_of(admit(pod(container(requests={QPU: "1"}), annotations=by_name)))
    assert [n for n in env if n.startswith(("FRESNEL", FELIS))] == []
    assert "test_heron_QRMI_IBM_QS_ENDPOINT" in env


def test_a_pod_asking_for_a_type_no_qrmi_backend_has_gets_no_qrmi_settings() -> None:
    config = resources.parse(
        "resources:\n"
        "  - {type: annealer, name: dw}\n"
        "  - {name: b, type: pasqal-cloud, environment: {QRMI_PASQAL_CLOUD_PROJECT_ID: p}}\n"
    )
    contract = EnvContract.from_config(config, loaded=True)
    env = env_of(admit(pod(container(requests={names.resource_name("annealer"): "1"})), contract))
    assert "QRMI_BACKEND" in env and "QRMI_JOB_QPU_RESOURCES" in env
    assert "b_QRMI_PASQAL_CLOUD_PROJECT_ID" not in env
    env = env_of(admit(pod(container(requests={QPU: "1"})), contract))
    assert env["b_QRMI_PASQAL_CLOUD_PROJECT_ID"]["value"] == "p"


def test_timeout_comes_from_the_pods_deadline_and_only_then() -> None:
    deadline = pod(container(requests={QPU: "1"}))
    deadline["spec"]["activeDeadlineSeconds"] = 1800
    env = env_of(admit(deadline))
    for name in (FELIS, "test_heron", "FRESNEL"):
        assert env[f"{name}_QRMI_JOB_TIMEOUT_SECONDS"] == {
            "name": f"{name}_QRMI_JOB_TIMEOUT_SECONDS",
            "value": "1800",
        }
    env = env_of(admit(pod(container(requests={QPU: "1"}))))
    assert not [n for n in env if n.endswith("_QRMI_JOB_TIMEOUT_SECONDS")]


def test_a_job_pods_timeout_is_its_jobs_deadline() -> None:
    doc = pod(container(requests={QPU: "1"}), owners=[JOB])
    admission = Admission(lambda: CONTRACT, None, JobRuntimes(Jobs({"train": 600})), queue=False)
    _, ops = response_ops(post(review(doc, namespace="team"), client_for(admission)).content)
    stored = apply_patch(doc, ops)
    assert stored["spec"]["activeDeadlineSeconds"] == 600
    assert env_of(stored)["test_heron_QRMI_JOB_TIMEOUT_SECONDS"]["value"] == "600"
    # A Job without a deadline: no timeout, and the rest as for any pod.
    admission = Admission(lambda: CONTRACT, None, JobRuntimes(Jobs({})), queue=False)
    _, ops = response_ops(post(review(doc, namespace="team"), client_for(admission)).content)
    env = env_of(apply_patch(doc, ops))
    assert "test_heron_QRMI_IBM_QS_ENDPOINT" in env
    assert "test_heron_QRMI_JOB_TIMEOUT_SECONDS" not in env


def test_a_variable_the_user_set_is_kept() -> None:
    mine = [
        {"name": "test_heron_QRMI_IBM_QS_ENDPOINT", "value": "http://mine"},
        {"name": "QRMI_JOB_QPU_RESOURCES", "value": "test_heron"},
    ]
    env = env_of(admit(pod(container(requests={QPU: "1"}, env=mine))))
    assert env["test_heron_QRMI_IBM_QS_ENDPOINT"]["value"] == "http://mine"
    assert env["QRMI_JOB_QPU_RESOURCES"] == mine[1]


def test_a_config_edit_to_qrmi_form_is_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    path.write_text("resources: [{type: qdevice, name: old, with: [{type: qpu}]}]\n")
    contract = ContractFile(path)
    assert contract.current().qrmi == ()
    path.write_text(QRMI_CONFIG.read_text())
    stamp = time.time_ns() // 1_000_000_000 + 5
    os.utime(path, (stamp, stamp))
    assert [b.resource.name for b in contract.current().qrmi] == [FELIS, "test_heron", "FRESNEL"]
    # A credential written inline is refused; the last good contract stays.
    path.write_text(
        QRMI_CONFIG.read_text().replace(
            '"QRMI_AB_FELIS_API_KEY": ""', '"QRMI_AB_FELIS_API_KEY": "k"'
        )
    )
    os.utime(path, (stamp + 5, stamp + 5))
    assert [b.resource.name for b in contract.current().qrmi] == [FELIS, "test_heron", "FRESNEL"]


def qpu_pod(env: list[dict[str, Any]] | None, deadline: int | None) -> dict[str, Any]:
    doc = pod(container(requests={QPU: "1"}, env=env))
    if deadline is not None:
        doc["spec"]["activeDeadlineSeconds"] = deadline
    return doc


user_env = st.lists(
    st.builds(
        lambda n: {"name": n, "value": "u"},
        st.sampled_from(["test_heron_QRMI_IBM_QS_ENDPOINT", "QRMI_JOB_QPU_TYPES", "X"]),
    ),
    unique_by=lambda e: e["name"],
    max_size=3,
)
pods = st.builds(
    qpu_pod, st.one_of(st.none(), user_env), st.one_of(st.none(), st.integers(1, 10**6))
)


@settings(max_examples=50, deadline=None)
@given(pods)
def test_admitting_the_admitted_pod_changes_nothing(p: dict[str, Any]) -> None:
    once = admit(p)
    assert admit(once) == once
    names_once = [e["name"] for e in once["spec"]["containers"][0]["env"]]
    assert len(set(names_once)) == len(names_once)


def test_the_job_id_is_the_pods_uid_and_the_job_user_its_run_as_user() -> None:
    """As QRMI's Slurm plugin sets QRMI_JOB_ID and QRMI_JOB_UID (pasqal-local needs both)."""
    first = container("a", requests={QPU: "1"})
    first["securityContext"] = {"runAsUser": 1001}
    second = container("b", requests={QPU: "1"})
    obj = pod(first, second)
    obj["spec"]["securityContext"] = {"runAsUser": 2000}
    admitted = admit(obj)
    for index, user in ((0, "1001"), (1, "2000")):  # a container's own user wins
        env = env_of(admitted, index)
        assert fieldpath(env["QRMI_JOB_ID"]) == "metadata.uid"
        assert env["QRMI_JOB_UID"] == {"name": "QRMI_JOB_UID", "value": user}


def test_no_job_user_is_made_up_and_a_users_own_values_stay() -> None:
    env = env_of(admit(pod(container(requests={QPU: "1"}))))
    assert fieldpath(env["QRMI_JOB_ID"]) == "metadata.uid" and "QRMI_JOB_UID" not in env
    own = container(requests={QPU: "1"}, env=[{"name": "QRMI_JOB_ID", "value": "mine"}])
    assert env_of(admit(pod(own)))["QRMI_JOB_ID"] == {"name": "QRMI_JOB_ID", "value": "mine"}


def test_pods_no_qrmi_backend_could_serve_get_no_job_id() -> None:
    env = env_of(admit(pod(container(requests={QPU: "1"})), EnvContract()))
    assert "QRMI_JOB_ID" not in env and "QRMI_BACKEND" in env


def test_a_config_without_qrmi_types_brings_no_qrmi_job_variables() -> None:
    plain = EnvContract.from_config(
        resources.parse("resources:\n- type: qpu\n  name: aer\n  attributes: {vendor: ibm}\n"),
        loaded=True,
    )
    env = env_of(admit(pod(container(requests={QPU: "1"})), plain))
    assert "QRMI_BACKEND" in env and "FLUXION_VENDOR" in env
    assert not {k for k in env if k.startswith(("QRMI_JOB_", "SLURM_JOB_"))}
