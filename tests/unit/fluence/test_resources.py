"""The resources config: schema, attribute resolution and the derived names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fluence import resources
from fluence.resources import ResourcesConfigError

ROOT = Path(__file__).resolve().parents[3]


def test_example_config_types_names_and_env_contract() -> None:
    cfg = resources.load(ROOT / "examples" / "resources.yaml")
    assert cfg.types() == ["qdevice", "qpu", "qubit"]
    assert cfg.resource_names() == [
        "fluxion.flux-framework.org/qdevice",
        "fluxion.flux-framework.org/qpu",
        "fluxion.flux-framework.org/qubit",
    ]
    assert cfg.attribute_keys() == ["qrmi_type", "vendor"]
    fez = cfg.resources[0]
    assert (fez.name, fez.backend, fez.parent) == ("ibm_fez", "ibm_fez", "cluster")
    qubit = fez.children[0].children[0]
    assert (qubit.type, qubit.count, qubit.backend) == ("qubit", 156, "ibm_fez")
    assert qubit.attributes == {"vendor": "ibm", "qrmi_type": "qiskit-runtime-service"}
    assert fez.subtree_types() == {"qdevice", "qpu", "qubit"}


def test_children_inherit_override_and_clear_attributes() -> None:
    cfg = resources.parse(
        """
resources:
  - type: qdevice
    name: cepheus
    attributes: {vendor: rigetti, region: us-west-1}
    with:
      - type: qpu
        attributes: {vendor: other, region: ""}
"""
    )
    top = cfg.resources[0]
    assert top.attributes == {"vendor": "rigetti", "region": "us-west-1"}
    assert top.children[0].attributes == {"vendor": "other"}


def test_registry_entries_are_copied_not_shared() -> None:
    cfg = resources.parse(
        """
resources:
  - {type: a, name: x, attributes: shared}
  - {type: a, name: y, attributes: shared, with: [{type: b, attributes: {extra: "1"}}]}
attributes:
  shared: {k: v}
"""
    )
    assert cfg.resources[0].attributes == {"k": "v"}
    assert cfg.resources[1].children[0].attributes == {"k": "v", "extra": "1"}
    assert cfg.registry["shared"] == {"k": "v"}


@pytest.mark.parametrize("text", ["", "# only a comment\n", "resources: []\n"])
def test_empty_configs_mean_classical_only(text: str) -> None:
    assert resources.parse(text).empty


def test_missing_file_means_classical_only(tmp_path: Path) -> None:
    assert resources.load(tmp_path / "absent.yaml").empty
    assert resources.load(None).empty


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("backends:\n  - name: x\n", "defines no resources"),
        ("resources:\n  - name: x\n", "missing required field 'type'"),
        ("resources:\n  - {type: q, attributes: nope}\n", "unknown attribute set 'nope'"),
        ("resources:\n  - {type: q, attributes: [1]}\n", "string reference or a map"),
        ("resources:\n  - {type: q, count: 0}\n", "positive integer"),
        ("resources:\n  - {type: Q}\n", "lower-case"),
        ("resources:\n  - {type: q, with: [{type: r, parent: n1}]}\n", "only top-level"),
        ("resources:\n  - {type: q, name: a}\n  - {type: q, name: a}\n", "used twice"),
        ("resources: [\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
    ],
)
def test_invalid_configs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ResourcesConfigError, match=message):
        resources.parse(text)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("resources: [{type: qpu, name: 'a/b'}]", "resource name 'a/b'"),
        ("resources: [{type: qpu, name: '-x'}]", "resource name '-x'"),
        ("resources: [{type: qpu, name: " + "x" * 64 + "}]", "resource name"),
        (
            "resources: [{type: qpu, name: q, attributes: {'bad key': v}}]",
            "attribute key 'bad key'",
        ),
        ("resources: [{type: qpu, name: q, attributes: {'k/x': v}}]", "attribute key 'k/x'"),
        ("resources: [{type: qpu, name: q, attributes: {" + "k" * 59 + ": v}}]", "attribute key"),
    ],
)
def test_names_and_attribute_keys_must_fit_where_they_are_written(
    text: str, complaint: str
) -> None:
    with pytest.raises(resources.ResourcesConfigError, match=re.escape(complaint)):
        resources.parse(text)


QRMI_CONFIG = """
{
  "resources": [
    {
      "name": "test_heron",
      "type": "ibm-quantum-system",
      "environment": {
        "QRMI_IBM_QS_ENDPOINT": "http://da.example:8080",
        "QRMI_IBM_QS_IAM_ENDPOINT": "https://iam.example",
        "QRMI_IBM_QS_IAM_APIKEY": "",
        "QRMI_IBM_QS_SERVICE_CRN": "crn:v1:heron",
        "QRMI_IBM_QS_AWS_SECRET_ACCESS_KEY": ""
      }
    },
    {
      "name": "FRESNEL",
      "type": "pasqal-cloud",
      "secret": "pasqal-creds",
      "qubits": 100,
      "environment": {"QRMI_PASQAL_CLOUD_PROJECT_ID": "p-1", "QRMI_PASQAL_CLOUD_AUTH_TOKEN": ""}
    }
  ]
}
"""


def test_a_qrmi_config_file_is_a_resources_config() -> None:
    cfg = resources.parse(QRMI_CONFIG)
    heron, fresnel = cfg.resources
    assert (heron.type, heron.name, heron.backend) == ("qdevice", "test_heron", "test_heron")
    assert heron.attributes == {"qrmi_type": "ibm-quantum-system"}
    assert [c.type for c in heron.walk()] == ["qdevice", "qpu"]
    assert heron.children[0].count == 1
    assert [(c.type, c.count) for c in fresnel.walk()] == [
        ("qdevice", 1),
        ("qpu", 1),
        ("qubit", 100),
    ]
    assert cfg.types() == ["qdevice", "qpu", "qubit"]
    assert cfg.attribute_keys() == ["qrmi_type"]
    q_heron, q_fresnel = cfg.qrmi
    assert (q_heron.name, q_heron.type, q_heron.secret) == (
        "test_heron",
        "ibm-quantum-system",
        "fluence-qrmi",
    )
    assert dict(q_heron.settings) == {
        "QRMI_IBM_QS_ENDPOINT": "http://da.example:8080",
        "QRMI_IBM_QS_IAM_ENDPOINT": "https://iam.example",
        "QRMI_IBM_QS_SERVICE_CRN": "crn:v1:heron",
    }
    assert q_heron.secrets == ("QRMI_IBM_QS_IAM_APIKEY", "QRMI_IBM_QS_AWS_SECRET_ACCESS_KEY")
    assert (q_fresnel.secret, q_fresnel.secrets) == (
        "pasqal-creds",
        ("QRMI_PASQAL_CLOUD_AUTH_TOKEN",),
    )


def test_qrmi_entries_and_yaml_entries_share_one_config() -> None:
    cfg = resources.parse(
        """
resources:
  - type: qdevice
    name: ibm_fez
    attributes: {qrmi_type: qiskit-runtime-service, vendor: ibm}
    with: [{type: qpu}]
  - name: ab_emu
    type: alice-bob-felis
    attributes: {vendor: alice-bob}
    environment: {QRMI_AB_FELIS_BASE_ENDPOINT: "http://felis.example"}
"""
    )
    assert [r.name for r in cfg.resources] == ["ibm_fez", "ab_emu"]
    assert [q.name for q in cfg.qrmi] == ["ab_emu"]
    assert cfg.resources[1].attributes == {"vendor": "alice-bob", "qrmi_type": "alice-bob-felis"}


def test_the_stock_qrmi_example_config_is_refused_for_its_inline_keys() -> None:
    """QRMI's own example puts API keys inline: refused, naming the key but not its value."""
    text = QRMI_CONFIG.replace(
        '"QRMI_IBM_QS_IAM_APIKEY": ""', '"QRMI_IBM_QS_IAM_APIKEY": "s3cr3t-v4lue"'
    )
    with pytest.raises(ResourcesConfigError) as info:
        resources.parse(text)
    message = str(info.value)
    assert "s3cr3t-v4lue" not in message
    assert "QRMI_IBM_QS_IAM_APIKEY is a credential" in message
    assert "Secret 'fluence-qrmi', key 'test_heron_QRMI_IBM_QS_IAM_APIKEY'" in message


@pytest.mark.parametrize(
    "key",
    [
        "QRMI_IBM_QCS_IAM_APIKEY",
        "QRMI_IBM_QRS_IAM_APIKEY",
        "QRMI_IBM_QS_AWS_ACCESS_KEY_ID",
        "QRMI_PASQAL_CLOUD_CLIENT_SECRET",
        "QRMI_AB_FELIS_API_KEY",
        "QRMI_IQM_ISA_TOKEN",
    ],
)
def test_every_qrmi_credential_key_is_refused_inline(key: str) -> None:
    text = f'{{"resources": [{{"name": "b", "type": "x", "environment": {{"{key}": "v4lue"}}}}]}}'
    with pytest.raises(ResourcesConfigError, match=f"{key} is a credential") as info:
        resources.parse(text)
    assert "v4lue" not in str(info.value)


def test_a_syntax_error_does_not_quote_the_line_it_is_on() -> None:
    text = '{"resources": [{"name": "b", "environment": {"QRMI_X_APIKEY": "s3cr3t" "}}]}'
    with pytest.raises(ResourcesConfigError, match="not valid YAML") as info:
        resources.parse(text)
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('{"type": "pasqal-cloud", "environment": {}}', "needs a 'name'"),
        ('{"name": "b", "environment": {}}', "'type' must be a QRMI resource type"),
        ('{"name": "b", "type": "Pasqal", "environment": {}}', "'type' must be"),
        ('{"name": "b", "type": "t", "environment": []}', "'environment' must be a map"),
        ('{"name": "b", "type": "t", "environment": {"1X": "v"}}', "environment key '1X'"),
        ('{"name": "b", "type": "t", "environment": {"A-B": "v"}}', "environment key 'A-B'"),
        (
            '{"name": "b", "type": "t", "environment": {"QRMI_JOB_TIMEOUT_SECONDS": "9"}}',
            "set for each job",
        ),
        (
            '{"name": "b", "type": "t", "environment": {"QRMI_JOB_ACQUISITION_TOKEN": ""}}',
            "set for each job",
        ),
        ('{"name": "b", "type": "t", "is_dynamic": true, "environment": {}}', "is dynamic"),
        ('{"name": "b", "type": "t", "secret": "Bad_Name", "environment": {}}', "'secret'"),
        ('{"name": "b", "type": "t", "qubits": 0, "environment": {}}', "'qubits'"),
        ('{"name": "b/c", "type": "t", "environment": {}}', "resource name 'b/c'"),
        (
            '{"name": "b", "type": "t", "attributes": "nope", "environment": {}}',
            "unknown attribute",
        ),
    ],
)
def test_bad_qrmi_entries_are_refused_with_a_reason(entry: str, message: str) -> None:
    with pytest.raises(ResourcesConfigError, match=re.escape(message)):
        resources.parse(f'{{"resources": [{entry}]}}')


def test_a_qrmi_name_may_not_repeat_a_yaml_backend() -> None:
    with pytest.raises(ResourcesConfigError, match="used twice"):
        resources.parse(
            "resources:\n  - {type: qdevice, name: b}\n"
            "  - {name: b, type: pasqal-cloud, environment: {}}\n"
        )
