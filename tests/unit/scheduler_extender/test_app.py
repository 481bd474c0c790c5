"""The extender's HTTP verbs end to end through the ASGI app, with a fake binder."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import Pod, PodGroup, decode_pod, decode_podgroup
from fluence.scheduling.holdings import COMMITTED, TENTATIVE
from fluence.scheduling.record import decode_record
from scheduler_extender.app import create_app
from scheduler_extender.scheduling import BindConflict, BindError, BindOutcomeUnknown, Scheduler
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")


class FakeCluster:
    """Pods and PodGroups as the reflectors would hold them."""

    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}
        self.groups: dict[tuple[str, str, str], PodGroup] = {}

    def add(self, doc: dict[str, Any]) -> Pod:
        pod = decode_pod(json.dumps(doc))
        self.pods[pod.key] = pod
        return pod

    def add_group(self, name: str, min_count: int, **spec: Any) -> None:
        doc = {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
        }
        self.groups[("scheduling.k8s.io", "default", name)] = decode_podgroup(json.dumps(doc))

    def pods_in(self, namespace: str) -> Sequence[Pod]:
        return [p for p in self.pods.values() if p.metadata.namespace == namespace]

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
        return self.groups.get((api_group, namespace, name))


class FakeBinder:
    def __init__(self) -> None:
        self.bound: dict[str, tuple[str, dict[str, str]]] = {}
        self.fail: str | None = None
        self.unknown: str | None = None
        self.conflict_node: str | None = None

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        await asyncio.sleep(0)  # let other binds run in between, as a real request would
        if self.unknown:
            raise BindOutcomeUnknown(self.unknown)
        if self.fail:
            raise BindError(self.fail)
        if self.conflict_node is not None:
            raise BindConflict("Precondition failed: UID in precondition: x")
        self.bound[f"{namespace}/{name}"] = (node, dict(annotations))

    async def node_of(self, namespace: str, name: str) -> str | None:
        return self.conflict_node or None


class Env:
    def __init__(self, nodes: list[Any], config: resources.ResourcesConfig = EXAMPLES) -> None:
        self.graph = ClusterGraph(config, nodes)
        self.ledger = Ledger(self.graph)
        self.cluster = FakeCluster()
        self.binder = FakeBinder()
        self.scheduler = Scheduler(self.graph, self.ledger, self.cluster, self.binder)
        self.client = TestClient(create_app(self.scheduler, max_body_bytes=1 << 20, metrics=False))

    def filter(self, pod: dict[str, Any], nodes: list[str], cache: bool = True) -> dict[str, Any]:
        if cache:
            body: dict[str, Any] = {"Pod": pod, "Nodes": None, "NodeNames": nodes}
        else:
            items = [make_node(n, raw=True) for n in nodes]
            body = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
        r = self.client.post("/filter", json=body)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    def bind(self, pod: dict[str, Any], node: str) -> dict[str, Any]:
        body = {
            "PodName": pod["metadata"]["name"],
            "PodNamespace": pod["metadata"]["namespace"],
            "PodUID": pod["metadata"]["uid"],
            "Node": node,
        }
        r = self.client.post("/bind", json=body)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = self.client.get("/state").json()
        return out


def test_four_one_cpu_gang_pods_each_get_the_four_cpu_node_and_a_fifth_waits() -> None:
    env = Env([make_node("big", cpu="4", memory="8Gi")])
    env.cluster.add_group("g", 4)
    gang = [make_pod(f"w{i}", cpu="1", memory="1Gi", group="g", raw=True) for i in range(4)]
    for p in gang:
        env.cluster.add(p)
    for p in gang:
        out = env.filter(p, ["big"])
        assert out["NodeNames"] == ["big"] and out["FailedNodes"] == {}
        assert env.bind(p, "big") == {"Error": ""}
    fifth = make_pod("x", cpu="1", memory="1Gi", raw=True)
    out = env.filter(fifth, ["big"])
    assert out["NodeNames"] == []
    assert "does not fit now" in out["FailedNodes"]["big"]
    state = env.state()
    assert state["version"] == 1
    assert state["nodes"]["big"]["core"] == {"capacity": 4000, "allocated": 4000, "free": 0}
    assert state["groups"]["default/g"]["pods"] == {f"default/w{i}": "big" for i in range(4)}


def test_each_member_gets_its_own_node_and_prioritize_agrees() -> None:
    env = Env([make_node("a", cpu="2"), make_node("b", cpu="2")])
    env.cluster.add_group("g", 2)
    gang = [make_pod(f"w{i}", cpu="2", group="g", raw=True) for i in range(2)]
    for p in gang:
        env.cluster.add(p)
    chosen = [env.filter(p, ["a", "b"])["NodeNames"] for p in gang]
    assert sorted(n for (n,) in chosen) == ["a", "b"]
    r = env.client.post(
        "/prioritize", json={"Pod": gang[0], "Nodes": None, "NodeNames": ["a", "b"]}
    )
    assert {h["Host"]: h["Score"] for h in r.json()} == {chosen[0][0]: 10, chosen[1][0]: 0}


def test_quorum_is_awaited_before_matching() -> None:
    env = Env([make_node("a")])
    env.cluster.add_group("g", 3)
    p = env.cluster.add(make_pod("w0", group="g", raw=True))
    out = env.filter(make_pod("w0", group="g", raw=True), ["a"])
    assert out["FailedNodes"]["a"] == "waiting for 2 more pod(s) of group default/g (1 of 3 exist)"
    assert env.state()["pods"] == {}
    assert p.key == "default/w0"


def test_a_gang_whose_podgroup_is_not_known_yet_waits_for_it() -> None:
    """Two members are visible but not their PodGroup: nothing is placed, not even a part."""
    env = Env([make_node("a"), make_node("b")])
    for i in range(2):
        env.cluster.add(make_pod(f"w{i}", group="g", raw=True))
    out = env.filter(make_pod("w0", group="g", raw=True), ["a", "b"])
    # An error kube-scheduler retries after its back-off, not nodes that failed.
    assert out["Error"] == "waiting for PodGroup default/g to exist"
    assert not out.get("NodeNames") and not out.get("FailedNodes")
    assert env.state()["pods"] == {}
    env.cluster.add_group("g", 2)
    out = env.filter(make_pod("w0", group="g", raw=True), ["a", "b"])
    assert len(out["NodeNames"]) == 1
    assert sorted(env.state()["pods"]) == ["default/w0", "default/w1"]


def test_never_fits_is_unresolvable_and_other_schedulers_pass_through() -> None:
    env = Env([make_node("a", cpu="2")])
    out = env.filter(make_pod("huge", cpu="3", raw=True), ["a"])
    assert "can never fit" in out["FailedAndUnresolvableNodes"]["a"]
    other = make_pod("x", scheduler="default-scheduler", cpu="3", raw=True)
    assert env.filter(other, ["a"])["NodeNames"] == ["a"]


def test_node_list_form_returns_the_chosen_node_object() -> None:
    env = Env([make_node("a", cpu="1"), make_node("b", cpu="1")])
    out = env.filter(make_pod("p", cpu="1", raw=True), ["a", "b"], cache=False)
    assert out["NodeNames"] is None
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] in (["a"], ["b"])


def test_fluxion_choice_outside_the_candidates_is_re_placed_within_them() -> None:
    env = Env([make_node("a", cpu="1"), make_node("b", cpu="1")])
    pod = make_pod("p", cpu="1", raw=True)
    first = env.filter(pod, ["a", "b"])["NodeNames"][0]
    other = "b" if first == "a" else "a"
    assert env.filter(pod, [other])["NodeNames"] == [other]
    assert env.state()["pods"]["default/p"]["node"] == other


def test_tainted_node_is_skipped_unless_tolerated() -> None:
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    env = Env([make_node("t", cpu="4", taints=[taint]), make_node("u", cpu="1")])
    assert env.filter(make_pod("p", cpu="2", raw=True), ["t", "u"])["FailedAndUnresolvableNodes"]
    tol = [{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]
    assert env.filter(make_pod("q", cpu="2", tolerations=tol, raw=True), ["t", "u"])[
        "NodeNames"
    ] == ["t"]


def test_quantum_pod_keeps_all_candidates_and_binds_with_backend_annotations() -> None:
    env = Env([make_node("a"), make_node("b")])
    pod = make_pod(
        "sampler",
        cpu=None,
        extra={names.resource_name("qpu"): "1"},
        annotations={names.ANNOTATION_REQUIRE_PREFIX + "vendor": "ibm"},
        raw=True,
    )
    assert env.filter(pod, ["a", "b"])["NodeNames"] == ["a", "b"]
    assert env.bind(pod, "b") == {"Error": ""}
    node, ann = env.binder.bound["default/sampler"]
    backend = ann[names.ANNOTATION_BACKEND]
    assert node == "b" and backend in ("ibm_fez", "ibm_marrakesh")
    assert ann[names.attr_annotation("vendor")] == "ibm"
    # What a stock QRMI program reads, through the webhook's downward-API variables.
    assert ann[names.ANNOTATION_QRMI_RESOURCES] == backend
    assert ann[names.ANNOTATION_QRMI_TYPES] == "qiskit-runtime-service"
    rec = decode_record(ann[names.ANNOTATION_ALLOCATION])
    assert (rec.backend, rec.group, rec.devices[0].name) == (backend, "default/sampler", backend)
    assert env.state()["backends"][backend]["held"] is True
    second = make_pod("s2", cpu=None, extra={names.resource_name("qpu"): "1"}, raw=True)
    env.filter(second, ["a"])
    third = env.filter(
        make_pod("s3", cpu=None, extra={names.resource_name("qpu"): "1"}, raw=True), ["a"]
    )
    assert "does not fit now" in third["FailedNodes"]["a"]


def test_bind_elsewhere_moves_the_allocation_and_failures_release_it() -> None:
    env = Env([make_node("a", cpu="2"), make_node("b", cpu="2")])
    pod = make_pod("p", cpu="2", raw=True)
    (first,) = env.filter(pod, ["a", "b"])["NodeNames"]
    other = "b" if first == "a" else "a"
    assert env.bind(pod, other) == {"Error": ""}
    assert env.state()["nodes"][other]["core"]["allocated"] == 2000
    assert env.state()["nodes"][first]["core"]["allocated"] == 0
    q = make_pod("q", cpu="2", raw=True)
    env.filter(q, ["a", "b"])
    env.binder.fail = "the API server said 500"
    assert "the API server said 500" in env.bind(q, first)["Error"]
    assert "default/q" not in env.state()["pods"]


def test_409_is_fine_when_the_pod_is_already_where_we_wanted() -> None:
    env = Env([make_node("a", cpu="2")])
    pod = make_pod("p", cpu="1", raw=True)
    env.filter(pod, ["a"])
    env.binder.conflict_node = "a"
    assert env.bind(pod, "a") == {"Error": ""}


def test_409_elsewhere_or_for_a_recreated_pod_releases_and_says_which() -> None:
    env = Env([make_node("a", cpu="2"), make_node("b", cpu="2")])
    pod = make_pod("p", cpu="1", raw=True)
    (node,) = env.filter(pod, ["a", "b"])["NodeNames"]
    env.binder.conflict_node = "b" if node == "a" else "a"
    error = env.bind(pod, node)["Error"]
    assert error == f"pod default/p is already bound to {env.binder.conflict_node}, not {node}"
    assert "default/p" not in env.state()["pods"]
    q = make_pod("q", cpu="1", raw=True)
    (node,) = env.filter(q, ["a", "b"])["NodeNames"]
    env.binder.conflict_node = ""  # not bound anywhere: the UID precondition failed
    error = env.bind(q, node)["Error"]
    assert error.startswith(f"binding pod default/q to {node} was refused: Precondition failed")
    assert "default/q" not in env.state()["pods"]


def test_preempt_gives_kube_scheduler_no_victims_so_no_gang_is_cut_in_part() -> None:
    env = Env([make_node("a")])
    victim = make_pod("v", raw=True)
    body = {
        "Pod": make_pod("p", raw=True),
        "NodeNameToVictims": {"a": {"Pods": [victim], "NumPDBViolations": 1}},
    }
    r = env.client.post("/preempt", json=body)
    assert r.json() == {"NodeNameToMetaVictims": {}}
    assert env.state()["pods"] == {}  # asking changes nothing without an evictor


def test_health_readiness_and_oversized_bodies() -> None:
    env = Env([make_node("a")])
    assert env.client.get("/healthz").status_code == 200
    assert env.client.get("/readyz").status_code == 200
    r = env.client.post(
        "/filter", content=b"x" * ((1 << 20) + 1), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413 and "FLUENCE_MAX_BODY_BYTES" in r.json()["Error"]


_BAD_CPU = (
    b'{"Pod": {"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": '
    b'[{"resources": {"requests": {"cpu": "lots"}}}]}}, "NodeNames": ["a"]}'
)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[]",
        b'{"Pod": 3}',
        b'{"NodeNames": ["a"]}',
        b'{"Pod": {"metadata": {}}, "NodeNames": ["a"]}',
        _BAD_CPU,
    ],
)
def test_malformed_filter_bodies_are_400_with_a_message(body: bytes) -> None:
    env = Env([make_node("a")])
    r = env.client.post("/filter", content=body)
    assert r.status_code == 400 and r.json()["Error"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "Pod",
                    "NodeNames",
                    "Nodes",
                    "metadata",
                    "spec",
                    "PodName",
                    "Node",
                    "name",
                    "namespace",
                ]
            ),
            kids,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    verb=st.sampled_from(["/filter", "/prioritize", "/bind", "/preempt"]),
    doc=_json,
    junk=st.binary(max_size=40),
)
def test_random_bodies_never_500_and_never_change_state(verb: str, doc: Any, junk: bytes) -> None:
    env = _shared_env()
    for body in (json.dumps(doc).encode(), junk):
        before = env.state()
        r = env.client.post(verb, content=body)
        assert r.status_code in (200, 400), r.text
        if r.status_code == 400:
            assert r.json()["Error"]
            assert env.state() == before


_ENV: list[Env] = []


def _shared_env() -> Env:
    if not _ENV:
        _ENV.append(Env([make_node("a")]))
    return _ENV[0]


def test_concurrent_binds_never_over_commit() -> None:
    env = Env([make_node(f"n{i}", cpu="4") for i in range(3)])
    pods = [make_pod(f"p{i}", cpu="1", raw=True) for i in range(14)]
    chosen: dict[str, str] = {}
    for p in pods:
        got = env.filter(p, ["n0", "n1", "n2"])["NodeNames"]
        if got:
            chosen[p["metadata"]["name"]] = got[0]
    assert len(chosen) == 12
    # Half of the binds go to another node than Fluxion chose (the allocation moves or fails).
    targets = {
        n: (node if i % 2 else f"n{(int(node[1]) + 1) % 3}")
        for i, (n, node) in enumerate(chosen.items())
    }
    items = list(targets.items())
    half = len(items) // 2

    async def bind_all(part: list[tuple[str, str]]) -> list[str]:
        return list(
            await asyncio.gather(*(env.scheduler.bind("default", n, "", node) for n, node in part))
        )

    # Two threads, each with its own loop running its binds concurrently: the ledger
    # sees commits interleaved between awaits and between threads.
    with ThreadPoolExecutor(max_workers=2) as pool:
        halves = list(
            pool.map(lambda part: asyncio.run(bind_all(part)), [items[:half], items[half:]])
        )
    errors = halves[0] + halves[1]
    state = env.state()
    for node, per in state["nodes"].items():
        assert per["core"]["allocated"] <= per["core"]["capacity"], node
        held = sum(1 for v in state["pods"].values() if v["node"] == node) * 1000
        assert per["core"]["allocated"] == held
    ok = [n for n, e in zip(targets, errors, strict=True) if not e]
    assert sorted(env.binder.bound) == sorted(f"default/{n}" for n in ok)
    assert all("do not fit" in e for e in errors if e)


def test_scheduling_verbs_answer_retry_until_the_rebuild_is_done() -> None:
    """Before recovery finishes nothing is decided on a half-built graph, and nothing is held."""
    env = Env([make_node("a", cpu="2")])
    state = {"ready": False, "alive": True}
    client = TestClient(
        create_app(
            env.scheduler,
            ready=lambda: state["ready"],
            alive=lambda: state["alive"],
            metrics=False,
        )
    )
    pod = make_pod("p", cpu="1", raw=True)
    env.cluster.add(pod)
    calls = {
        "/filter": {"Pod": pod, "Nodes": None, "NodeNames": ["a"]},
        "/prioritize": {"Pod": pod, "Nodes": None, "NodeNames": ["a"]},
        "/bind": {
            "PodName": "p",
            "PodNamespace": "default",
            "PodUID": "uid-default-p",
            "Node": "a",
        },
        "/preempt": {"Pod": pod, "NodeNameToVictims": {}},
    }
    for path, body in calls.items():
        r = client.post(path, json=body)
        assert r.status_code == 503, (path, r.text)
        assert "rebuilding" in r.json()["Error"]
    assert env.ledger.holdings() == {} and env.binder.bound == {}
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200
    state["ready"] = True
    r = client.post("/filter", json=calls["/filter"])
    assert r.status_code == 200 and r.json()["NodeNames"] == ["a"]
    state["alive"] = False
    assert client.get("/healthz").status_code == 503


def test_a_bind_whose_outcome_is_unknown_keeps_the_allocation() -> None:
    """A timeout may hide a Binding that was made: nothing is released until that is known."""
    env = Env([make_node("a", cpu="2")])
    pod = make_pod("p", cpu="2", raw=True)
    env.cluster.add(pod)
    assert env.filter(pod, ["a"])["NodeNames"] == ["a"]
    env.binder.unknown = "no answer from the API server: TimeoutError()"
    r = env.bind(pod, "a")
    assert "outcome unknown" in r["Error"]
    held = env.ledger.get("default/p")
    assert held is not None and held.state == TENTATIVE
    # Another pod cannot take the capacity the possibly-bound pod holds.
    other = make_pod("q", cpu="1", raw=True)
    env.cluster.add(other)
    assert env.filter(other, ["a"])["NodeNames"] in (None, [])
    # The retry finds the pod bound already (409, read back on the same node): success.
    env.binder.unknown = None
    env.binder.conflict_node = "a"
    assert env.bind(pod, "a").get("Error", "") == ""
    assert env.ledger.get("default/p") is held and held.state == COMMITTED


def test_an_unknown_bind_the_watch_already_confirmed_stays_committed() -> None:
    env = Env([make_node("a", cpu="2")])
    pod = make_pod("p", cpu="1", raw=True)
    env.cluster.add(pod)
    env.filter(pod, ["a"])
    held = env.ledger.commit("default/p", "uid-default-p", "a")
    seen = make_pod(
        "p", cpu="1", node="a", phase="Running", annotations=env.ledger.annotations(held)
    )
    env.ledger.observe(seen)  # the watch shows the Binding before its answer is lost
    env.ledger.unconfirmed("default/p")
    assert held.state == COMMITTED
    env.ledger.expire()
    assert env.ledger.get("default/p") is held


def test_bind_without_the_pod_uid_is_refused_and_binds_nothing() -> None:
    """Without the UID a Binding could land on another pod recreated under the same name."""
    env = Env([make_node("a", cpu="2")])
    pod = make_pod("p", cpu="1", raw=True)
    env.cluster.add(pod)
    env.filter(pod, ["a"])
    body = {"PodName": "p", "PodNamespace": "default", "Node": "a"}
    r = env.client.post("/bind", json=body)
    assert r.status_code == 400 and "PodUID" in r.json()["Error"]
    assert env.binder.bound == {}
    held = env.ledger.get("default/p")
    assert held is not None and held.state == TENTATIVE
