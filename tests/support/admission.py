"""Test support for the webhook tests: a small RFC 6902 applier and pod/review builders.

The applier is strict on purpose (a missing parent is an error, as in the API
server), so tests that apply the webhook's patches catch invalid ops.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from fluence import names


class PatchError(ValueError):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"pointer {path!r} must start with '/'")
    return [_unescape(t) for t in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"bad array index {token!r}")
    i = int(token)
    if i > len(container) or (i == len(container) and not allow_end):
        raise PatchError(f"index {i} out of range")
    return i


def _descend(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for t in tokens:
        if isinstance(node, dict):
            if t not in node:
                raise PatchError(f"missing member {t!r}")
            node = node[t]
        elif isinstance(node, list):
            node = node[_index(node, t, allow_end=False)]
        else:
            raise PatchError(f"cannot descend into {type(node).__name__}")
    return node


def _parent(doc: Any, tokens: list[str]) -> Any:
    return _descend(doc, tokens[:-1])


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply ``add``/``remove``/``replace``/``test`` ops to a copy of ``doc`` (what the webhook
    and the queue's release emit)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = _tokens(op["path"])
        if op["op"] == "test":
            if _descend(doc, tokens) != op["value"]:
                raise PatchError(f"test failed at {op['path']}")
            continue
        if not tokens:
            if op["op"] in ("add", "replace"):
                doc = copy.deepcopy(op["value"])
                continue
            raise PatchError("cannot remove the root")
        parent = _parent(doc, tokens)
        last = tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, dict):
                parent[last] = copy.deepcopy(op["value"])
            elif isinstance(parent, list):
                parent.insert(_index(parent, last, allow_end=True), copy.deepcopy(op["value"]))
            else:
                raise PatchError("add into a scalar")
        elif op["op"] in ("remove", "replace"):
            if isinstance(parent, dict):
                if last not in parent:
                    raise PatchError(f"missing member {last!r}")
                if op["op"] == "remove":
                    del parent[last]
                else:
                    parent[last] = copy.deepcopy(op["value"])
            elif isinstance(parent, list):
                i = _index(parent, last, allow_end=False)
                if op["op"] == "remove":
                    del parent[i]
                else:
                    parent[i] = copy.deepcopy(op["value"])
            else:
                raise PatchError("remove from a scalar")
        else:
            raise PatchError(f"unsupported op {op['op']!r}")
    return doc


# --- builders ----------------------------------------------------------------------

QPU = names.resource_name("qpu")


def container(
    name: str = "main",
    *,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        c["resources"] = resources
    if env is not None:
        c["env"] = env
    return c


def pod(
    *containers: dict[str, Any],
    scheduler: str = names.SCHEDULER_NAME,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": "p-"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def review(
    obj: Any,
    *,
    uid: str = "0f1e2d3c",
    operation: str = "CREATE",
    kind: str = "Pod",
    namespace: str = "default",
    dry_run: bool = False,
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": namespace,
            "operation": operation,
            "object": obj,
            "dryRun": dry_run,
        },
    }


def response_ops(body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The decoded response and its patch ops ([] without a patch)."""
    out = json.loads(body)
    response = out["response"]
    if "patch" not in response:
        return response, []
    assert response["patchType"] == "JSONPatch"
    return response, json.loads(base64.b64decode(response["patch"]))


# --- the applier's own tests -------------------------------------------------------


def test_applier_adds_to_maps_and_lists_and_unescapes() -> None:
    doc = {"a": {"x/y": 1}, "l": [1, 2]}
    out = apply_patch(
        doc,
        [
            {"op": "add", "path": "/a/k~1v~0w", "value": 2},
            {"op": "add", "path": "/l/-", "value": 3},
            {"op": "add", "path": "/l/0", "value": 0},
            {"op": "remove", "path": "/a/x~1y"},
        ],
    )
    assert out == {"a": {"k/v~w": 2}, "l": [0, 1, 2, 3]}
    assert doc == {"a": {"x/y": 1}, "l": [1, 2]}


def test_applier_rejects_a_missing_parent_like_the_api_server() -> None:
    with pytest.raises(PatchError):
        apply_patch({"spec": {}}, [{"op": "add", "path": "/spec/containers/0/env/-", "value": 1}])
    with pytest.raises(PatchError):
        apply_patch({"m": {}}, [{"op": "add", "path": "/m/absent/k", "value": 1}])
