"""Hostile request bodies: every route that reads one answers 4xx, reads no more than its cap,
expands nothing and changes nothing."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from starlette.types import Message

from scheduler_extender.whatif import MAX_JOBSPEC_DEPTH, JobspecInputError, parse_jobspec
from tests.support.asgi import post
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env

LIMIT = 1 << 20  # Env's max_body_bytes
BODY_ROUTES = ["/filter", "/prioritize", "/bind", "/preempt", "/match", "/plan"]
VERBS = ["/filter", "/prioritize", "/bind", "/preempt"]


def _env() -> tuple[Env, TestClient]:
    env = Env([make_node("a", cpu="4")])
    return env, TestClient(env.client.app, raise_server_exceptions=False)


# ---- /match: YAML aliases, depth, types -------------------------------------------------------


def _alias_bomb(levels: int) -> bytes:
    """``levels`` lists of nine aliases each: 9**levels strings once expanded."""
    lines = [b'l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(b"l%d: &l%d [%s]" % (i, i, b",".join([b"*l%d" % (i - 1)] * 9)))
    lines.append(b"resources: [*l%d]" % (levels - 1))
    return b"\n".join(lines) + b"\n"


def test_a_yaml_alias_bomb_is_refused_without_being_expanded() -> None:
    _, client = _env()
    bomb = _alias_bomb(6)  # 531,441 strings (2.6 MB as JSON) once expanded
    assert len(bomb) < 400
    client.post("/match", content=b"resources: []\n")  # first-call imports and caches
    tracemalloc.start()
    try:
        r = client.post("/match", content=bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 400, r.text
    assert "anchors and aliases are refused" in r.json()["error"]
    assert peak < 1 << 20, f"{peak} bytes allocated while refusing a {len(bomb)}-byte body"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"resources: &r [1]\n", "anchors and aliases"),  # an anchor alone is refused too
        (b"resources: " + b"[" * 100_000, f"deeper than {MAX_JOBSPEC_DEPTH}"),
        (b"".join(b" " * i + b"-\n" for i in range(200)), f"deeper than {MAX_JOBSPEC_DEPTH}"),
        (b"resources: 2020-01-01\n", "only JSON values"),
        (b"resources: !!binary aGk=\n", "only JSON values"),
        (b"resources: {1: 2}\n", "not a string"),
        (b"resources: 1" + b"0" * 5000 + b"\n", "neither YAML nor JSON"),
        (b"resources: \xff\xfe\n", "neither YAML nor JSON"),
    ],
)
def test_jobspecs_beyond_plain_json_data_are_refused_with_the_reason(
    body: bytes, says: str
) -> None:
    with pytest.raises(JobspecInputError, match=says):
        parse_jobspec(body)
    _, client = _env()
    r = client.post("/match", content=body)
    assert r.status_code == 400 and says in r.json()["error"], r.text


# ---- body caps: stop reading at the limit -----------------------------------------------------


class Stream:
    """An ASGI receive that sends 64 KiB chunks (4 MiB in all) and counts how many were taken."""

    CHUNK = 64 << 10

    def __init__(self, chunks: int = 64) -> None:
        self.left = chunks
        self.pulled = 0

    async def __call__(self) -> Message:
        self.pulled += 1
        self.left -= 1
        return {"type": "http.request", "body": b"[" * self.CHUNK, "more_body": self.left > 0}


async def _post(app: Any, path: str, receive: Stream, declared: int | None) -> tuple[int, bytes]:
    return await post(app, path, receive, declared)


@pytest.mark.parametrize("path", BODY_ROUTES)
async def test_a_body_over_the_cap_is_refused_before_it_is_read_whole(path: str) -> None:
    env, _ = _env()
    stream = Stream()
    status, body = await _post(env.client.app, path, stream, declared=None)
    assert status == 413, body
    message = json.loads(body)
    assert "FLUENCE_MAX_BODY_BYTES" in (message.get("Error") or message.get("error"))
    # Reading stops with the chunk that crosses the cap: 17 of the 64 on offer.
    assert stream.pulled == LIMIT // Stream.CHUNK + 1


@pytest.mark.parametrize("path", BODY_ROUTES)
async def test_a_body_declared_over_the_cap_is_refused_unread(path: str) -> None:
    env, _ = _env()
    stream = Stream()
    status, _ = await _post(env.client.app, path, stream, declared=64 * Stream.CHUNK)
    assert status == 413 and stream.pulled == 0


# ---- scheduling verbs: malformed or hostile values -------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
HOSTILE = {
    "number": b"1",
    "null": b"null",
    "object": b'{"x": 1}',
    "deep": DEEP,
    "non-utf8": b'"\xff\xfe"',
    "huge-int": b"1" + b"0" * 5000,
    "huge-float": b"1e99999",
}
POD = json.dumps(make_pod("p", cpu="1", raw=True)).encode()
NODE = json.dumps(make_node("a", cpu="4", raw=True)).encode()
# Each body is valid but for X, where none of HOSTILE is: the pod would be placed otherwise.
SLOTS = {
    "/filter Nodes.items": ("/filter", b'{"Pod": %s, "Nodes": {"items": [%s, X]}}' % (POD, NODE)),
    "/filter NodeNames": ("/filter", b'{"Pod": %s, "NodeNames": ["a", X]}' % POD),
    "/filter Pod": ("/filter", b'{"Pod": X, "NodeNames": ["a"]}'),
    "/prioritize Nodes.items": (
        "/prioritize",
        b'{"Pod": %s, "Nodes": {"items": [%s, X]}}' % (POD, NODE),
    ),
    "/prioritize NodeNames": ("/prioritize", b'{"Pod": %s, "NodeNames": ["a", X]}' % POD),
    "/bind Node": (  # h is held (see _held_env): a valid Node would commit it
        "/bind",
        b'{"PodName": "h", "PodNamespace": "default", "PodUID": "uid-default-h", "Node": X}',
    ),
    "/preempt Pod": ("/preempt", b'{"Pod": X}'),
    "/preempt victims": (
        "/preempt",
        b'{"Pod": %s, "NodeNameToMetaVictims": {"a": {"Pods": [X]}}}' % POD,
    ),
}


def _held_env() -> tuple[Env, TestClient]:
    """Pod h holds a core on node a (not bound yet); pod p is known and would fit beside it."""
    env, client = _env()
    for name in ("h", "p"):
        env.cluster.add(make_pod(name, cpu="1", raw=True))
    assert env.filter(make_pod("h", cpu="1", raw=True), ["a"])["NodeNames"] == ["a"]
    return env, client


@pytest.mark.parametrize("value", list(HOSTILE))
@pytest.mark.parametrize("slot", list(SLOTS))
def test_hostile_values_are_400_and_change_nothing(slot: str, value: str) -> None:
    env, client = _held_env()
    before = env.state()
    assert list(before["pods"]) == ["default/h"]
    path, template = SLOTS[slot]
    r = client.post(path, content=template.replace(b"X", HOSTILE[value]))
    assert r.status_code == 400, r.text
    assert r.json()["Error"]
    assert env.state() == before and env.binder.bound == {}


@pytest.mark.parametrize("value", ["deep", "non-utf8"])
@pytest.mark.parametrize("verb", VERBS)
def test_hostile_values_in_fields_no_verb_reads_are_400_too(verb: str, value: str) -> None:
    """Deep nesting and non-UTF-8 bytes anywhere in the body, even where nothing decodes them."""
    env, client = _held_env()
    before = env.state()
    body = b'{"Pod": %s, "NodeNames": ["a"], "PodName": "h", "PodNamespace": "default", ' % POD
    body += b'"PodUID": "uid-default-h", "Node": "a", "Unknown": %s}' % HOSTILE[value]
    r = client.post(verb, content=body)
    assert r.status_code == 400, r.text
    assert env.state() == before and env.binder.bound == {}


# ---- any body: never a 5xx ---------------------------------------------------------------------


class Spliced(bytes):
    """Bytes written into the body as they are (deep nesting, bad UTF-8, huge numbers)."""


def _render(value: Any) -> bytes:
    if isinstance(value, Spliced):
        return bytes(value)
    if isinstance(value, dict):
        inner = b",".join(json.dumps(k).encode() + b":" + _render(v) for k, v in value.items())
        return b"{" + inner + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(_render(v) for v in value) + b"]"
    return json.dumps(value).encode()


_spliced = st.builds(
    Spliced,
    st.sampled_from(list(HOSTILE)).map(lambda k: HOSTILE[k])
    | st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n)
    | st.binary(max_size=6).map(lambda b: b'"' + b.replace(b'"', b"").replace(b"\\", b"") + b'"'),
)
_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6) | _spliced
_names = st.sampled_from(["a", "b"])
_keys = st.text(max_size=4)
_node = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": _names | _leaf})})
_pod = st.sampled_from([make_pod("p", cpu="1", raw=True), make_pod("q", cpu="9", raw=True)])
_json = st.recursive(
    _leaf | _pod | _node,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_keys, kids, max_size=3),
    max_leaves=8,
)
_fields = {
    "Pod": _pod | _json,
    "Nodes": st.fixed_dictionaries({"items": st.lists(_node | _json, max_size=3)}) | _json,
    "NodeNames": st.lists(_names | _json, max_size=3) | _json,
    "PodName": st.sampled_from(["h", "p"]) | _json,
    "PodNamespace": st.just("default") | _json,
    "PodUID": st.sampled_from(["uid-default-h", "uid-default-p"]) | _json,
    "Node": _names | _json,
    "NodeNameToMetaVictims": st.dictionaries(_names, _json, max_size=2) | _json,
    "NodeNameToVictims": st.dictionaries(_names, _json, max_size=2) | _json,
}
_body = st.fixed_dictionaries({}, optional=_fields) | _json


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(verb=st.sampled_from(VERBS), doc=_body)
def test_random_shaped_bodies_never_get_a_5xx_and_a_400_changes_nothing(
    verb: str, doc: Any
) -> None:
    env, client = _shared()
    before = env.state()
    r = client.post(verb, content=_render(doc))
    assert r.status_code < 500, r.text
    if r.status_code == 400:
        assert r.json()["Error"]
        assert env.state() == before


_SHARED: list[tuple[Env, TestClient]] = []


def _shared() -> tuple[Env, TestClient]:
    if not _SHARED:
        _SHARED.append(_held_env())
    return _SHARED[0]
