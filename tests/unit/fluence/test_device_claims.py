"""ResourceClaims (dynamic resource allocation): where a pod's claims can be met, as
kube-scheduler's DynamicResources filter decides it."""

from __future__ import annotations

import json
from typing import Any

from fluence.device_claims import Devices, DevicesByNode, resource_claim_keys, unmet
from fluence.pods import Node, Pod, decode_pod
from fluence.resource_claims import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    decode_device_class,
    decode_resource_claim,
    decode_resource_slice,
)
from tests.unit.fluence.test_pods import make_node, make_pod

DRIVER = "gpu.example.com"
GPU_CLASS = "gpu"


def device_class(
    name: str = GPU_CLASS, expression: str = f'device.driver == "{DRIVER}"', extended: str = ""
) -> DeviceClass:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return decode_device_class(json.dumps({"metadata": {"name": name}, "spec": spec}))


def gpu(
    name: str, model: str = "a100", taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "attributes": {"model": {"string": model}}}
    if taints:
        doc["taints"] = taints
    return doc


def resource_slice(
    node: str,
    devices: list[dict[str, Any]],
    *,
    pool: str = "",
    generation: int = 1,
    count: int = 1,
    name: str = "",
    all_nodes: bool = False,
) -> ResourceSlice:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
        "devices": devices,
    }
    if all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return decode_resource_slice(
        json.dumps({"metadata": {"name": name or f"{node}-gpus"}, "spec": spec})
    )


def resource_claim(
    name: str,
    *,
    count: int = 1,
    selector: str = "",
    cls: str = GPU_CLASS,
    allocated: list[tuple[str, str]] | None = None,
    on: str = "",
    mode: str = "ExactCount",
    first_available: list[dict[str, Any]] | None = None,
    owner: str = "",
    tolerations: list[dict[str, str]] | None = None,
    deleting: bool = False,
) -> ResourceClaim:
    """``allocated``: (pool, device) pairs of its allocation, reachable from node ``on``."""
    exactly: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if tolerations:
        exactly["tolerations"] = tolerations
    request: dict[str, Any] = {"name": "gpu"}
    if first_available is not None:
        request["firstAvailable"] = first_available
    else:
        request["exactly"] = exactly
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    doc: dict[str, Any] = {"metadata": meta, "spec": {"devices": {"requests": [request]}}}
    if allocated is not None:
        allocation: dict[str, Any] = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": p, "device": d}
                    for p, d in allocated
                ]
            }
        }
        if on:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [on]}]}
                ]
            }
        doc["status"] = {"allocation": allocation}
    return decode_resource_claim(json.dumps(doc))


def devices(
    claims: list[ResourceClaim],
    slices: list[ResourceSlice],
    classes: list[DeviceClass] | None = None,
) -> Devices:
    by_key = {c.key: c for c in claims}
    by_name = {c.metadata.name: c for c in (classes if classes is not None else [device_class()])}
    return Devices(by_key.get, lambda: by_key.values(), lambda: slices, by_name.get, by_name.values)


def claiming(name: str, *claims: str, template: str = "", uid: str = "") -> Pod:
    """A pod using ResourceClaims by name (or one made from ``template``, named ``claims[0]``)."""
    doc = make_pod(name, raw=True)
    if uid:
        doc["metadata"]["uid"] = uid
    if template:
        doc["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
        if claims:
            doc["status"]["resourceClaimStatuses"] = [
                {"name": "gpu", "resourceClaimName": claims[0]}
            ]
    else:
        doc["spec"]["resourceClaims"] = [
            {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
        ]
    return decode_pod(json.dumps(doc))


def nodes(n: int = 3) -> dict[str, Node]:
    return {f"n{i}": make_node(f"n{i}") for i in range(n)}


def test_an_unallocated_claim_goes_where_a_free_device_its_selectors_pick_is() -> None:
    slices = [
        resource_slice("n0", [gpu("g0", "t4")]),
        resource_slice("n1", [gpu("g0", "a100")]),
        resource_slice("n2", [gpu("g0", "a100")]),
    ]
    used = resource_claim("used", allocated=[("n2", "g0")], on="n2")
    wants = resource_claim("c", selector=f'device.attributes["{DRIVER}"].model == "a100"')
    view = DevicesByNode(devices([used, wants], slices), nodes())
    assert view.refusing(claiming("p", "c")) == {"n0", "n2"}


def test_an_allocated_claim_keeps_its_pods_to_the_nodes_its_devices_are_reached_from() -> None:
    claim = resource_claim("c", allocated=[("n1", "g0")], on="n1")
    view = DevicesByNode(devices([claim], [resource_slice("n1", [gpu("g0")])]), nodes())
    assert view.refusing(claiming("p", "c")) == {"n0", "n2"}
    everywhere = resource_claim("e", allocated=[("shared", "g0")])
    view = DevicesByNode(devices([everywhere], []), nodes())
    assert view.refusing(claiming("p", "e")) == set()


def test_a_pool_being_published_gives_no_devices() -> None:
    """Two slices make pool "big" and one is there: kube-scheduler takes nothing from it,
    nor from slices of an older generation."""
    slices = [
        resource_slice("n0", [gpu("g0")], pool="big", count=2),
        resource_slice("n1", [gpu("g0")], generation=1, name="old"),
        resource_slice("n1", [], generation=2, name="new"),
        resource_slice("n2", [gpu("g0")]),
    ]
    view = DevicesByNode(devices([resource_claim("c")], slices), nodes())
    assert view.refusing(claiming("p", "c")) == {"n0", "n1"}


def test_slices_for_all_nodes_reach_every_node() -> None:
    slices = [resource_slice("net", [gpu("g0")], all_nodes=True)]
    view = DevicesByNode(devices([resource_claim("c")], slices), nodes())
    assert view.refusing(claiming("p", "c")) == set()


def test_a_tainted_device_counts_only_for_requests_that_tolerate_it() -> None:
    taint = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]
    slices = [resource_slice("n0", [gpu("g0", taints=taint)]), resource_slice("n1", [gpu("g0")])]
    plain = resource_claim("plain")
    tolerant = resource_claim("tolerant", tolerations=[{"key": "broken", "operator": "Exists"}])
    view = DevicesByNode(devices([plain, tolerant], slices), nodes(2))
    assert view.refusing(claiming("p", "plain")) == {"n0"}
    assert view.refusing(claiming("q", "tolerant")) == set()


def test_counts_all_mode_and_first_available() -> None:
    slices = [
        resource_slice("n0", [gpu("g0"), gpu("g1")]),
        resource_slice("n1", [gpu("g0"), gpu("g1", "t4")]),
    ]
    two = resource_claim("two", count=2)
    everything = resource_claim("all", mode="All")
    used = resource_claim("used", allocated=[("n1", "g1")], on="n1")
    either = resource_claim(
        "either",
        first_available=[
            {"name": "big", "deviceClassName": GPU_CLASS, "count": 2},
            {"name": "one", "deviceClassName": GPU_CLASS, "count": 1},
        ],
    )
    view = DevicesByNode(devices([two, everything, used, either], slices), nodes(2))
    assert view.refusing(claiming("p", "two")) == {"n1"}
    assert view.refusing(claiming("p", "all")) == {"n1"}  # one of n1's is in use
    assert view.refusing(claiming("p", "either")) == set()  # n1 meets it with one


def test_a_pods_claims_take_distinct_devices() -> None:
    slices = [resource_slice("n0", [gpu("g0")]), resource_slice("n1", [gpu("g0"), gpu("g1")])]
    view = DevicesByNode(devices([resource_claim("a"), resource_claim("b")], slices), nodes(2))
    assert view.refusing(claiming("p", "a", "b")) == {"n0"}


def test_members_matched_past_a_nodes_devices_overflow_it_and_placed_pods_take_theirs() -> None:
    slices = [resource_slice(f"n{i}", [gpu("g0")]) for i in range(3)]
    claims = [resource_claim(f"c{i}") for i in range(3)]
    view = DevicesByNode(devices(claims, slices), nodes())
    a, b, c = (claiming(f"p{i}", f"c{i}") for i in range(3))
    assert view.overflow([(a, "n0"), (b, "n0"), (c, "n1")]) == {"n0"}
    assert view.overflow([(a, "n0"), (b, "n1"), (c, "n2")]) == set()
    view.take(a, "n0")
    assert view.refusing(b) == {"n0"}
    assert view.capacity([b, c]) == {"n0": 0, "n1": 1, "n2": 1}
    # Two claims on one pod need two devices: no node has them.
    assert view.capacity([claiming("q", "c1", "c2")]) == {"n0": 0, "n1": 0, "n2": 0}


def test_a_claim_shared_by_placed_pods_is_allocated_once_on_the_first_ones_node() -> None:
    slices = [resource_slice(f"n{i}", [gpu("g0")]) for i in range(3)]
    view = DevicesByNode(devices([resource_claim("shared")], slices), nodes())
    first, second = claiming("a", "shared"), claiming("b", "shared")
    view.take(first, "n1")
    assert view.refusing(second) == {"n0", "n2"}
    assert view.overflow([(second, "n0")]) == {"n0"}
    # A device every node reaches keeps no sharer to one node.
    slices = [resource_slice("net", [gpu("g0")], all_nodes=True)]
    view = DevicesByNode(devices([resource_claim("shared")], slices), nodes())
    view.take(first, "n1")
    assert view.refusing(second) == set()


def test_why_no_node_takes_a_pod_for_its_claims() -> None:
    mine = "uid-1"
    claims = [
        resource_claim("gone-soon", deleting=True),
        resource_claim("made", owner=mine),
        resource_claim("foreign", owner="uid-2"),
        resource_claim("no-class", cls="tpu"),
    ]
    view = devices(claims, [])
    assert unmet(claiming("p", template="t", uid=mine), view) == (
        "waiting for its ResourceClaim gpu to be made from t"
    )
    assert unmet(claiming("p", "made", template="t", uid=mine), view) == ""
    assert unmet(claiming("p", "foreign", template="t", uid=mine), view) == (
        "ResourceClaim foreign was not made for it"
    )
    assert unmet(claiming("p", "missing"), view) == "waiting for ResourceClaim missing to exist"
    assert unmet(claiming("p", "gone-soon"), view) == "ResourceClaim gone-soon is being deleted"
    assert unmet(claiming("p", "no-class"), view) == "waiting for DeviceClass tpu to exist"
    assert resource_claim_keys(claiming("p", "made", template="t")) == ["default/made"]


def test_a_template_that_needed_no_claim_asks_for_nothing() -> None:
    doc = make_pod("p", raw=True)
    doc["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    doc["status"]["resourceClaimStatuses"] = [{"name": "gpu"}]
    pod = decode_pod(json.dumps(doc))
    assert unmet(pod, devices([], [])) == ""
    assert resource_claim_keys(pod) == []


def test_extended_resources_a_device_class_backs_ask_for_its_devices() -> None:
    """A class backs ``example.com/gpu`` (and its implicit name): a pod asking two goes
    where two free devices are, or where a device plugin gives the node that resource
    (kube-scheduler counts that node's allocatable instead)."""
    cls = device_class(extended="example.com/gpu")
    slices = [resource_slice("n0", [gpu("g0")]), resource_slice("n1", [gpu("g0"), gpu("g1")])]
    where = nodes(2) | {"n2": make_node("n2", extra={"example.com/gpu": "4"})}
    view = DevicesByNode(devices([], slices, [cls]), where)
    assert view.refusing(make_pod("p", extra={"example.com/gpu": "2"})) == {"n0"}
    # n2's device plugin gives example.com/gpu, not the class's implicit name.
    implicit = make_pod("p", extra={"deviceclass.resource.kubernetes.io/gpu": "2"})
    assert view.refusing(implicit) == {"n0", "n2"}
    view.take(make_pod("p", extra={"example.com/gpu": "1"}), "n1")
    assert view.refusing(make_pod("q", extra={"example.com/gpu": "2"})) == {"n0", "n1"}
    # A bound pod's devices are in the claim kube-scheduler made for it.
    view.take(make_pod("r", extra={"example.com/gpu": "1"}, node="n0"), "n0")
    assert view.refusing(make_pod("s", extra={"example.com/gpu": "1"})) == set()


def attributed(name: str, **attributes: dict[str, Any]) -> dict[str, Any]:
    """A device with typed attributes (``{"int": 0}``, ``{"string": "a"}``...)."""
    return {"name": name, "attributes": attributes}


def constrained(
    name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]]
) -> ResourceClaim:
    doc = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": requests, "constraints": constraints}},
    }
    return decode_resource_claim(json.dumps(doc))


def exactly(name: str, count: int = 1, mode: str = "ExactCount") -> dict[str, Any]:
    spec = {"deviceClassName": GPU_CLASS, "count": count, "allocationMode": mode}
    return {"name": name, "exactly": spec}


def test_devices_a_match_attribute_constraint_ties_must_agree_on_it() -> None:
    """Two devices on each node; n0's sit on two NUMA nodes, n1's on one. A claim for two
    that must share ``numa`` goes to n1 only (the driver's own attribute found by its
    id); one naming another domain's attribute, which no device has, nowhere; one
    without the constraint anywhere."""
    slices = [
        resource_slice(
            "n0", [attributed("g0", numa={"int": 0}), attributed("g1", numa={"int": 1})]
        ),
        resource_slice(
            "n1", [attributed("g0", numa={"int": 1}), attributed("g1", numa={"int": 1})]
        ),
    ]
    same = constrained("same", [exactly("gpu", 2)], [{"matchAttribute": f"{DRIVER}/numa"}])
    other = constrained("other", [exactly("gpu", 2)], [{"matchAttribute": "other.example/numa"}])
    free = constrained("free", [exactly("gpu", 2)], [])
    view = DevicesByNode(devices([same, other, free], slices), nodes(2))
    assert view.refusing(claiming("p", "same")) == {"n0"}
    assert view.refusing(claiming("p", "other")) == {"n0", "n1"}
    assert view.refusing(claiming("p", "free")) == set()


def test_a_constraint_binds_only_the_requests_it_names_and_all_mode_whole() -> None:
    """A GPU and a NIC that must share a PCIe root: n0 has them on different roots, n1 on
    one (beside a GPU on another root, tried first), n3 has two devices on one. Naming
    the GPU request alone leaves the NIC free. All mode takes every device, so they must
    all agree. Values agree only in type too: an int 1 is not the string "1"."""
    root = f"{DRIVER}/pcieRoot"
    slices = [
        resource_slice(
            "n0",
            [
                attributed("gpu0", pcieRoot={"string": "a"}),
                attributed("nic0", pcieRoot={"string": "b"}),
            ],
        ),
        resource_slice(
            "n1",
            [
                attributed("gpu0", pcieRoot={"string": "b"}),
                attributed("gpu1", pcieRoot={"string": "a"}),
                attributed("nic0", pcieRoot={"string": "a"}),
            ],
        ),
        resource_slice(
            "n2", [attributed("g0", numa={"int": 1}), attributed("g1", numa={"string": "1"})]
        ),
        resource_slice(
            "n3",
            [
                attributed("x0", pcieRoot={"string": "a"}),
                attributed("x1", pcieRoot={"string": "a"}),
            ],
        ),
    ]
    both = constrained(
        "both",
        [exactly("gpu"), exactly("nic")],
        [{"requests": ["gpu", "nic"], "matchAttribute": root}],
    )
    gpu_only = constrained(
        "gpu-only",
        [exactly("gpu"), exactly("nic")],
        [{"requests": ["gpu"], "matchAttribute": root}],
    )
    whole = constrained("whole", [exactly("gpu", mode="All")], [{"matchAttribute": root}])
    typed = constrained("typed", [exactly("gpu", 2)], [{"matchAttribute": f"{DRIVER}/numa"}])
    view = DevicesByNode(devices([both, gpu_only, whole, typed], slices), nodes(4))
    assert view.refusing(claiming("p", "both")) == {"n0", "n2"}
    assert view.refusing(claiming("p", "gpu-only")) == {"n2"}
    assert view.refusing(claiming("p", "whole")) == {"n0", "n1", "n2"}
    assert view.refusing(claiming("p", "typed")) == {"n0", "n1", "n2", "n3"}
    # The devices the constrained claim takes on n1 are the agreeing ones.
    assert view.allocate(both, "n1", set()) == [
        "gpu.example.com/n1/gpu1",
        "gpu.example.com/n1/nic0",
    ]


def test_a_constraint_on_a_first_available_entry_binds_that_entry_alone() -> None:
    """``gpu/big`` must share ``numa``; n0's two devices do not: the request falls back
    to its unconstrained ``one`` entry there."""
    slices = [
        resource_slice("n0", [attributed("g0", numa={"int": 0}), attributed("g1", numa={"int": 1})])
    ]
    entries = [
        {"name": "big", "deviceClassName": GPU_CLASS, "count": 2},
        {"name": "one", "deviceClassName": GPU_CLASS, "count": 1},
    ]
    claim = constrained(
        "fallback",
        [{"name": "gpu", "firstAvailable": entries}],
        [{"requests": ["gpu/big"], "matchAttribute": f"{DRIVER}/numa"}],
    )
    view = DevicesByNode(devices([claim], slices), nodes(1))
    assert view.allocate(claim, "n0", set()) == ["gpu.example.com/n0/g0"]
