"""The release patch: record on, node pinned in the required affinity, the queue's gate off."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluence import names
from fluence.pinning import REQUIRED, pin, release_ops
from fluence.pods import Pod
from tests.support.admission import PatchError, apply_patch

GATE = {"name": names.QUEUE_GATE}
RECORD = {names.ANNOTATION_ALLOCATION: "{}", names.ANNOTATION_ALLOCATION_SEAL: "abc"}


def doc(spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u-1"}
    if annotations is not None:
        meta["annotations"] = annotations
    body = {"schedulerName": "fluence", "schedulingGates": [GATE], **(spec or {})}
    return {"metadata": meta, "spec": body}


def released(d: dict[str, Any], node: str = "n7") -> Any:
    return apply_patch(d, release_ops(msgspec.convert(d, Pod), node, RECORD))


def terms(d: dict[str, Any]) -> Any:
    return d["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]


def test_a_bare_pod_gets_its_record_its_node_and_loses_the_gate() -> None:
    out = released(doc())
    assert out["metadata"]["annotations"] == RECORD
    assert terms(out) == [{"matchFields": [pin("n7")]}]
    assert out["spec"]["schedulingGates"] == []


def test_existing_annotations_and_other_gates_stay() -> None:
    d = doc({"schedulingGates": [{"name": "a.example/x"}, GATE]}, {"team": "blue"})
    out = released(d)
    assert out["metadata"]["annotations"] == {"team": "blue", **RECORD}
    assert out["spec"]["schedulingGates"] == [{"name": "a.example/x"}]


def test_every_required_term_is_narrowed_by_addition_only() -> None:
    """The API server lets a gated pod's required terms grow, never change or multiply."""
    expr = {"key": "zone", "operator": "In", "values": ["a"]}
    field = {"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}
    affinity = {
        "podAntiAffinity": {"x": 1},
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}, {"matchFields": [field]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
        },
    }
    out = released(doc({"affinity": affinity}))
    assert terms(out) == [
        {"matchExpressions": [expr], "matchFields": [pin("n7")]},
        {"matchFields": [field, pin("n7")]},
    ]
    assert out["spec"]["affinity"]["podAntiAffinity"] == {"x": 1}
    assert out["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]


@pytest.mark.parametrize(
    "affinity",
    [
        {"podAffinity": {"y": 2}},
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}},
    ],
)
def test_missing_levels_of_the_affinity_are_created(affinity: dict[str, Any]) -> None:
    assert terms(released(doc({"affinity": affinity}))) == [{"matchFields": [pin("n7")]}]


def test_a_pod_that_holds_nothing_is_released_without_a_node() -> None:
    out = released(doc(), node="")
    assert "affinity" not in out["spec"] and out["spec"]["schedulingGates"] == []


def test_the_patch_fails_on_a_recreated_pod_or_a_moved_gate() -> None:
    d = doc()
    ops = release_ops(msgspec.convert(d, Pod), "n1", RECORD)
    recreated = {**d, "metadata": {**d["metadata"], "uid": "u-2"}}
    with pytest.raises(PatchError):
        apply_patch(recreated, ops)
    moved = doc({"schedulingGates": [{"name": "a.example/x"}, GATE]})
    with pytest.raises(PatchError):
        apply_patch(moved, ops)


def test_a_pod_not_gated_by_the_queue_is_not_released() -> None:
    with pytest.raises(ValueError, match="not gated"):
        release_ops(msgspec.convert(doc({"schedulingGates": []}), Pod), "n1", RECORD)


KEYS = st.text(alphabet="abz/~.-", min_size=1, max_size=8)


@given(
    st.dictionaries(KEYS, st.text(max_size=5), max_size=4),
    st.dictionaries(KEYS, st.text(max_size=5), max_size=3),
)
def test_any_annotation_keys_apply_escaped(
    existing: dict[str, str], record: dict[str, str]
) -> None:
    d = doc(annotations=existing or None)
    out = apply_patch(d, release_ops(msgspec.convert(d, Pod), "n1", record))
    assert out["metadata"].get("annotations", {}) == {**existing, **record}
