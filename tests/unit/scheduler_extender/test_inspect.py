"""The inspection routes (/explain, /graph, /match) through the real app factory, in process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml

from fluence.group_jobspec import compute_jobspec
from fluence.pods import decode_pod
from scheduler_extender.app import create_app
from scheduler_extender.inspect import inspect_routes
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env


class Inspected:
    def __init__(self, env: Env, client: httpx.AsyncClient) -> None:
        self.env = env
        self.http = client

    async def explain(self, pod: str) -> dict[str, Any]:
        r = await self.http.get("/explain", params={"pod": pod})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    async def state(self) -> dict[str, Any]:
        out: dict[str, Any] = (await self.http.get("/state")).json()
        return out


@pytest.fixture
async def inspected() -> AsyncIterator[Inspected]:
    env = Env([make_node("a", cpu="4"), make_node("b", cpu="4")])
    app = create_app(env.scheduler, max_body_bytes=1 << 20, metrics=False)
    app.router.routes.extend(inspect_routes(env.scheduler))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        yield Inspected(env, client)


async def test_explain_says_a_gang_waits_for_its_quorum(inspected: Inspected) -> None:
    inspected.env.cluster.add_group("g", 3)
    for i in range(2):
        inspected.env.cluster.add(make_pod(f"w{i}", cpu="1", group="g", raw=True))
    doc = await inspected.explain("default/w0")
    assert doc["known"] is True and doc["group"] == "default/g"
    assert doc["verdict"] == "waiting-for-quorum"
    assert "waiting for 1 more pod(s) of group default/g (2 of 3 exist)" in doc["reason"]
    assert doc["quorum"] == {"source": "native", "min_count": 3, "present": 2}
    assert [m["pod"] for m in doc["members"]] == ["default/w0", "default/w1"]
    assert doc["jobspecs"][0]["pods"] == 2 and doc["jobspecs"][0]["kind"] == "compute"


async def test_explain_names_busy_and_never_fitting_gangs(inspected: Inspected) -> None:
    env = inspected.env
    blocker = make_pod("blocker", cpu="3", raw=True)
    env.cluster.add(blocker)
    assert env.filter(blocker, ["a", "b"])["NodeNames"]
    env.cluster.add_group("big", 2)
    for i in range(2):
        env.cluster.add(make_pod(f"big{i}", cpu="3", group="big", raw=True))
    doc = await inspected.explain("default/big0")
    assert doc["verdict"] == "busy", doc
    assert "does not fit now" in doc["reason"] and "2 pod(s) of cpu 3000m" in doc["reason"]
    env.cluster.add_group("wide", 3)
    for i in range(3):
        env.cluster.add(make_pod(f"wide{i}", cpu="3", group="wide", raw=True))
    doc = await inspected.explain("default/wide1")
    assert doc["verdict"] == "unsatisfiable"
    assert "can never fit" in doc["reason"]


async def test_explain_reports_where_a_placed_pod_went(inspected: Inspected) -> None:
    env = inspected.env
    env.cluster.add_group("pair", 2)
    pods = [make_pod(f"p{i}", cpu="2", group="pair", raw=True) for i in range(2)]
    for p in pods:
        env.cluster.add(p)
    node = env.filter(pods[0], ["a", "b"])["NodeNames"][0]
    doc = await inspected.explain("default/p0")
    assert doc["verdict"] == "placed"
    assert doc["holding"]["state"] == "tentative" and doc["holding"]["node"] == node
    assert doc["holding"]["amounts"]["core"] == 2000
    assert "waiting for the scheduler to bind it" in doc["reason"]
    assert {m["holding"] for m in doc["members"]} == {"tentative"}
    assert env.bind(pods[0], node) == {"Error": ""}
    doc = await inspected.explain("default/p0")
    assert doc["holding"]["state"] == "committed"


async def test_explain_unknown_pod_and_bad_parameter(inspected: Inspected) -> None:
    doc = await inspected.explain("default/ghost")
    assert doc["known"] is False and doc["verdict"] == "unknown"
    assert "not known to the extender" in doc["reason"]
    r = await inspected.http.get("/explain", params={"pod": "noslash"})
    assert r.status_code == 400 and "namespace/name" in r.json()["error"]


async def test_explain_pod_of_another_scheduler(inspected: Inspected) -> None:
    inspected.env.cluster.add(make_pod("other", scheduler="default-scheduler", raw=True))
    doc = await inspected.explain("default/other")
    assert doc["verdict"] == "not-ours" and "default-scheduler" in doc["reason"]


async def test_graph_serves_the_live_jgf(inspected: Inspected) -> None:
    r = await inspected.http.get("/graph", params={"format": "jgf"})
    assert r.status_code == 200
    verts = r.json()["graph"]["nodes"]
    paths = {v["metadata"]["paths"]["containment"] for v in verts}
    assert {"/cluster", "/cluster/a", "/cluster/b", "/cluster/ibm_fez"} <= paths
    assert len(r.json()["graph"]["edges"]) == len(verts) - 1
    bad = await inspected.http.get("/graph", params={"format": "svg"})
    assert bad.status_code == 400 and "format=jgf" in bad.json()["error"]


async def test_match_fits_busy_or_never_and_changes_nothing(inspected: Inspected) -> None:
    env = inspected.env
    blocker = make_pod("blocker", cpu="3", raw=True)
    env.cluster.add(blocker)
    env.filter(blocker, ["a", "b"])
    before = await inspected.state()
    usage_before = env.graph.usage()
    fits = compute_jobspec((("core", 1000),), 2, "what-if")
    r = await inspected.http.post("/match", content=yaml.safe_dump(fits))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["status"] == "fits"
    assert sum(per["core"] for per in doc["nodes"].values()) == 2000
    busy = compute_jobspec((("core", 3000),), 2, "what-if")
    r = await inspected.http.post("/match", json=busy)
    assert r.json()["status"] == "busy"
    # When the blocker is expected to end (the default runtime, an hour), it would start.
    assert r.json()["starts_in"] in (3599, 3600) and "would start at" in r.json()["message"]
    never = compute_jobspec((("core", 5000),), 1, "what-if")
    r = await inspected.http.post("/match", json=never)
    assert r.json()["status"] == "unsatisfiable" and "can never fit" in r.json()["message"]
    assert await inspected.state() == before
    assert env.graph.usage() == usage_before


async def test_match_rejects_what_is_not_a_jobspec(inspected: Inspected) -> None:
    for body in (b"", b"{not yaml: [", b"- a list\n", b"resources: 3\n"):
        r = await inspected.http.post("/match", content=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]


async def test_plan_rejects_what_is_not_a_list_of_pods_and_changes_nothing(
    inspected: Inspected,
) -> None:
    before = await inspected.state()
    qpu = {"fluxion.flux-framework.org/nosuch": "1"}
    for body in (
        b"",
        b"[1, 2]",
        b'{"pods": []}',
        b'{"pods": [{"spec": {"containers": 3}}]}',
        json.dumps({"pods": [make_pod("p", extra=qpu, raw=True)]}).encode(),
        json.dumps({"pods": [{}] * 10_001}).encode(),
    ):
        r = await inspected.http.post("/plan", content=body)
        assert r.status_code == 400, (body[:80], r.text)
        assert r.json()["error"]
    assert await inspected.state() == before


async def test_explain_carries_the_ledgers_last_match(inspected: Inspected) -> None:
    pod = make_pod("solo", cpu="1000", raw=True)
    inspected.env.cluster.add(pod)
    doc = await inspected.explain("default/solo")
    assert doc["last_match"] is None
    result = inspected.env.ledger.place("default/solo", [decode_pod(json.dumps(pod))])
    doc = await inspected.explain("default/solo")
    last = doc["last_match"]
    assert (last["status"], last["message"], last["pods"]) == (result.status, result.message, 1)
    assert result.status == "unsatisfiable"
