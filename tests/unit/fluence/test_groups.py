"""Which gang a pod belongs to, and its quorum, from every supported source."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluence import groups, names
from fluence.pods import CompositePodGroup, PodGroup, decode_compositepodgroup, decode_podgroup
from tests.unit.fluence.test_pods import make_pod


def _pg(api: str, name: str, spec: dict[str, object]) -> PodGroup:
    return decode_podgroup(
        json.dumps(
            {
                "apiVersion": api,
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "default"},
                "spec": spec,
            }
        )
    )


def _lookup(table: dict[tuple[str, str, str], PodGroup]) -> groups.PodGroupLookup:
    return lambda api, ns, name: table.get((api, ns, name))


def test_native_scheduling_group_reads_min_count_from_the_podgroup() -> None:
    pg = _pg(
        "scheduling.k8s.io/v1alpha2", "training", {"schedulingPolicy": {"gang": {"minCount": 2}}}
    )
    ref = groups.identify(
        make_pod("a", group="training"), _lookup({("scheduling.k8s.io", "default", "training"): pg})
    )
    assert (ref.key, ref.source, ref.min_count) == ("default/training", groups.NATIVE, 2)


def test_k8s_label_names_a_native_podgroup() -> None:
    pg = _pg("scheduling.k8s.io/v1alpha2", "g", {"schedulingPolicy": {"gang": {"minCount": 3}}})
    pod = make_pod("a", labels={names.LABEL_K8S_POD_GROUP: "g"})
    ref = groups.identify(pod, _lookup({("scheduling.k8s.io", "default", "g"): pg}))
    assert (ref.key, ref.source, ref.min_count) == ("default/g", groups.LABEL_K8S, 3)


def test_fluence_label_takes_its_size_from_the_annotation() -> None:
    pod = make_pod(
        "a", labels={names.LABEL_GROUP: "gang3"}, annotations={names.ANNOTATION_GROUP_SIZE: "4"}
    )
    ref = groups.identify(pod)
    assert (ref.key, ref.source, ref.min_count) == ("default/gang3", groups.LABEL_FLUENCE, 4)


def test_fluence_label_without_size_falls_back_to_the_podgroup_then_one() -> None:
    pod = make_pod("a", labels={names.LABEL_GROUP: "g"})
    assert groups.identify(pod).min_count == 1
    pg = _pg("scheduling.k8s.io/v1alpha2", "g", {"schedulingPolicy": {"gang": {"minCount": 5}}})
    assert groups.identify(pod, _lookup({("scheduling.k8s.io", "default", "g"): pg})).min_count == 5


def test_scheduler_plugins_label_reads_min_member() -> None:
    pg = _pg("scheduling.x-k8s.io/v1alpha1", "old", {"minMember": 6})
    pod = make_pod("a", labels={names.LABEL_X_K8S_POD_GROUP: "old"})
    ref = groups.identify(pod, _lookup({("scheduling.x-k8s.io", "default", "old"): pg}))
    assert (ref.source, ref.min_count) == (groups.LABEL_X_K8S, 6)


def test_a_pod_without_a_group_is_a_group_of_one() -> None:
    ref = groups.identify(make_pod("solo", ns="team"))
    assert (ref.key, ref.single, ref.min_count) == ("team/solo", True, 1)


def test_native_field_wins_over_labels_and_namespaces_keep_groups_apart() -> None:
    pod = make_pod("a", group="native", labels={names.LABEL_GROUP: "label"})
    ref = groups.identify(pod)
    assert ref.name == "native"
    assert groups.same_group(make_pod("b", group="native"), ref)
    assert not groups.same_group(make_pod("b", ns="other", group="native"), ref)
    assert not groups.same_group(make_pod("c", labels={names.LABEL_GROUP: "native"}), ref)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("3", 3),
        ("100000", 100_000),
        ("100001", None),
        ("0", None),
        ("03", 3),
        (" 3", None),
        ("+3", None),
        ("-3", None),
        ("3_000", None),
        ("1e3", None),
        ("١٢", None),
        ("３", None),
        ("9" * 40, None),
        ("", None),
    ],
)
def test_group_size_is_a_plain_ascii_decimal_within_bounds(text: str, size: int | None) -> None:
    assert groups.parse_group_size(text) == size


def test_a_native_podgroups_priority_counts_and_a_crds_does_not() -> None:
    spec = {"schedulingPolicy": {"gang": {"minCount": 2}}, "priority": 5000}
    native = _pg("scheduling.k8s.io/v1beta1", "g", spec)
    ref = groups.identify(
        make_pod("a", group="g"), _lookup({("scheduling.k8s.io", "default", "g"): native})
    )
    assert ref.priority == 5000
    # The scheduler-plugins CRD has no admission behind it: a tenant could write anything.
    crd = _pg("scheduling.x-k8s.io/v1alpha1", "old", {"minMember": 2, "priority": 10**9})
    pod = make_pod("a", labels={names.LABEL_X_K8S_POD_GROUP: "old"})
    assert (
        groups.identify(pod, _lookup({("scheduling.x-k8s.io", "default", "old"): crd})).priority
        is None
    )
    assert groups.identify(make_pod("solo")).priority is None


@pytest.mark.parametrize(
    ("api", "extra", "singly", "preempts"),
    [
        ("v1beta1", {"disruptionMode": {"single": {}}}, True, True),
        ("v1beta1", {"disruptionMode": {"all": {}}}, False, True),
        ("v1beta1", {"disruptionMode": {"all": {}}, "preemptionPolicy": "Never"}, False, False),
        # 1.36 stores "Pod" whatever was asked unless an alpha gate is on: kept whole.
        ("v1alpha2", {"disruptionMode": "Pod"}, False, True),
        ("v1alpha2", {"disruptionMode": "PodGroup"}, False, True),
        ("v1alpha2", {}, False, True),
    ],
)
def test_a_native_podgroup_says_how_it_may_be_preempted(
    api: str, extra: dict[str, Any], singly: bool, preempts: bool
) -> None:
    spec = {"schedulingPolicy": {"gang": {"minCount": 2}}, **extra}
    pg = _pg(f"scheduling.k8s.io/{api}", "g", spec)
    ref = groups.identify(
        make_pod("a", group="g"), _lookup({("scheduling.k8s.io", "default", "g"): pg})
    )
    assert (ref.singly, ref.preempts) == (singly, preempts)


def test_only_a_native_podgroup_loosens_a_gang_and_a_crd_cannot() -> None:
    # A label gang without a PodGroup goes whole and may preempt.
    ref = groups.identify(
        make_pod(
            "a", labels={names.LABEL_GROUP: "g"}, annotations={names.ANNOTATION_GROUP_SIZE: "2"}
        )
    )
    assert (ref.singly, ref.preempts) == (False, True)
    crd = _pg(
        "scheduling.x-k8s.io/v1alpha1",
        "old",
        {"minMember": 2, "disruptionMode": {"single": {}}, "preemptionPolicy": "Never"},
    )
    pod = make_pod("a", labels={names.LABEL_X_K8S_POD_GROUP: "old"})
    ref = groups.identify(pod, _lookup({("scheduling.x-k8s.io", "default", "old"): crd}))
    assert (ref.singly, ref.preempts) == (False, True)


# ---- CompositePodGroup ---------------------------------------------------------------------


class Composites:
    """CompositePodGroups and PodGroups by name, as the reflectors hold them."""

    def __init__(self, composites: dict[str, dict[str, Any]], children: list[PodGroup]) -> None:
        self._composites = {
            name: decode_compositepodgroup(
                json.dumps({"metadata": {"name": name, "namespace": "default"}, "spec": spec})
            )
            for name, spec in composites.items()
        }
        self.pgs = {pg.metadata.name: pg for pg in children}

    def composite(self, namespace: str, name: str) -> CompositePodGroup | None:
        return self._composites.get(name) if namespace == "default" else None

    def children(self, namespace: str, name: str) -> list[PodGroup]:
        return [pg for pg in self.pgs.values() if pg.parent == name]

    def lookup(self, api: str, ns: str, name: str) -> PodGroup | None:
        return self.pgs.get(name) if api == names.PODGROUP_GROUP and ns == "default" else None


def _child(name: str, parent: str, min_count: int, topology: str = "") -> PodGroup:
    spec: dict[str, object] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "parentCompositePodGroupName": parent,
        "workloadRef": {"workloadName": "w", "templateName": name},
    }
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return _pg("scheduling.k8s.io/v1beta1", name, spec)


GANG_OF_TWO = {
    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
    "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
    "priority": 7,
}


def test_children_of_a_gang_composite_are_one_group_of_all_their_pods() -> None:
    view = Composites(
        {"team": GANG_OF_TWO}, [_child("leader", "team", 1), _child("workers", "team", 3)]
    )
    leader = make_pod("l-0", group="leader")
    worker = make_pod("w-0", group="workers")
    ref = groups.identify(worker, view.lookup, view)
    assert ref == groups.identify(leader, view.lookup, view)
    assert (ref.key, ref.source, ref.min_count) == ("default/composite:team", groups.COMPOSITE, 4)
    assert ref.children == ("leader", "workers") and ref.topology == "topology.kubernetes.io/zone"
    assert ref.priority == 7 and not ref.unknown
    assert groups.same_group(leader, ref) and groups.same_group(worker, ref)
    assert not groups.same_group(make_pod("x-0", group="other"), ref)
    assert not groups.same_group(make_pod("l-1", group="leader", ns="elsewhere"), ref)
    index = groups.PodsByGroup()
    for p in (leader, worker, make_pod("x-0", group="other")):
        index.update(p)
    assert sorted(p.key for p in index.members(ref)) == ["default/l-0", "default/w-0"]
    # Without a composite view, each child is a group of its own.
    assert groups.identify(worker, view.lookup).key == "default/workers"


def test_a_composite_child_waits_for_its_composite_and_its_siblings() -> None:
    lonely = Composites({}, [_child("leader", "team", 1)])
    ref = groups.identify(make_pod("l-0", group="leader"), lonely.lookup, lonely)
    assert ref.unknown and "CompositePodGroup default/team to exist" in ref.waiting
    short = Composites({"team": GANG_OF_TWO}, [_child("leader", "team", 1)])
    ref = groups.identify(make_pod("l-0", group="leader"), short.lookup, short)
    assert ref.unknown and "1 more PodGroup(s)" in ref.waiting


def test_a_composite_knows_which_children_need_one_domain_of_their_own() -> None:
    rack = "topology.kubernetes.io/rack"
    view = Composites(
        {"team": GANG_OF_TWO}, [_child("leader", "team", 1), _child("workers", "team", 3, rack)]
    )
    ref = groups.identify(make_pod("w-0", group="workers"), view.lookup, view)
    assert ref.child_topology == (("workers", rack),)


def test_children_of_a_basic_composite_are_placed_each_on_its_own() -> None:
    basic = {"schedulingPolicy": {"basic": {}}}
    view = Composites({"team": basic}, [_child("leader", "team", 1), _child("workers", "team", 3)])
    ref = groups.identify(make_pod("w-0", group="workers"), view.lookup, view)
    assert (ref.key, ref.min_count, ref.children) == ("default/workers", 3, ())
