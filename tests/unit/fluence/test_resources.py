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
