"""Volumes and nodes: a pod may use a node only where each of its claims has, or can
get, a volume of its own, as kube-scheduler's VolumeBinding filter decides."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from fluence.pods import decode_claim, decode_pod, decode_storage_class, decode_volume
from fluence.volume_nodes import (
    Storage,
    in_use,
    out_of_zone,
    short,
    unmet,
    unreachable,
    volume_room,
    volume_terms,
    volume_zones,
)
from tests.unit.fluence.test_pods import make_node, make_pod

NODES = {n: make_node(n) for n in ("n1", "n2", "n3")}
BOUND = {"pv.kubernetes.io/bind-completed": "yes"}


def volume(
    name: str,
    *nodes: str,
    size: str = "1Gi",
    cls: str = "local",
    phase: str = "Available",
    claim: str = "",
    labels: dict[str, str] | None = None,
) -> Any:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": cls,
    }
    if nodes:
        term = {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
            ]
        }
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    if claim:
        spec["claimRef"] = {"namespace": "default", "name": claim}
    doc = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }
    return decode_volume(json.dumps(doc))


def claim(
    name: str,
    volume_name: str = "",
    *,
    ns: str = "default",
    cls: str = "local",
    size: str = "1Gi",
    annotations: dict[str, str] | None = None,
    selector: dict[str, Any] | None = None,
    mode: str = "ReadWriteOnce",
) -> Any:
    spec: dict[str, Any] = {
        "volumeName": volume_name,
        "storageClassName": cls,
        "accessModes": [mode],
        "resources": {"requests": {"storage": size}},
    }
    if selector:
        spec["selector"] = selector
    doc = {
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": spec,
    }
    return decode_claim(json.dumps(doc))


def storage_class(name: str, provisioner: str, mode: str, zones: list[str] | None = None) -> Any:
    doc: dict[str, Any] = {
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if zones:
        doc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "kubernetes.io/hostname", "values": zones}]}
        ]
    return decode_storage_class(json.dumps(doc))


CLASSES = {
    "local": storage_class("local", "kubernetes.io/no-provisioner", "WaitForFirstConsumer"),
    "fast": storage_class("fast", "csi.example", "WaitForFirstConsumer", zones=["n3"]),
    "anywhere": storage_class("anywhere", "csi.example", "WaitForFirstConsumer"),
    "now": storage_class("now", "csi.example", "Immediate"),
}


def storage(claims: list[Any], volumes: list[Any]) -> Storage:
    by_claim = {f"{c.metadata.namespace}/{c.metadata.name}": c for c in claims}
    by_name = {v.metadata.name: v for v in volumes}
    return Storage(by_claim.get, by_name.get, lambda: list(by_name.values()), CLASSES.get)


def pod_with(*claims: str, name: str = "p") -> Any:
    doc = make_pod(name, raw=True)
    doc["spec"]["volumes"] = [{"name": "token", "projected": {"sources": []}}] + [
        {"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims
    ]
    return decode_pod(json.dumps(doc))


def reach(pod: Any, store: Storage) -> list[str]:
    terms = volume_terms(pod, store)
    return [n for n, node in NODES.items() if not unreachable(node, terms)]


def test_a_bound_claims_volume_names_the_nodes_it_reaches() -> None:
    store = storage([claim("scratch", "pv-a", annotations=BOUND)], [volume("pv-a", "n1", "n2")])
    assert reach(pod_with("scratch"), store) == ["n1", "n2"]


def test_every_claim_must_be_met_on_the_node() -> None:
    store = storage(
        [claim("a", "pv-a", annotations=BOUND), claim("b", "pv-b", annotations=BOUND)],
        [volume("pv-a", "n1", "n2"), volume("pv-b", "n2")],
    )
    assert reach(pod_with("a", "b"), store) == ["n2"]


def test_volumes_anywhere_and_pods_without_claims_rule_out_nothing() -> None:
    store = storage([claim("shared", "pv-any", annotations=BOUND)], [volume("pv-any")])
    assert volume_terms(pod_with("shared"), store) == []
    assert volume_terms(pod_with(), store) == []


def test_a_claim_missing_unbound_now_or_half_bound_admits_no_node_yet() -> None:
    """kube-scheduler refuses such a pod everywhere until the claim changes."""
    store = storage(
        [
            claim("immediate", cls="now"),
            claim("half", "pv-a"),  # named a volume, binder not done
            claim("no-class", cls="gone"),
            claim("scratch", "pv-gone", annotations=BOUND),  # its volume was deleted
        ],
        [volume("pv-a", "n1")],
    )
    whys = {
        "missing": "claim missing does not exist",
        "immediate": "claim immediate is not bound yet (its class binds it at once, or is missing)",
        "half": "claim half is being bound to volume pv-a",
        "no-class": "claim no-class is not bound yet (its class binds it at once, or is missing)",
        "scratch": "claim scratch is bound to volume pv-gone, which is gone",
    }
    for name, why in whys.items():
        assert reach(pod_with(name), store) == [], name
        assert unmet(pod_with(name), store) == why
    # A claim of another namespace with the same name is not the pod's.
    other = storage([claim("scratch", "pv-a", ns="team", annotations=BOUND)], [])
    assert reach(pod_with("scratch"), other) == []


def test_a_claim_waiting_for_its_first_consumer_goes_where_a_volume_for_it_is() -> None:
    store = storage(
        [claim("data", size="5Gi")],
        [
            volume("small-n1", "n1", size="1Gi"),  # too small
            volume("other-class-n2", "n2", cls="slow", size="10Gi"),
            volume("taken-n2", "n2", size="10Gi", claim="someone"),
            volume("released-n2", "n2", size="10Gi", phase="Released"),
            volume("fits-n3", "n3", size="8Gi"),
        ],
    )
    assert reach(pod_with("data"), store) == ["n3"]
    assert unmet(pod_with("data"), store) == ""


def test_a_claim_with_a_selector_or_a_volume_made_for_it() -> None:
    store = storage(
        [
            claim("picky", selector={"matchLabels": {"disk": "ssd"}}),
            claim("mine"),
        ],
        [
            volume("hdd-n1", "n1", labels={"disk": "hdd"}),
            volume("ssd-n2", "n2", labels={"disk": "ssd"}),
            volume("for-mine-n1", "n1", claim="mine"),
            volume("free-n3", "n3"),
        ],
    )
    assert reach(pod_with("picky"), store) == ["n2"]
    # A volume whose claimRef names the claim is the only one it binds to.
    assert reach(pod_with("mine"), store) == ["n1"]


def test_a_class_that_provisions_admits_its_allowed_topologies() -> None:
    store = storage(
        [claim("fast", cls="fast"), claim("any", cls="anywhere"), claim("sel", cls="fast")],
        [volume("fast-n1", "n1", cls="fast")],
    )
    # A volume made in advance on n1, or a new one where the class allows (n3).
    assert reach(pod_with("fast"), store) == ["n1", "n3"]
    assert reach(pod_with("any"), store) == ["n1", "n2", "n3"]
    chosen = storage(
        [claim("sel", cls="fast", annotations={"volume.kubernetes.io/selected-node": "n2"})], []
    )
    assert reach(pod_with("sel"), chosen) == ["n2"]


def test_no_provisioner_and_no_volume_admits_no_node() -> None:
    store = storage([claim("data")], [volume("pv-n1", "n1", size="1Mi")])
    assert reach(pod_with("data"), store) == []
    assert unmet(pod_with("data"), store) == (
        "no available volume fits claim data, and its class local makes none"
    )


def test_ephemeral_volumes_claims_are_named_for_the_pod() -> None:
    doc = make_pod("job-0", raw=True)
    doc["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]
    pod = decode_pod(json.dumps(doc))
    store = storage([claim("job-0-scratch")], [volume("pv-n2", "n2")])
    assert reach(pod, store) == ["n2"]
    assert reach(pod, storage([], [volume("pv-n2", "n2")])) == []


def test_an_ephemeral_volumes_claim_another_owns_keeps_the_pod_waiting() -> None:
    """A claim named as the pod's ephemeral one but not controlled by it: kube-scheduler
    refuses the pod everywhere, so it waits and says which claim."""
    doc = make_pod("job-0", raw=True, uid="u-job-0")
    doc["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]
    pod = decode_pod(json.dumps(doc))
    theirs = claim("job-0-scratch")
    assert unmet(pod, storage([theirs], [volume("pv-n2", "n2")])) == (
        "claim job-0-scratch of its ephemeral volume scratch was not made for it"
    )
    owner = {"kind": "Pod", "name": "job-0", "uid": "u-job-0", "controller": True}
    mine = msgspec.json.decode(msgspec.json.encode(theirs), type=dict)
    mine["metadata"]["ownerReferences"] = [owner]
    assert unmet(pod, storage([decode_claim(json.dumps(mine))], [volume("pv-n2", "n2")])) == ""


def test_two_pods_do_not_share_one_local_volume() -> None:
    """Each unbound claim takes a volume of its own: two pods on n1, one volume there."""
    store = storage(
        [claim("a"), claim("b"), claim("c", cls="anywhere")],
        [volume("pv-n1", "n1"), volume("pv-n2", "n2"), volume("pv-n2b", "n2")],
    )
    a, b, c = pod_with("a", name="a"), pod_with("b", name="b"), pod_with("c", name="c")
    chosen: set[str] = set()
    assert short([(a, "n1"), (b, "n1")], NODES, store, chosen) == {"default/b": "n1"}
    chosen = set()
    assert short([(a, "n2"), (b, "n2")], NODES, store, chosen) == {}
    assert chosen == {"pv-n2", "pv-n2b"}
    # Volumes chosen before (pods released, not bound yet) are not offered again.
    assert short([(a, "n1")], NODES, store, {"pv-n1"}) == {"default/a": "n1"}
    # A class that provisions makes a new volume when none is left.
    assert short([(c, "n1")], NODES, store, {"pv-n1"}) == {}


def test_one_pods_two_claims_need_two_volumes() -> None:
    store = storage([claim("a"), claim("b")], [volume("pv-n1", "n1"), volume("pv-n2", "n2")])
    pod = pod_with("a", "b")
    assert reach(pod, store) == ["n1", "n2"]  # each claim alone
    assert short([(pod, "n1")], NODES, store, set()) == {"default/p": "n1"}


def test_a_claim_one_pod_at_a_time_may_use_is_not_shared() -> None:
    store = storage(
        [claim("solo", "pv-a", annotations=BOUND, mode="ReadWriteOncePod"), claim("rwo", "pv-a")],
        [volume("pv-a")],
    )
    a, b = pod_with("solo", name="a"), pod_with("solo", name="b")
    assert in_use([a], {}, store) == ""
    assert in_use([a, b], {}, store) == "pod b: claim solo is ReadWriteOncePod and pod a uses it"
    running = {"default/solo": "default/x"}
    assert in_use([a], running, store) == "pod a: claim solo is ReadWriteOncePod and pod x uses it"
    # The pod itself placed before (released, not bound yet) does not count against it.
    assert in_use([a], {"default/solo": "default/a"}, store) == ""
    # ReadWriteOnce claims may be shared by pods of one node: not this rule's.
    c, d = pod_with("rwo", name="c"), pod_with("rwo", name="d")
    assert in_use([c, d], {"default/rwo": "default/x"}, store) == ""


def test_the_room_local_volumes_leave_each_node_for_a_groups_members() -> None:
    store = storage(
        [claim("a"), claim("b"), claim("c", cls="anywhere"), claim("d"), claim("e")],
        [volume("pv-n1", "n1"), volume("pv-n2a", "n2"), volume("pv-n2b", "n2"), volume("any")],
    )
    a, b, c = pod_with("a", name="a"), pod_with("b", name="b"), pod_with("c", name="c")
    # c's class provisions: it takes no part. A volume reachable anywhere counts on every node.
    assert volume_room([a, b, c], NODES, store, set()) == (
        ["default/a", "default/b"],
        {"n1": 2, "n2": 3, "n3": 1},
    )
    assert volume_room([a, b], NODES, store, {"any", "pv-n2a"}) == (
        ["default/a", "default/b"],
        {"n1": 1, "n2": 1, "n3": 0},
    )
    # A member with two claims takes two volumes.
    two = pod_with("d", "e", name="two")
    assert volume_room([two], NODES, store, set())[1] == {"n1": 1, "n2": 1, "n3": 0}


def test_a_round_lists_the_volumes_once_and_each_claims_candidates_once() -> None:
    listed: list[int] = []
    vols = [volume(f"pv-{i}", "n1") for i in range(3)] + [volume("slow", "n2", cls="slow")]

    def volumes() -> list[Any]:
        listed.append(1)
        return vols

    claims = {f"default/c{i}": claim(f"c{i}") for i in range(50)}
    store = Storage(claims.get, {v.metadata.name: v for v in vols}.get, volumes, CLASSES.get)
    pods = [pod_with(f"c{i}", name=f"p{i}") for i in range(50)]
    each = [reach(p, store) for p in pods]
    assert len(listed) == 50 and each == [["n1"]] * 50
    listed.clear()
    one = store.for_round()
    again = [reach(p, one) for p in pods]
    volume_room(pods, NODES, one, set())
    assert len(listed) == 1 and again == each
    # Volumes of another class are never a claim's candidates.
    assert [v.metadata.name for v in one.of_class("slow")] == ["slow"]


def test_a_bound_volumes_zone_labels_keep_the_pod_to_nodes_of_those_zones() -> None:
    """As kube-scheduler's VolumeZone: a node lacking every zone and region label takes
    the pod; one with them must have one of the volume's values for each label (beta
    keys read the GA label too); an unparsable label is ignored."""
    zoned = volume("pv-z", labels={"topology.kubernetes.io/zone": "a__b"})
    beta = volume("pv-beta", labels={"failure-domain.beta.kubernetes.io/region": "r1"})
    broken = volume("pv-bad", labels={"topology.kubernetes.io/zone": "a____c"})
    claims = [
        claim("z", "pv-z", annotations=BOUND),
        claim("beta", "pv-beta", annotations=BOUND),
        claim("bad", "pv-bad", annotations=BOUND),
    ]
    store = storage(claims, [zoned, beta, broken])
    nodes = {
        "bare": make_node("bare"),
        "in-a": make_node("in-a", labels={"topology.kubernetes.io/zone": "a"}),
        "in-c": make_node("in-c", labels={"topology.kubernetes.io/zone": "c"}),
        "a-r1": make_node(
            "a-r1",
            labels={"topology.kubernetes.io/zone": "a", "topology.kubernetes.io/region": "r1"},
        ),
        "b-r2": make_node(
            "b-r2",
            labels={
                "failure-domain.beta.kubernetes.io/zone": "b",
                "failure-domain.beta.kubernetes.io/region": "r2",
            },
        ),
    }

    def admitted(*names: str) -> list[str]:
        zones = volume_zones(pod_with(*names), store)
        return [n for n, node in nodes.items() if not out_of_zone(node, zones)]

    # A volume's GA label is not read from a node's beta one (only the other way).
    assert admitted("z") == ["bare", "in-a", "a-r1"]
    assert admitted("beta") == ["bare", "a-r1"]
    assert admitted("z", "beta") == ["bare", "a-r1"]
    assert admitted("bad") == list(nodes)
