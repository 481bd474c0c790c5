"""The filter fast path: lazily decoded candidates, gang lookup by index, kept match jobs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import hypothesis.strategies as st
import msgspec
import pytest
from hypothesis import given
from starlette.testclient import TestClient

from fluence import resources
from fluence.cluster_graph import ClusterGraph
from fluence.groups import GroupRef, PodsByGroup, identify
from fluence.ledger import Ledger
from fluence.pods import Pod, PodGroup
from scheduler_extender import wire
from scheduler_extender.app import create_app
from scheduler_extender.binder import NullBinder
from scheduler_extender.candidates import Candidates
from scheduler_extender.scheduling import LAG_GRACE_SECONDS, GroupIndexedView, Scheduler
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")
NAME = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)


# ---- Candidates --------------------------------------------------------------------------


@given(st.lists(NAME, max_size=30, unique=True), NAME, st.sampled_from(["", " ", "\n  "]))
def test_raw_membership_agrees_with_the_decoded_list(
    names: list[str], probe: str, space: str
) -> None:
    raw = ("[" + space + ("," + space).join(json.dumps(n) for n in names) + space + "]").encode()
    lazy = Candidates.from_json(raw)
    assert (probe in lazy) is (probe in names)
    for n in names:
        assert n in lazy
    assert list(lazy) == names and len(lazy) == len(names)


def test_a_name_inside_another_string_is_not_a_member() -> None:
    # "b" appears quoted inside the first element (escaped quotes), but is not an element.
    raw = json.dumps(['a\\"b\\"c', "d"]).encode()
    assert bytes(raw).count(b'"d"') == 1
    tricky = json.dumps(['x", "b', "d"]).encode()
    lazy = Candidates.from_json(tricky)
    assert "b" not in lazy and "d" in lazy
    assert 'x", "b' in lazy  # needs escaping: answered from the decoded list


def test_prefixes_and_suffixes_of_names_are_not_members() -> None:
    lazy = Candidates.from_json(b'["node-1", "node-10", "xnode-2"]')
    assert "node-1" in lazy and "node-10" in lazy
    assert "node-" not in lazy and "node-2" not in lazy and "ode-1" not in lazy


def test_null_and_absent_names_are_empty() -> None:
    assert list(Candidates.from_json(b"null")) == []
    args = wire.filter_args.decode(b'{"Pod": {}}')
    assert not args.has_node_names and list(args.candidates()) == []


@pytest.mark.parametrize(
    "raw",
    [b"[1, 2]", b"[1]", b"[ null ]", b'["a", 1]', b'["a", ["b"]]', b'[{"a": "b"}]', b'"a"', b"{}"],
)
def test_anything_but_a_list_of_names_is_refused_once_counted(raw: bytes) -> None:
    """The count a decision reads before it changes state refuses it, and so does decoding."""
    with pytest.raises(msgspec.ValidationError):
        len(Candidates.from_json(raw))
    with pytest.raises(msgspec.ValidationError):
        list(Candidates.from_json(raw))


_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_ELEMENT = _SCALAR | st.lists(_SCALAR, max_size=2) | st.dictionaries(st.text(), _SCALAR, max_size=2)


@given(st.lists(NAME | _ELEMENT, max_size=8), st.sampled_from(["", " ", "\n  "]))
def test_the_arrival_check_agrees_with_decoding(items: list[Any], space: str) -> None:
    """Checked by len() without decoding, a list passes exactly when every element is a string."""
    raw = json.dumps(items, separators=("," + space, ":")).encode()
    if all(isinstance(i, str) for i in items):
        lazy = Candidates.from_json(raw)
        assert len(lazy) == len(items) and list(lazy) == items
    else:
        with pytest.raises(msgspec.ValidationError):
            len(Candidates.from_json(raw))


# ---- PodsByGroup -------------------------------------------------------------------------


def test_group_index_follows_adds_moves_and_removals() -> None:
    index = PodsByGroup()
    a = make_pod("a", group="g")
    b = make_pod("b", group="g")
    other_ns = make_pod("c", group="g", ns="other")
    single = make_pod("s")
    for p in (a, b, other_ns, single):
        index.update(p)
    ref = identify(a)
    assert sorted(p.key for p in index.members(ref)) == ["default/a", "default/b"]
    assert [p.key for p in index.members(identify(other_ns))] == ["other/c"]
    assert index.members(identify(single)) == []
    index.update(make_pod("b", group="h"))  # relabelled into another group
    assert [p.key for p in index.members(ref)] == ["default/a"]
    index.remove(a)
    assert index.members(ref) == []


class IndexedCluster:
    """A cluster view that finds gangs through the index only (pods_in must not be used)."""

    def __init__(self) -> None:
        self.index = PodsByGroup()

    def add(self, pod: Pod) -> Pod:
        self.index.update(pod)
        return pod

    def pods_in(self, namespace: str) -> Sequence[Pod]:
        raise AssertionError("a gang lookup scanned the namespace instead of the index")

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
        return None

    def group_pods(self, ref: GroupRef) -> Sequence[Pod]:
        return self.index.members(ref)


def test_scheduler_finds_gang_members_through_the_index() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("n0", cpu="4"), make_node("n1", cpu="4")])
    view = IndexedCluster()
    assert isinstance(view, GroupIndexedView)
    scheduler = Scheduler(graph, Ledger(graph), view, NullBinder())
    size = {"fluence.flux-framework.org/group-size": "2"}
    lab = {"fluence.flux-framework.org/group": "pair"}
    first = view.add(make_pod("p0", cpu="3", labels=lab, annotations=size))
    out = scheduler.filter(first, ["n0", "n1"])
    assert out.failed and "waiting for 1 more" in next(iter(out.failed.values()))
    second = view.add(make_pod("p1", cpu="3", labels=lab, annotations=size))
    out = scheduler.filter(second, ["n0", "n1"])
    assert len(out.nodes) == 1
    assert scheduler.ledger.get(first.key) is not None


def gang_of_two(cpu: str) -> tuple[Scheduler, list[float], IndexedCluster, Pod, Pod]:
    graph = ClusterGraph(EXAMPLES, [make_node(f"n{i}", cpu="4") for i in range(3)])
    now = [100.0]
    view = IndexedCluster()
    scheduler = Scheduler(graph, Ledger(graph, clock=lambda: now[0]), view, NullBinder())
    size = {"fluence.flux-framework.org/group-size": "2"}
    lab = {"fluence.flux-framework.org/group": "pair"}
    first = view.add(make_pod("p0", cpu=cpu, labels=lab, annotations=size))
    second = view.add(make_pod("p1", cpu=cpu, labels=lab, annotations=size))
    return scheduler, now, view, first, second


def test_a_member_whose_node_is_not_offered_keeps_its_holding_for_a_grace() -> None:
    """Offered other nodes (another placement kube-scheduler tries, or a cache that lags
    fluence's watch), a gang member keeps its node; only one not offered for the whole
    grace since it was last handed out is placed again."""
    scheduler, now, _, first, second = gang_of_two("4")
    ledger = scheduler.ledger
    everywhere = ["n0", "n1", "n2"]
    assert len(scheduler.filter(first, everywhere).nodes) == 1
    held = ledger.get(second.key)
    assert held is not None
    others = [n for n in everywhere if n != held.node]
    now[0] += LAG_GRACE_SECONDS / 2
    out = scheduler.filter(second, others)
    assert not out.nodes and "placed elsewhere" in out.failed[others[0]]
    kept = ledger.get(second.key)
    assert kept is not None and kept.node == held.node and kept.jobid == held.jobid
    # Nothing else may take the held node meanwhile.
    out = scheduler.filter(make_pod("solo", cpu="4"), [held.node])
    assert not out.nodes
    # Offered again (the placement that holds it): handed out, and the grace starts over.
    assert scheduler.filter(second, everywhere).nodes == [held.node]
    now[0] += LAG_GRACE_SECONDS - 1
    assert not scheduler.filter(second, others).nodes
    now[0] += 2
    out = scheduler.filter(second, others)
    assert out.nodes and out.nodes[0] in others


def test_a_gang_placed_outside_the_offered_nodes_stays_whole() -> None:
    """kube-scheduler's topology-aware placements offer one rack at a time: the first
    member's filter in a rack fluence did not choose must not split the gang."""
    scheduler, _, _, first, second = gang_of_two("4")
    ledger = scheduler.ledger
    out = scheduler.filter(first, ["n2"])
    if out.nodes:  # fluence chose n2 for the first member: offer the other's node alone
        first, second = second, first
        held = ledger.get(first.key)
        assert held is not None
        out = scheduler.filter(first, [n for n in ["n0", "n1", "n2"] if n != held.node])
    assert not out.nodes and "placed elsewhere" in next(iter(out.failed.values()))
    placed = {k: h.node for k, h in ledger.holdings().items()}
    assert len(placed) == 2 and len(set(placed.values())) == 2
    for pod in (first, second):
        assert scheduler.filter(pod, ["n0", "n1", "n2"]).nodes == [placed[pod.key]]


def test_a_gang_composite_is_placed_all_or_nothing_across_its_podgroups() -> None:
    from tests.unit.fluence.test_groups import GANG_OF_TWO, Composites, _child

    graph = ClusterGraph(EXAMPLES, [make_node(f"n{i}", cpu="4") for i in range(2)])
    comps = Composites(
        {"team": {"schedulingPolicy": GANG_OF_TWO["schedulingPolicy"]}},
        [_child("leader", "team", 1), _child("workers", "team", 3)],
    )

    class View(IndexedCluster):
        def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
            return comps.lookup(api_group, namespace, name)

        def composite(self, namespace: str, name: str) -> Any:
            return comps.composite(namespace, name)

        def children(self, namespace: str, name: str) -> list[PodGroup]:
            return comps.children(namespace, name)

    view = View()
    scheduler = Scheduler(graph, Ledger(graph), view, NullBinder())
    leader = view.add(make_pod("l-0", cpu="2", group="leader"))
    out = scheduler.filter(leader, ["n0", "n1"])
    assert (
        not out.nodes
        and "waiting for 3 more pod(s) of group default/composite:team" in (out.failed["n0"])
    )
    assert scheduler.ledger.holdings() == {}
    workers = [view.add(make_pod(f"w-{i}", cpu="2", group="workers")) for i in range(3)]
    out = scheduler.filter(workers[0], ["n0", "n1"])
    assert len(out.nodes) == 1
    held = scheduler.ledger.holdings()
    assert sorted(held) == ["default/l-0", "default/w-0", "default/w-1", "default/w-2"]
    assert {h.group for h in held.values()} == {"default/composite:team"}
    # A fifth pod finds no room: the composite took both nodes whole, nothing partial.
    assert not scheduler.filter(make_pod("solo", cpu="1"), ["n0", "n1"]).nodes


# ---- kept match jobs -----------------------------------------------------------------------


def live_jobs(graph: ClusterGraph) -> list[int]:
    """Jobs the matcher holds now (it keeps cancelled ones as records)."""
    return sorted(j.jobid for j in graph._g.jobs() if j.state == "ALLOCATED")


def test_a_lone_pod_keeps_its_match_job_and_releasing_it_frees_the_node() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("n0", cpu="2", memory="4Gi")])
    ledger = Ledger(graph)
    pod = make_pod("solo", cpu="2", memory="1Gi")
    res = ledger.place("default/solo", [pod])
    held = res.holdings[pod.key]
    assert res.status == "allocated" and held.node == "n0" and graph.holds(held.jobid)
    assert live_jobs(graph) == [held.jobid], "one job: the match itself"
    assert graph.node_usage()["n0"]["core"]["allocated"] == 2000
    assert ledger.place("default/more", [make_pod("more", cpu="1")]).status == "busy"
    ledger.release(pod.key, "test")
    assert graph.node_usage()["n0"]["core"]["allocated"] == 0
    assert ledger.place("default/more", [make_pod("more", cpu="1")]).status == "allocated"


def test_a_kept_match_job_is_replayed_when_the_graph_rebuilds() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("n0", cpu="2"), make_node("n1", cpu="2")])
    ledger = Ledger(graph)
    pod = make_pod("solo", cpu="2")
    held = ledger.place("default/solo", [pod]).holdings[pod.key]
    lost = graph.upsert_node(make_node("n1", cpu="8"))  # capacity change: full rebuild
    assert lost == [] and graph.holds(held.jobid)
    assert graph.node_usage()[held.node]["core"]["allocated"] == 2000


def test_mixed_gang_keeps_the_lone_shape_and_splits_the_rest() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("n0", cpu="8", memory="16Gi")])
    ledger = Ledger(graph)
    pods = [make_pod(f"w{i}", cpu="1", group="g") for i in range(3)]
    pods.append(make_pod("leader", cpu="2", group="g"))
    res = ledger.place("default/g", pods)
    assert res.status == "allocated"
    assert len({h.jobid for h in res.holdings.values()}) == 4
    assert graph.node_usage()["n0"]["core"]["allocated"] == 5000
    assert live_jobs(graph) == sorted(h.jobid for h in res.holdings.values())
    for p in pods:
        ledger.release(p.key, "test")
    assert graph.node_usage()["n0"]["core"]["allocated"] == 0 and live_jobs(graph) == []


# ---- the verb ------------------------------------------------------------------------------


def test_filter_rejects_node_names_that_are_not_strings() -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("n0")])

    class Empty:
        def pods_in(self, namespace: str) -> Sequence[Pod]:
            return []

        def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
            return None

    client = TestClient(
        create_app(Scheduler(graph, Ledger(graph), Empty(), NullBinder()), metrics=False)
    )
    pod: Any = make_pod("p", cpu="100", raw=True)  # cannot fit: every candidate is listed
    r = client.post("/filter", json={"Pod": pod, "NodeNames": [1, 2]})
    assert r.status_code == 400 and "NodeNames" in r.json()["Error"]
    r = client.post("/filter", json={"Pod": pod, "NodeNames": ["n0"]})
    assert r.status_code == 200 and "n0" in r.json()["FailedAndUnresolvableNodes"]


def test_cluster_cache_indexes_pods_by_group_from_its_events() -> None:
    from fluence.reflectors import ADDED, DELETED, ClusterReflectors

    cache = ClusterReflectors(object())
    assert isinstance(cache, GroupIndexedView)
    pod = make_pod("a", group="g")
    cache.pods._emit(ADDED, pod)
    assert [p.key for p in cache.group_pods(identify(pod))] == ["default/a"]
    cache.pods._emit(DELETED, pod)
    assert cache.group_pods(identify(pod)) == []


def test_a_lone_pod_is_matched_once_within_the_offered_nodes() -> None:
    nodes = [make_node(f"n{i}", cpu="4") for i in range(4)]
    for offered in (["n0"], ["n3"], ["n1", "n2"]):
        graph = ClusterGraph(EXAMPLES, nodes)
        scheduler = Scheduler(graph, Ledger(graph), IndexedCluster(), NullBinder())
        raw = json.dumps(offered).encode()
        out = scheduler.filter(make_pod("solo", cpu="1"), Candidates.from_json(raw))
        assert len(out.nodes) == 1 and out.nodes[0] in offered
        assert len(graph._g.jobs()) == 1, "one match, no match-then-retry"


def test_candidate_count_needs_no_decoding() -> None:
    lazy = Candidates.from_json(b'["a", "b", "c"]')
    assert len(lazy) == 3 and lazy._list is None
    escaped = Candidates.from_json(json.dumps(['a"b', "c"]).encode())
    assert len(escaped) == 2
