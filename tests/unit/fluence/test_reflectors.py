"""List+watch reflectors against a scripted API: events, bookmarks, 410 re-list, unserved APIs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from fluence.pods import Pod, decode_pod
from fluence.reflectors import ApiStatusError, RawApi, Reflector, retry_delay
from tests.unit.fluence.test_pods import make_pod


class FakeResponse:
    def __init__(self, body: bytes, chunks: list[bytes] | None = None) -> None:
        self.data = body
        self.status = 200
        self._chunks = chunks or []

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self._chunks

    def release_conn(self) -> None:
        pass


class ScriptedApi(RawApi):
    """Answers lists and watches from queues the test fills; every call is recorded."""

    def __init__(self) -> None:
        super().__init__(None)
        self.lists: list[Any] = []
        self.watches: list[Any] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.idle = threading.Event()

    def get(self, path: str, query: list[tuple[str, Any]], timeout: float) -> Any:
        q = dict(query)
        self.calls.append((path, q))
        queue = self.watches if q.get("watch") else self.lists
        if not queue:
            self.idle.set()
            raise ApiStatusError(503, "script finished")
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def _list(rv: str, pods: list[dict[str, Any]]) -> FakeResponse:
    return FakeResponse(json.dumps({"metadata": {"resourceVersion": rv}, "items": pods}).encode())


def _watch(*events: dict[str, Any]) -> FakeResponse:
    text = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    # Split mid-line to check that lines are reassembled across chunks.
    return FakeResponse(b"", [text[:17], text[17:40], text[40:]])


def _pod(name: str, rv: str, **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = make_pod(name, raw=True, **kw)
    doc["metadata"]["resourceVersion"] = rv
    return doc


def test_reflector_lists_watches_and_re_lists_after_410() -> None:
    api = ScriptedApi()
    api.lists = [_list("10", [_pod("a", "9")]), _list("30", [_pod("a", "25"), _pod("c", "30")])]
    api.watches = [
        _watch(
            {"type": "ADDED", "object": _pod("b", "11")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            {"type": "MODIFIED", "object": _pod("b", "16", node="n1")},
            {"type": "DELETED", "object": _pod("a", "17")},
        ),
        _watch({"type": "ERROR", "object": {"code": 410, "message": "too old"}}),
    ]
    seen: list[tuple[str, str]] = []
    r: Reflector[Pod] = Reflector(api, "/api/v1/pods", decode_pod, lambda p: p.key)
    r.add_handler(lambda kind, pod: seen.append((kind, pod.metadata.name)))
    r.start()
    try:
        assert r.synced.wait(5)
        assert api.idle.wait(5)
    finally:
        r.stop()
    assert seen == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "b"),
        ("DELETED", "a"),
        ("ADDED", "a"),
        ("ADDED", "c"),
        ("DELETED", "b"),
    ]
    watch_rvs = [q["resourceVersion"] for _, q in api.calls if q.get("watch")]
    assert watch_rvs[:2] == ["10", "17"]
    assert all(q.get("allowWatchBookmarks") == "true" for _, q in api.calls if q.get("watch"))
    assert sorted(p.metadata.name for p in r.items()) == ["a", "c"]


def test_an_api_that_is_not_served_counts_as_synced_and_empty() -> None:
    api = ScriptedApi()
    api.lists = [ApiStatusError(404, "the server could not find the requested resource")]
    r: Reflector[Pod] = Reflector(
        api, "/apis/x/v1/podgroups", decode_pod, lambda p: p.key, optional=True
    )
    r.start()
    try:
        assert r.synced.wait(5)
        assert r.items() == [] and not r.served
    finally:
        r.stop()


def test_an_api_that_stops_being_served_forgets_its_objects() -> None:
    """After an upgrade removes a version (PodGroup v1alpha2 in 1.37), its objects are gone."""
    api = ScriptedApi()
    api.lists = [
        _list("10", [_pod("a", "9")]),
        ApiStatusError(404, "the server could not find the requested resource"),
    ]
    api.watches = [_watch({"type": "ERROR", "object": {"code": 410, "message": "too old"}})]
    r: Reflector[Pod] = Reflector(
        api, "/apis/x/v1/podgroups", decode_pod, lambda p: p.key, optional=True
    )
    r.start()
    try:
        assert r.synced.wait(5)
        deadline = time.monotonic() + 5
        while r.served and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not r.served and r.items() == []
    finally:
        r.stop()


def test_lists_come_in_pages_and_an_undecodable_object_is_skipped_not_fatal() -> None:
    api = ScriptedApi()
    bad = {"metadata": {"name": "bad", "namespace": "default"}, "spec": {"containers": 7}}
    page1 = {
        "metadata": {"resourceVersion": "40", "continue": "tok"},
        "items": [_pod("a", "38"), bad],
    }
    page2 = {"metadata": {"resourceVersion": "40"}, "items": [_pod("b", "39")]}
    api.lists = [FakeResponse(json.dumps(page1).encode()), FakeResponse(json.dumps(page2).encode())]
    api.watches = [
        _watch(
            {
                "type": "ADDED",
                "object": {**bad, "metadata": {**bad["metadata"], "resourceVersion": "41"}},
            },
            {"type": "ADDED", "object": _pod("c", "42")},
        )
    ]
    r: Reflector[Pod] = Reflector(api, "/api/v1/pods", decode_pod, lambda p: p.key)
    r.start()
    assert api.idle.wait(10)
    r.stop()
    assert sorted(p.metadata.name for p in r.items()) == ["a", "b", "c"]
    lists = [q for path, q in api.calls if not q.get("watch")]
    assert lists[0] == {"limit": 500} and lists[1] == {"limit": 500, "continue": "tok"}
    watch = next(q for path, q in api.calls if q.get("watch"))
    assert watch["resourceVersion"] == "40"


def test_retries_back_off_with_jitter_up_to_a_cap() -> None:
    low = [retry_delay(n, rand=lambda: 0.0) for n in range(1, 9)]
    high = [retry_delay(n, rand=lambda: 1.0) for n in range(1, 9)]
    assert low == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert high == [1.5, 3.0, 6.0, 12.0, 24.0, 45.0, 45.0, 45.0]
