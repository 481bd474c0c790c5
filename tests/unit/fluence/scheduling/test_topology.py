"""Topology levels from node labels, and gangs that must fit in one rack."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.graph_layout import level_type
from fluence.group_jobspec import JobspecError
from fluence.groups import identify
from fluence.ledger import Ledger
from fluence.pods import Node, Pod, PodGroup, decode_node, decode_pod, decode_podgroup
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")
ZONE, RACK = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"


def node(name: str, zone: str | None, rack: str | None, cpu: str = "4") -> Node:
    doc: dict[str, Any] = make_node(name, cpu=cpu, raw=True)
    if zone:
        doc["metadata"]["labels"][ZONE] = zone
    if rack:
        doc["metadata"]["labels"][RACK] = rack
    return decode_node(json.dumps(doc))


def racks(n_racks: int, per_rack: int, cpu: str = "4") -> list[Node]:
    return [
        node(f"r{r}n{i}", "z0" if r < n_racks // 2 or n_racks == 1 else "z1", f"rack{r}", cpu)
        for r in range(n_racks)
        for i in range(per_rack)
    ]


def paths(graph: ClusterGraph) -> dict[str, str]:
    return {
        v["metadata"]["name"]: v["metadata"]["paths"]["containment"]
        for v in graph.jgf["graph"]["nodes"]
        if v["metadata"]["type"] in ("zone", "rack", "node")
    }


def test_nodes_hang_under_their_zone_and_rack() -> None:
    g = ClusterGraph(
        EXAMPLES, [node("a", "z1", "r1"), node("b", "z1", None), node("c", None, None)]
    )
    p = paths(g)
    assert p["a"] == "/cluster/z1/r1/a"
    assert p["b"] == "/cluster/z1/b"  # no rack label: under its zone
    assert p["c"] == "/cluster/c"
    assert p["r1"] == "/cluster/z1/r1"
    assert level_type(RACK) == "rack"


def test_a_new_node_joins_an_existing_rack_and_a_relabelled_node_moves() -> None:
    g = ClusterGraph(EXAMPLES, [node("a", "z1", "r1")])
    g.upsert_node(node("b", "z1", "r1"))  # attached under the existing rack
    g.upsert_node(node("c", "z2", "r9"))  # new zone and rack on the way
    p = paths(g)
    assert (p["b"], p["c"]) == ("/cluster/z1/r1/b", "/cluster/z2/r9/c")
    g.upsert_node(node("b", "z2", "r9"))
    assert paths(g)["b"] == "/cluster/z2/r9/b"
    assert g.node_usage()["b"]["core"]["capacity"] == 4000


def with_deadline(pod: Pod, seconds: int) -> Pod:
    """``pod`` with an ``activeDeadlineSeconds``: a runtime the kubelet enforces."""
    doc = json.loads(msgspec.json.encode(pod))
    doc["spec"]["activeDeadlineSeconds"] = seconds
    return decode_pod(json.dumps(doc))


def test_a_rack_constrained_gang_lands_in_one_rack() -> None:
    # Two racks of 2 nodes x 4 cpu; 3 of r0n0's cpus are taken, so rack0 holds only two
    # more pods of 2 cpu: three would fit across racks, but one rack must hold them all.
    g = ClusterGraph(EXAMPLES, racks(2, 2))
    ledger = Ledger(g)
    blocker = make_pod("blocker", cpu="3")
    ledger.place("default/blocker", [blocker], [n for n in g.node_names() if n != "r0n0"])
    gang = [make_pod(f"w{i}", cpu="2", group="g") for i in range(3)]
    res = ledger.place("default/g", gang, topology=RACK)
    assert res.status == "allocated", res.message
    placed = {h.node for h in res.holdings.values()}
    assert placed <= {"r1n0", "r1n1"}, placed
    # Three more pods of 2 cpu fit the cluster (room for 3) but no single rack (2 + 1).
    more = [make_pod(f"m{i}", cpu="2", group="m") for i in range(3)]
    busy = ledger.place("default/m", more, topology=RACK)
    assert busy.status == "busy" and "no single rack has room" in busy.message
    # Without the constraint they fit now, in front of the waiting rack gang's reservation
    # (from the blocker's planned end): their runtime is enforced and ends before it.
    bounded = [with_deadline(p, 1800) for p in more]
    assert ledger.place("default/m2", bounded, topology="").status == "allocated"
    for key in [h for h in ledger.holdings() if h.startswith("default/m")]:
        ledger.release(key, "test")
    assert ledger.place("default/m", more[:1], topology=RACK).status == "allocated"


def test_the_constraint_comes_from_the_podgroup_or_our_annotation() -> None:
    pg = decode_podgroup(
        json.dumps(
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": 2}},
                    "schedulingConstraints": {"topology": [{"key": RACK}]},
                },
            }
        )
    )
    assert isinstance(pg, PodGroup) and pg.topology_key == RACK
    ref = identify(
        make_pod("w0", cpu="1", group="g"), lambda api, ns, name: pg if name == "g" else None
    )
    assert (ref.min_count, ref.topology) == (2, RACK)
    labelled = make_pod(
        "x",
        cpu="1",
        labels={names.LABEL_GROUP: "x"},
        annotations={names.ANNOTATION_TOPOLOGY: ZONE},
    )
    assert identify(labelled).topology == ZONE


def test_a_mixed_gang_shares_one_rack_and_unknown_keys_are_clear_errors() -> None:
    g = ClusterGraph(EXAMPLES, racks(2, 2))
    ledger = Ledger(g)
    pods = [make_pod("a", cpu="3", group="g"), make_pod("b", cpu="1", group="g")]
    pods += [make_pod(f"c{i}", cpu="2", group="g") for i in range(2)]
    res = ledger.place("default/g", pods, topology=RACK)
    assert res.status == "allocated", res.message
    assert {h.node[:2] for h in res.holdings.values()} == {"r0"}
    huge = [make_pod(f"h{i}", cpu="4", group="h") for i in range(3)]
    res = ledger.place("default/h", huge, topology=RACK)
    assert res.status == "unsatisfiable" and "no rack (2 in the graph)" in res.message
    with pytest.raises(JobspecError, match="not a level of the cluster graph"):
        ledger.place("default/x", [make_pod("x", cpu="1")], topology="example.com/pod")
    with pytest.raises(ValueError, match="each must end in its own name"):
        ClusterGraph(EXAMPLES, [], topology=["a/rack", "b/rack"])


def test_an_unconstrained_gang_prefers_one_rack_but_never_waits_for_one() -> None:
    # rack0's first node is nearly full: the first nodes in path order would split the
    # gang across racks; one rack (rack1) can hold it whole, so that is where it goes.
    g = ClusterGraph(EXAMPLES, racks(2, 2))
    ledger = Ledger(g)
    blocker = make_pod("blocker", cpu="3")
    ledger.place("default/blocker", [blocker], [n for n in g.node_names() if n != "r0n0"])
    gang = [make_pod(f"w{i}", cpu="2", group="g") for i in range(4)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated"
    assert {h.node for h in res.holdings.values()} == {"r1n0", "r1n1"}
    # Too big for any rack (or zone): placed across them rather than left waiting.
    fresh = Ledger(ClusterGraph(EXAMPLES, racks(2, 2)))
    wide = [make_pod(f"x{i}", cpu="2", group="x") for i in range(5)]
    res = fresh.place("default/x", wide)
    assert res.status == "allocated", res.message
    assert {h.node[:2] for h in res.holdings.values()} == {"r0", "r1"}


def test_a_domain_is_a_hostlist_constraint_and_gangs_go_next_fit() -> None:
    from fluence.group_jobspec import compute_jobspec

    spec = compute_jobspec((("core", 1000),), 2, "g", exclude=["x"], within=["b", "a"])
    constraints = spec["attributes"]["system"]["constraints"]
    assert constraints["and"][1:] == [{"hostlist": ["a", "b"]}, {"not": [{"hostlist": ["x"]}]}]
    # Three racks of one 4-cpu node: gangs of 3 cpu fill rack0, rack1, rack2 in turn.
    ledger = Ledger(ClusterGraph(EXAMPLES, racks(3, 1)))
    where = []
    for g in range(3):
        pods = [make_pod(f"g{g}p{i}", cpu="1", group=f"g{g}") for i in range(3)]
        res = ledger.place(f"default/g{g}", pods, topology=RACK)
        assert res.status == "allocated", res.message
        where.append({h.node for h in res.holdings.values()})
    assert where == [{"r0n0"}, {"r1n0"}, {"r2n0"}]


def test_a_gang_too_big_for_one_rack_spans_the_fewest_racks() -> None:
    # One zone of three racks, 4 nodes x 4 cpu each (16 a rack). rack0 keeps all 16 cpu
    # free, rack1 8, rack2 4. An 18-pod gang fits no rack; matched anywhere, it took the
    # room of all three racks; rack0 and rack1 hold it in two.
    g = ClusterGraph(
        EXAMPLES, [node(f"r{r}n{i}", "z0", f"rack{r}") for r in range(3) for i in range(4)]
    )
    ledger = Ledger(g)
    for name in ("r2n0", "r2n1", "r2n2", "r1n0", "r1n1"):
        filler = make_pod(f"fill-{name}", cpu="4")
        others = [n for n in g.node_names() if n != name]
        assert ledger.place(f"default/fill-{name}", [filler], others).status == "allocated"
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(18)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated", res.message
    assert {h.node[:2] for h in res.holdings.values()} == {"r0", "r1"}
    # Its pods pack the nodes they use: the fewest nodes too (18 cpu on 5 nodes).
    assert len({h.node for h in res.holdings.values()}) == 5


def test_spanning_racks_stays_in_one_zone_when_that_takes_no_more_racks() -> None:
    # z0: rackA and rackB with 8 cpu free each; z1: rackC with 12, rackD with 4. The two
    # freest racks (C and A) would hold a 16-pod gang across zones; A and B, or C and D,
    # hold it in two racks of one zone.
    layout = {"rackA": ("z0", 2), "rackB": ("z0", 2), "rackC": ("z1", 1), "rackD": ("z1", 3)}
    g = ClusterGraph(
        EXAMPLES,
        [node(f"{rack}n{i}", zone, rack) for rack, (zone, _) in layout.items() for i in range(4)],
    )
    ledger = Ledger(g)
    for rack, (_, full) in layout.items():
        for i in range(full):
            name = f"{rack}n{i}"
            others = [n for n in g.node_names() if n != name]
            assert ledger.place(f"default/f-{name}", [make_pod(f"f-{name}", cpu="4")], others)
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(16)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated", res.message
    used = {h.node[:5] for h in res.holdings.values()}
    assert used in ({"rackA", "rackB"}, {"rackC", "rackD"})


def test_each_levels_domains_are_kept_until_a_node_moves() -> None:
    """Asking for racks and zones in turn (as every gang's placement does) reuses both."""
    g = ClusterGraph(EXAMPLES, racks(4, 2))
    rack, zone = g.domains("rack"), g.domains("zone")
    assert g.domains("rack") is rack and g.domains("zone") is zone
    g.upsert_node(node("extra", "z1", "rack9"))
    assert "/cluster/z1/rack9" in g.domains("rack") and g.domains("zone") is not zone


@pytest.mark.parametrize(
    ("count", "room", "shares"),
    [
        (12, [10, 10], [6, 6]),
        (13, [10, 10], [7, 6]),
        (12, [10, 4], [8, 4]),
        (7, [3, 3, 3], [3, 2, 2]),
        (5, [0, 5], [0, 5]),
        (11, [5, 5], None),
    ],
)
def test_balanced_shares_fill_domains_evenly_within_their_room(
    count: int, room: list[int], shares: list[int] | None
) -> None:
    from fluence.scheduling.topology import balanced_shares

    got = balanced_shares(count, room)
    assert got == shares
    if got is not None:
        assert sum(got) == count and all(s <= r for s, r in zip(got, room, strict=True))


@pytest.mark.parametrize(("spread", "per_rack"), [("pack", [10, 2]), ("balanced", [6, 6])])
def test_a_gang_over_two_racks_is_packed_or_balanced_as_configured(
    spread: str, per_rack: list[int]
) -> None:
    # Kueue's example: 12 pods on two racks with room for 10 each (10 nodes of 1 cpu).
    g = ClusterGraph(EXAMPLES, racks(2, 10, cpu="1"))
    ledger = Ledger(g, spread=spread)
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(12)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated", res.message
    counts: dict[str, int] = {}
    for h in res.holdings.values():
        counts[h.node[:2]] = counts.get(h.node[:2], 0) + 1
    assert sorted(counts.values(), reverse=True) == per_rack
    assert len({h.node for h in res.holdings.values()}) == 12, "one pod per 1-cpu node"
    # Releasing the gang frees every core it held, whichever way it was shared.
    for p in gang:
        ledger.release(p.key, "test")
    assert all(u["core"]["allocated"] == 0 for u in g.node_usage().values())


def rack_counts(res: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for h in res.holdings.values():
        counts[h.node[:2]] = counts.get(h.node[:2], 0) + 1
    return counts


@pytest.mark.parametrize(("spread", "per_rack"), [("pack", [9, 3]), ("balanced", [6, 6])])
def test_a_gang_of_two_shapes_is_balanced_over_its_racks(spread: str, per_rack: list[int]) -> None:
    g = ClusterGraph(EXAMPLES, racks(2, 10, cpu="1"))
    ledger = Ledger(g, spread=spread)
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(9)]
    gang += [make_pod(f"m{i}", cpu="1", memory="64Mi", group="g") for i in range(3)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated", res.message
    assert sorted(rack_counts(res).values(), reverse=True) == per_rack


def test_a_balanced_share_is_capped_by_the_room_a_rack_has() -> None:
    # rack1 has room for 5 (five of its ten 1-cpu nodes taken): 13 pods go 8 + 5.
    g = ClusterGraph(EXAMPLES, racks(2, 10, cpu="1"))
    ledger = Ledger(g, spread="balanced")
    for name in [f"r1n{i}" for i in range(5)]:
        others = [n for n in g.node_names() if n != name]
        filler = make_pod(f"f-{name}", cpu="1")
        assert ledger.place(f"default/f-{name}", [filler], others).status == "allocated"
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(13)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated", res.message
    assert rack_counts(res) == {"r0": 8, "r1": 5}


def test_an_unknown_spread_is_refused() -> None:
    with pytest.raises(ValueError, match="spread must be one of"):
        Ledger(ClusterGraph(EXAMPLES, racks(2, 1)), spread="scatter")


def composite_cluster() -> tuple[ClusterGraph, Ledger]:
    """Two zones of two racks, each rack two nodes of 4 cpu (8 cpu a rack)."""
    layout = {"rack0": "z0", "rack1": "z0", "rack2": "z1", "rack3": "z1"}
    g = ClusterGraph(
        EXAMPLES, [node(f"{r}n{i}", z, r) for r, z in layout.items() for i in range(2)]
    )
    return g, Ledger(g)


def test_each_part_of_a_composite_lands_in_one_rack_of_one_zone() -> None:
    g, ledger = composite_cluster()
    # Three pods of 2 cpu each: two parts cannot share a rack (12 > 8 cpu).
    a = [make_pod(f"a{i}", cpu="2", group="a") for i in range(3)]
    b = [make_pod(f"b{i}", cpu="2", group="b") for i in range(3)]
    free = [make_pod(f"c{i}", cpu="1", group="c") for i in range(2)]
    res = ledger.place(
        "default/composite:team",
        a + b + free,
        topology=ZONE,
        parts=[(RACK, [p.key for p in a]), (RACK, [p.key for p in b])],
    )
    assert res.status == "allocated", res.message
    rack_of = {k: h.node[:5] for k, h in res.holdings.items()}
    assert len({rack_of[p.key] for p in a}) == 1 and len({rack_of[p.key] for p in b}) == 1
    assert rack_of[a[0].key] != rack_of[b[0].key]
    zone = {"rack0": "z0", "rack1": "z0", "rack2": "z1", "rack3": "z1"}
    assert len({zone[r] for r in rack_of.values()}) == 1, rack_of


def test_a_composite_whose_parts_do_not_fit_now_waits_and_one_that_never_can_says_so() -> None:
    g, ledger = composite_cluster()
    # One rack in each zone is full: no zone has two racks with room for 6 cpu each.
    for name in ("rack0n0", "rack0n1", "rack2n0", "rack2n1"):
        others = [n for n in g.node_names() if n != name]
        assert ledger.place(f"default/f-{name}", [make_pod(f"f-{name}", cpu="4")], others)
    a = [make_pod(f"a{i}", cpu="2", group="a") for i in range(3)]
    b = [make_pod(f"b{i}", cpu="2", group="b") for i in range(3)]
    parts = [(RACK, [p.key for p in a]), (RACK, [p.key for p in b])]
    res = ledger.place("default/composite:team", a + b, topology=ZONE, parts=parts)
    assert res.status == "busy" and "each of its parts" in res.message
    assert not any(k.startswith("default/a") for k in ledger.holdings()), "nothing partial"
    huge = [make_pod(f"h{i}", cpu="2", group="h") for i in range(5)]  # 10 cpu > any rack
    res = ledger.place(
        "default/composite:big", huge, topology=ZONE, parts=[(RACK, [p.key for p in huge])]
    )
    assert res.status == "unsatisfiable" and "can never fit" in res.message
