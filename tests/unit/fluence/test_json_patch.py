"""The JSON Patch builder: RFC 6901 escaping and containers that may be absent."""

from __future__ import annotations

from fluence.json_patch import PatchBuilder, escape, pointer
from tests.support.admission import apply_patch


def test_escape_turns_tilde_into_0_before_slash_into_1() -> None:
    assert escape("fluence.flux-framework.org/group") == "fluence.flux-framework.org~1group"
    assert escape("a~b") == "a~0b"
    # Order matters: '/' must not become '~1' and then '~01'.
    assert escape("~/") == "~0~1"
    assert escape("~1") == "~01"


def test_pointer_joins_escaped_tokens_and_numbers() -> None:
    assert pointer("spec", "containers", 0, "env") == "/spec/containers/0/env"
    assert pointer("metadata", "annotations", "x/y~z") == "/metadata/annotations/x~1y~0z"


def test_absent_list_is_added_whole_once_and_later_items_join_it() -> None:
    patch = PatchBuilder()
    patch.append("/spec/containers/0/env", False, {"name": "A"})
    patch.append("/spec/containers/0/env", False, {"name": "B"})
    assert patch.ops == [
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "A"}, {"name": "B"}]}
    ]
    doc = {"spec": {"containers": [{"name": "c"}]}}
    assert apply_patch(doc, patch.ops)["spec"]["containers"][0]["env"] == [
        {"name": "A"},
        {"name": "B"},
    ]


def test_existing_list_is_appended_with_dash() -> None:
    patch = PatchBuilder()
    patch.append("/spec/containers/0/env", True, {"name": "A"})
    patch.append("/spec/containers/0/env", True, {"name": "B"})
    assert [op["path"] for op in patch.ops] == ["/spec/containers/0/env/-"] * 2
    doc = {"spec": {"containers": [{"name": "c", "env": [{"name": "U"}]}]}}
    env = apply_patch(doc, patch.ops)["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["U", "A", "B"]


def test_absent_map_is_added_whole_and_existing_map_gets_escaped_keys() -> None:
    absent = PatchBuilder()
    absent.put("/metadata/annotations", False, "a.io/x", "1")
    absent.put("/metadata/annotations", False, "a.io/y", "2")
    assert absent.ops == [
        {"op": "add", "path": "/metadata/annotations", "value": {"a.io/x": "1", "a.io/y": "2"}}
    ]
    present = PatchBuilder()
    present.put("/metadata/annotations", True, "a.io/x", "1")
    assert present.ops == [{"op": "add", "path": "/metadata/annotations/a.io~1x", "value": "1"}]
    doc = {"metadata": {"annotations": {"k": "v"}}}
    assert apply_patch(doc, present.ops)["metadata"]["annotations"] == {"k": "v", "a.io/x": "1"}
    assert apply_patch({"metadata": {}}, absent.ops)["metadata"]["annotations"] == {
        "a.io/x": "1",
        "a.io/y": "2",
    }


def test_empty_builder_is_falsy() -> None:
    patch = PatchBuilder()
    assert not patch
    patch.add("/spec/x", 1)
    assert patch
