"""Inter-pod affinity as kube-scheduler's InterPodAffinity filter reads the required terms."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluence.pod_affinity import PlacedPods, apart, crowded, repelling, selects, term_selects
from fluence.pods import LabelSelector, LabelSelectorRequirement, Pod, PodAffinityTerm, decode_pod
from tests.unit.fluence.test_pods import make_pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
# n1, n2 in zone a; n3 in zone b; n4 has no zone label.
LABELS = {
    "n1": {HOST: "n1", ZONE: "a"},
    "n2": {HOST: "n2", ZONE: "a"},
    "n3": {HOST: "n3", ZONE: "b"},
    "n4": {HOST: "n4"},
}


def term(key: str, ns: list[str] | None = None, all_ns: bool = False, **match: str) -> Any:
    t: dict[str, Any] = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    if ns is not None:
        t["namespaces"] = ns
    if all_ns:
        t["namespaceSelector"] = {}
    return t


def pod(
    name: str,
    ns: str = "default",
    *,
    anti: list[Any] | None = None,
    near: list[Any] | None = None,
    **labels: str,
) -> Pod:
    doc = make_pod(name, ns=ns, raw=True, labels=labels)
    affinity: dict[str, Any] = {}
    if anti:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    if near:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": near}
    if affinity:
        doc["spec"]["affinity"] = affinity
    return decode_pod(json.dumps(doc))


def refused(there: PlacedPods, p: Pod) -> set[str]:
    return there.refusing([p], LABELS)[p.key]


def placed(*on: tuple[str, Pod]) -> PlacedPods:
    out = PlacedPods()
    for node, p in on:
        out.put(p.key, node, p)
    return out


@pytest.mark.parametrize(
    ("op", "values", "labels", "picked"),
    [
        ("In", ["x", "y"], {"k": "y"}, True),
        ("In", ["x"], {"k": "y"}, False),
        ("In", ["x"], {}, False),
        ("NotIn", ["x"], {"k": "y"}, True),
        ("NotIn", ["x"], {}, True),
        ("NotIn", ["x"], {"k": "x"}, False),
        ("Exists", [], {"k": ""}, True),
        ("Exists", [], {}, False),
        ("DoesNotExist", [], {}, True),
        ("DoesNotExist", [], {"k": "1"}, False),
        ("Gt", ["1"], {"k": "2"}, False),
    ],
)
def test_label_selector_operators(
    op: str, values: list[str], labels: dict[str, str], picked: bool
) -> None:
    sel = LabelSelector(match_expressions=[LabelSelectorRequirement("k", op, values)])
    assert selects(sel, labels) is picked


def test_no_selector_picks_nothing_and_an_empty_one_everything() -> None:
    assert not selects(None, {"a": "b"})
    assert selects(LabelSelector(), {"a": "b"})
    assert not selects(LabelSelector(match_labels={"a": "c"}), {"a": "b"})


def test_a_term_looks_in_its_pods_namespace_unless_it_names_others() -> None:
    owner, same, other = pod("o", app="x"), pod("s", app="x"), pod("t", "team", app="x")
    t = PodAffinityTerm(LabelSelector(match_labels={"app": "x"}), topology_key=HOST)
    assert term_selects(owner, t, same) and not term_selects(owner, t, other)
    named = PodAffinityTerm(t.label_selector, namespaces=["team"], topology_key=HOST)
    assert term_selects(owner, named, other) and not term_selects(owner, named, same)
    everywhere = PodAffinityTerm(t.label_selector, namespace_selector=LabelSelector())
    assert term_selects(owner, everywhere, other) and term_selects(owner, everywhere, same)


def test_anti_affinity_shuts_out_the_domain_of_the_pods_it_picks() -> None:
    db = pod("db", app="db")
    on_host = pod("w", anti=[term(HOST, app="db")])
    in_zone = pod("z", anti=[term(ZONE, app="db")])
    there = placed(("n1", db), ("n3", pod("web", app="web")))
    assert refused(there, on_host) == {"n1"}
    # A node without the zone label is in no zone: nothing there to keep off.
    assert refused(there, in_zone) == {"n1", "n2"}
    # Pods of another namespace are not picked unless the term names it.
    elsewhere = placed(("n1", pod("db", "team", app="db")))
    assert refused(elsewhere, on_host) == set()
    assert refused(elsewhere, pod("w", anti=[term(HOST, ["team"], app="db")])) == {"n1"}


def test_a_placed_pods_anti_affinity_keeps_the_pods_it_picks_away() -> None:
    loner = pod("loner", anti=[term(ZONE, app="web")])
    there = placed(("n3", loner))
    assert refused(there, pod("w", app="web")) == {"n3"}
    assert refused(there, pod("d", app="db")) == set()
    there.put(loner.key, "", None)  # it ended
    assert refused(there, pod("w", app="web")) == set()


def test_affinity_takes_only_the_domains_where_the_pods_it_picks_run() -> None:
    near_db = pod("w", near=[term(ZONE, app="db")])
    there = placed(("n2", pod("db", app="db")))
    assert refused(there, near_db) == {"n3", "n4"}
    # No such pod anywhere: nowhere, unless the pod is the first of its own kind.
    assert refused(placed(), near_db) == set(LABELS)
    first = pod("db0", app="db", near=[term(ZONE, app="db")])
    assert refused(placed(), first) == {"n4"}  # the zone label is still needed


def test_affinity_counts_the_pods_every_term_picks() -> None:
    both = pod("w", near=[term(ZONE, app="db"), term(HOST, tier="cache")])
    there = placed(("n1", pod("db", app="db")), ("n2", pod("c", tier="cache")))
    assert refused(there, both) == set(LABELS)
    there.put("default/dbc", "n2", pod("dbc", app="db", tier="cache"))
    assert refused(there, both) == {"n1", "n3", "n4"}


def test_members_per_node_apart_are_paired() -> None:
    a = pod("a", app="mpi", anti=[term(HOST, app="mpi")])
    b = pod("b", app="mpi")
    c = pod("c", app="other")
    z = pod("z", app="mpi", anti=[term(ZONE, app="mpi")])
    assert repelling([a, b, c, z]) == [("default/a", "default/b"), ("default/a", "default/z")]


def test_a_match_that_puts_members_together_that_may_not_meet_is_crowded() -> None:
    a = pod("a", app="mpi", anti=[term(ZONE, app="mpi")])
    b = pod("b", app="mpi")
    assert crowded([(a, "n1"), (b, "n2")], LABELS) == {"n2"}
    assert crowded([(a, "n1"), (b, "n3")], LABELS) == set()
    assert crowded([(b, "n1"), (a, "n2")], LABELS) == {"n2"}  # either way round


def test_members_that_keep_together_are_crowded_out_of_all_but_one_domain() -> None:
    kin = [pod(f"k{i}", app="kin", near=[term(ZONE, app="kin")]) for i in range(3)]
    assert crowded(list(zip(kin, ["n1", "n3", "n2"], strict=True)), LABELS) == {"n3"}
    assert crowded(list(zip(kin, ["n1", "n2", "n1"], strict=True)), LABELS) == set()


NAMESPACE_LABELS = {"prod": {"tier": "prod"}, "team": {"tier": "dev"}}


def by_tier(key: str, tier: str, ns: list[str] | None = None, **match: str) -> Any:
    """A term that picks the namespaces of one tier (by their labels) and those it lists."""
    t = term(key, ns, **match)
    t["namespaceSelector"] = {"matchLabels": {"tier": tier}}
    return t


def test_a_namespace_selector_picks_namespaces_by_their_labels() -> None:
    owner = pod("o", "team")
    t = PodAffinityTerm(
        LabelSelector(match_labels={"app": "db"}),
        namespaces=["default"],
        namespace_selector=LabelSelector(match_labels={"tier": "prod"}),
        topology_key=HOST,
    )
    labels = lambda ns: NAMESPACE_LABELS.get(ns, {})  # noqa: E731
    in_prod, in_team = pod("a", "prod", app="db"), pod("b", "team", app="db")
    listed, unknown = pod("c", "default", app="db"), pod("d", "nowhere", app="db")
    assert term_selects(owner, t, in_prod, labels)
    assert term_selects(owner, t, listed, labels)  # the list and the selector add up
    assert not term_selects(owner, t, in_team, labels)
    assert not term_selects(owner, t, unknown, labels)
    # Without namespace labels a selector with requirements picks every namespace.
    assert term_selects(owner, t, in_team)


def test_affinity_and_anti_affinity_by_namespace_labels_keep_to_the_placed_pods() -> None:
    there = PlacedPods(lambda ns: NAMESPACE_LABELS.get(ns, {}))
    for node, p in (("n1", pod("db", "prod", app="db")), ("n3", pod("db", "team", app="db"))):
        there.put(p.key, node, p)
    # Away from prod's db only: the team's db on n3 is not picked.
    assert refused(there, pod("w", anti=[by_tier(HOST, "prod", app="db")])) == {"n1"}
    # Near prod's db only: every node but n1 refuses.
    assert refused(there, pod("w", near=[by_tier(HOST, "prod", app="db")])) == {"n2", "n3", "n4"}
    # Near the dev tier's db (n3's), in its zone.
    assert refused(there, pod("w", near=[by_tier(ZONE, "dev", app="db")])) == {"n1", "n2", "n4"}
    # Members placed together by a match: anti-affinity by tier picks only prod's pods.
    apart = pod("x", "prod", anti=[by_tier(HOST, "prod", app="x")], app="x")
    other = pod("y", "team", app="x")
    mine = pod("z", "prod", app="x")
    labels = there.namespaces
    assert crowded([(apart, "n2"), (other, "n2")], LABELS, labels) == set()
    assert crowded([(apart, "n2"), (mine, "n2")], LABELS, labels) == {"n2"}


def test_members_kept_apart_per_zone_are_each_dealt_a_zone() -> None:
    ranks = [pod(f"r{i}", anti=[term(ZONE, app="mpi")], app="mpi") for i in range(2)]
    other = pod("x", app="other")
    dealt = apart([*ranks, other], LABELS, {})
    allowed = {k: sorted(set(LABELS) - off) for k, off in dealt.items()}
    # n4 has no zone: in no domain. Zone a (n1, n2) to r0, zone b (n3) to r1.
    assert allowed == {"default/r0": ["n1", "n2"], "default/r1": ["n3"]}
    # A zone a member may not use is passed over for it.
    dealt = apart(ranks, LABELS, {"default/r0": {"n1", "n2"}})
    assert {k: sorted(set(LABELS) - off) for k, off in dealt.items()} == {
        "default/r0": ["n3"],
        "default/r1": ["n1", "n2"],
    }
    # More members than zones: nothing is dealt (the match and its checks decide).
    three = [pod(f"t{i}", anti=[term(ZONE, app="mpi")], app="mpi") for i in range(3)]
    assert apart(three, LABELS, {}) == {}
    # Per node it is repelling's job, not this one's.
    assert (
        apart([pod(f"h{i}", anti=[term(HOST, app="mpi")], app="mpi") for i in range(2)], LABELS, {})
        == {}
    )
