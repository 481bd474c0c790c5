"""Which gang a pod belongs to, and its quorum, from every supported source."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluence import groups, names
from fluence.pods import (
    CompositePodGroup,
    PodGroup,
    decode_compositepodgroup,
    decode_pod,
    decode_podgroup,
)
from tests.unit.fluence.test_pods import make_pod


def _pg(
    api: str, name: str, spec: dict[str, object], annotations: dict[str, str] | None = None
) -> PodGroup:
    return decode_podgroup(
        json.dumps(
            {
                "apiVersion": api,
                "kind": "PodGroup",
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "annotations": annotations or {},
                },
                "spec": spec,
            }
        )
    )


JOB_OWNER = {"kind": "Job", "name": "train", "uid": "u-1", "controller": True}
MADE_FOR_JOB = {
    names.ANNOTATION_CREATED_BY: names.CREATED_BY_WEBHOOK,
    names.ANNOTATION_CREATED_FOR: "Job/train/u-1",
}


def _owned_pod(name: str, **kw: Any) -> Any:
    doc = make_pod(name, raw=True, **kw)
    doc["metadata"]["ownerReferences"] = [JOB_OWNER]
    return decode_pod(json.dumps(doc))


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


def test_fluence_label_without_size_falls_back_to_the_podgroup_made_for_it_then_one() -> None:
    pod = _owned_pod("a", labels={names.LABEL_GROUP: "g"})
    assert groups.identify(pod).min_count == 1
    spec: dict[str, object] = {"schedulingPolicy": {"gang": {"minCount": 5}}, "priority": 7}
    pg = _pg("scheduling.k8s.io/v1alpha2", "g", spec, MADE_FOR_JOB)
    ref = groups.identify(pod, _lookup({("scheduling.k8s.io", "default", "g"): pg}))
    assert (ref.min_count, ref.priority) == (5, 7)


@pytest.mark.parametrize(
    "annotations",
    [
        {},  # made by hand
        {names.ANNOTATION_CREATED_BY: names.CREATED_BY_WEBHOOK},  # for nobody in particular
        {**MADE_FOR_JOB, names.ANNOTATION_CREATED_FOR: "Job/train/another-uid"},  # another Job
        {**MADE_FOR_JOB, names.ANNOTATION_CREATED_FOR: "user/mallory"},  # a user's bare pods
    ],
)
def test_a_label_gang_takes_nothing_from_a_podgroup_not_made_for_it(
    annotations: dict[str, str],
) -> None:
    """A planted PodGroup of the gang's name can neither stall it (a quorum it never
    reaches) nor change its priority or topology."""
    spec: dict[str, object] = {
        "schedulingPolicy": {"gang": {"minCount": 500}},
        "priority": -5,
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    }
    pg = _pg("scheduling.k8s.io/v1beta1", "g", spec, annotations)
    table = _lookup({("scheduling.k8s.io", "default", "g"): pg})
    for pod in (
        _owned_pod("a", labels={names.LABEL_GROUP: "g"}),
        make_pod("b", labels={names.LABEL_GROUP: "g"}),
    ):
        ref = groups.identify(pod, table)
        assert (ref.min_count, ref.priority, ref.topology, ref.singly) == (1, None, "", False)
    sized = _owned_pod(
        "c", labels={names.LABEL_GROUP: "g"}, annotations={names.ANNOTATION_GROUP_SIZE: "3"}
    )
    assert (groups.identify(sized, table).min_count, groups.identify(sized, table).priority) == (
        3,
        None,
    )


def _member(name: str, priority: int | None) -> Any:
    doc = make_pod(name, raw=True, group="g")
    if priority is not None:
        doc["spec"]["priority"] = priority
    return decode_pod(json.dumps(doc))


@pytest.mark.parametrize(
    ("group", "members", "expected"),
    [
        (None, [100, 100], 100),
        (None, [100, 0], 0),  # one low member: the group is low
        (None, [None, 5], 0),  # no priority resolved: 0, as kube-scheduler reads it
        (10**9, [0, 0], 0),  # a PodGroup claiming more than its pods: theirs
        (10, [100, 100], 10),  # a PodGroup asking less: its own
        (-3, [0], -3),
    ],
)
def test_a_groups_priority_never_exceeds_what_admission_resolved_for_its_pods(
    group: int | None, members: list[int | None], expected: int
) -> None:
    ref = groups.GroupRef("default/g", "default", "g", groups.NATIVE, 2, priority=group)
    pods = [_member(f"m{i}", p) for i, p in enumerate(members)]
    assert groups.group_priority(ref, pods) == expected


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


def _child(
    name: str, parent: str, min_count: int, topology: str = "", *, owned: bool = True
) -> PodGroup:
    """A PodGroup naming ``parent``; ``owned``: the composite owns it (its consent)."""
    spec: dict[str, object] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "parentCompositePodGroupName": parent,
        "workloadRef": {"workloadName": "w", "templateName": name},
    }
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    owners = [{"kind": "CompositePodGroup", "name": parent, "uid": "", "controller": True}]
    doc = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": owners if owned else [],
        },
        "spec": spec,
    }
    return decode_podgroup(json.dumps(doc))


GANG_OF_TWO = {
    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
    "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
    "priority": 7,
}


def test_a_podgroup_the_composite_did_not_adopt_neither_joins_nor_inflates_it() -> None:
    """Naming a parent is not enough: a planted child would raise the quorum forever."""
    planted = _child("planted", "team", 500, owned=False)
    view = Composites(
        {"team": GANG_OF_TWO},
        [_child("leader", "team", 1), _child("workers", "team", 3), planted],
    )
    ref = groups.identify(make_pod("w-0", group="workers"), view.lookup, view)
    assert (ref.key, ref.min_count, ref.children) == (
        "default/composite:team",
        4,
        ("leader", "workers"),
    )
    own = groups.identify(make_pod("p-0", group="planted"), view.lookup, view)
    assert (own.key, own.source, own.min_count) == ("default/planted", groups.NATIVE, 500)
    # Made for the composite (the webhook's annotation) counts as its consent.
    made = _pg(
        "scheduling.k8s.io/v1beta1",
        "made",
        {"schedulingPolicy": {"gang": {"minCount": 2}}, "parentCompositePodGroupName": "team"},
        {names.ANNOTATION_CREATED_FOR: "CompositePodGroup/team/"},
    )
    view.pgs["made"] = made
    ref = groups.identify(make_pod("w-0", group="workers"), view.lookup, view)
    assert (ref.min_count, ref.children) == (6, ("leader", "made", "workers"))


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
