"""Topology spread: the DoNotSchedule constraints, read as kube-scheduler's filter reads them."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from fluence.pods import Node, Pod, decode_node, decode_pod
from fluence.topology_spread import Spread, refusing, shares, unspread
from tests.unit.fluence.test_pods import make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def nodes(**zones: str) -> dict[str, Node]:
    """Nodes by name, each in the zone given ("" for none)."""
    out = {}
    for name, zone in zones.items():
        doc = make_node(name, raw=True)
        if zone:
            doc["metadata"]["labels"][ZONE] = zone
        out[name] = decode_node(json.dumps(doc))
    return out


def spread(key: str = ZONE, skew: int = 1, hard: bool = True, **more: Any) -> dict[str, Any]:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "web"}},
        **more,
    }


def pod(name: str, *constraints: dict[str, Any], ns: str = "default", **spec: Any) -> Pod:
    doc = make_pod(name, ns=ns, raw=True, labels={"app": "web"})
    doc["spec"]["topologySpreadConstraints"] = list(constraints)
    doc["spec"].update(spec)
    return decode_pod(json.dumps(doc))


def refused(p: Pod, on: list[tuple[str, Pod]]) -> set[str]:
    return refusing([p], CLUSTER, on).get(p.key, set())


CLUSTER = nodes(a1="a", a2="a", b1="b", c1="c", bare="")


def test_a_node_whose_domain_is_ahead_by_max_skew_is_refused() -> None:
    web = [("a1", pod("w0")), ("a2", pod("w1")), ("b1", pod("w2"))]
    # a: 2, b: 1, c: 0 -> a is 2 ahead of the least; b would be 2 with this pod, c 1.
    assert refused(pod("new", spread()), web) == {"a1", "a2", "b1", "bare"}
    assert refused(pod("new", spread(skew=2)), web) == {"a1", "a2", "bare"}
    # Soft constraints are kube-scheduler's scores, not a filter.
    assert refused(pod("new", spread(hard=False)), web) == set()


def test_pods_of_other_namespaces_or_labels_or_being_deleted_are_not_counted() -> None:
    other = pod("x", ns="team")
    unlabelled = decode_pod(json.dumps(make_pod("y", raw=True, labels={"app": "db"})))
    doc = make_pod("z", raw=True, labels={"app": "web"})
    doc["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    going = decode_pod(json.dumps(doc))
    on = [("a1", other), ("a1", unlabelled), ("a1", going)]
    assert refused(pod("new", spread()), on) == {"bare"}


def test_only_nodes_the_pods_node_selector_admits_count_unless_told_otherwise() -> None:
    # Only zone a is admitted: b and c hold no domain, so a is the least and takes more.
    web = [("a1", pod("w0")), ("b1", pod("w1"))]
    picky = pod("new", spread(), nodeSelector={ZONE: "a"})
    assert Spread(picky, CLUSTER, web).refusing(["a1"]) == set()
    every = pod("new", spread(nodeAffinityPolicy="Ignore"), nodeSelector={ZONE: "a"})
    assert Spread(every, CLUSTER, web).refusing(["a1"]) == {"a1"}  # c is still at 0


def test_min_domains_counts_missing_domains_as_empty() -> None:
    web = [("a1", pod("w0")), ("b1", pod("w1")), ("c1", pod("w2"))]
    assert refused(pod("new", spread()), web) == {"bare"}
    assert refused(pod("new", spread(minDomains=4)), web) == set(CLUSTER)


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values() -> None:
    doc = make_pod("v2", raw=True, labels={"app": "web", "rev": "2"})
    doc["spec"]["topologySpreadConstraints"] = [spread(matchLabelKeys=["rev"])]
    new = decode_pod(json.dumps(doc))
    old_rev = decode_pod(json.dumps(make_pod("v1", raw=True, labels={"app": "web", "rev": "1"})))
    on = [("a1", old_rev), ("a2", old_rev)]
    assert refused(new, on) == {"bare"}


def test_a_gang_spread_over_zones_passes_in_some_bind_order() -> None:
    members = [pod(f"m{i}", spread()) for i in range(4)]
    # Two in a and two in b: kube-scheduler refuses the second a until a b is bound.
    even = list(zip(members, ["a1", "a2", "b1", "c1"], strict=True))
    assert unspread(even, CLUSTER, []) == set()
    lopsided = list(zip(members, ["a1", "a2", "a1", "b1"], strict=True))
    assert unspread(lopsided, CLUSTER, []) == {"a1", "a2"}
    # Members without constraints are bound first: they count for the others.
    free = [(decode_pod(json.dumps(make_pod("f", raw=True, labels={"app": "web"}))), "a1")]
    assert unspread(free + [(members[0], "a2")], CLUSTER, []) == {"a2"}


def test_members_spread_over_zones_are_dealt_to_the_fewest_first() -> None:
    running = pod("r", spread())
    members = [pod(f"m{i}", spread()) for i in range(4)]
    dealt = shares(members, CLUSTER, [("a1", running)])
    # a has one already: b and c are dealt first, then c, a, b... in name order of ties.
    allowed = {k: sorted(set(CLUSTER) - off) for k, off in dealt.items()}
    assert allowed == {
        "default/m0": ["b1"],
        "default/m1": ["c1"],
        "default/m2": ["a1", "a2"],
        "default/m3": ["b1"],
    }
    placed = [(members[i], allowed[members[i].key][0]) for i in range(4)]
    assert unspread(placed, CLUSTER, [("a1", running)]) == set()
    # A lone pod or a per-node spread is not dealt out; a wider skew is dealt as evenly.
    assert shares(members[:1], CLUSTER, []) == {}
    assert shares([pod(f"h{i}", spread(HOST)) for i in range(3)], CLUSTER, []) == {}
    wide = shares([pod(f"w{i}", spread(skew=2)) for i in range(3)], CLUSTER, [])
    assert sorted(sorted(set(CLUSTER) - off) for off in wide.values()) == [
        ["a1", "a2"],
        ["b1"],
        ["c1"],
    ]


def test_members_are_dealt_round_a_zone_without_room_and_to_the_roomiest_first() -> None:
    """One-cpu members (graph units: 1000 milli-cores); a has room for one, b for two, c
    for four. By count and name four members would go a, b, c, a, and the second for a
    would not fit; with the room known they go c, b, a (fewest, then roomiest) and the
    fourth to c, not to a, which is full by then."""
    members = [pod(f"m{i}", spread()) for i in range(4)]
    free = {
        "a1": {"core": 1000, "memory": 8192},
        "a2": {"core": 500, "memory": 8192},
        "b1": {"core": 2000, "memory": 8192},
        "c1": {"core": 4000, "memory": 8192},
    }
    dealt = shares(members, CLUSTER, [], lambda: free)
    on = Counter(
        next(iter({"a1": "a", "a2": "a", "b1": "b", "c1": "c"}[n] for n in set(CLUSTER) - off))
        for off in dealt.values()
    )
    assert on == {"c": 2, "b": 1, "a": 1}, on
    placed = [(m, sorted(set(CLUSTER) - dealt[m.key])[0]) for m in members]
    assert unspread(placed, CLUSTER, []) == set()
    # A zone with no room at all is dealt none while others have room; with a wider skew
    # the others then take what an even deal would have given it.
    free["a1"]["core"] = free["a2"]["core"] = 0
    wide = [pod(f"w{i}", spread(skew=2)) for i in range(4)]
    dealt = shares(wide, CLUSTER, [], lambda: free)
    assert all({"a1", "a2"} <= off for off in dealt.values()), dealt
    placed = [(m, sorted(set(CLUSTER) - dealt[m.key])[0]) for m in wide]
    assert unspread(placed, CLUSTER, []) == set()


def test_members_of_an_indexed_job_are_dealt_out_though_their_labels_differ() -> None:
    """An indexed Job's pods differ in their completion-index label, not in their spread."""
    members = []
    for i in range(3):
        doc = make_pod(f"j{i}", raw=True, labels={"app": "web", "index": str(i)})
        doc["spec"]["topologySpreadConstraints"] = [spread()]
        members.append(decode_pod(json.dumps(doc)))
    dealt = shares(members, CLUSTER, [])
    assert {k: sorted(set(CLUSTER) - off) for k, off in dealt.items()} == {
        "default/j0": ["a1", "a2"],
        "default/j1": ["b1"],
        "default/j2": ["c1"],
    }
    # matchLabelKeys on the index makes each member its own kind: nothing to deal.
    keyed = []
    for i in range(3):
        doc = make_pod(f"k{i}", raw=True, labels={"app": "web", "index": str(i)})
        doc["spec"]["topologySpreadConstraints"] = [spread(matchLabelKeys=["index"])]
        keyed.append(decode_pod(json.dumps(doc)))
    assert shares(keyed, CLUSTER, []) == {}
