"""Group -> jobspecs: slots per pod shape, device matches, require- annotations, exclusions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluence import names
from fluence.group_jobspec import JobspecError, group_jobspecs
from fluence.pods import decode_pod, pod_requests, split_requests
from tests.unit.fluence.test_pods import make_pod

KNOWN = {"qdevice", "qpu", "qubit"}


def test_homogeneous_group_is_one_slot_shape_counted_per_pod() -> None:
    pods = [make_pod(f"p{i}", cpu="4", memory="8Gi", group="training") for i in range(2)]
    specs = group_jobspecs("default/training", pods, KNOWN)
    assert specs.devices == ()
    (c,) = specs.compute
    assert c.jobspec == {
        "version": 9999,
        "resources": [
            {
                "type": "slot",
                "count": 2,
                "label": "default",
                "with": [{"type": "core", "count": 4000}, {"type": "memory", "count": 8192}],
            }
        ],
        "attributes": {"system": {"constraints": {"properties": ["virtual=false"]}, "duration": 0}},
        "tasks": [{"command": ["pod-group"], "slot": "default", "count": {"per_slot": 1}}],
    }


def test_requests_worked_out_by_the_caller_give_the_same_jobspecs() -> None:
    pods = [
        make_pod("a", cpu="1"),
        make_pod("b", cpu="2", extra={"nvidia.com/gpu": "1", names.resource_name("qpu"): "1"}),
        make_pod("c", cpu="1"),
    ]
    split = {p.key: split_requests(pod_requests(p)) for p in pods}
    assert group_jobspecs("default/g", pods, KNOWN, ["n1"], split=split) == group_jobspecs(
        "default/g", pods, KNOWN, ["n1"]
    )


def test_heterogeneous_group_gets_one_jobspec_per_shape_biggest_first() -> None:
    pods = [
        make_pod("a", cpu="1"),
        make_pod("b", cpu="2", extra={"nvidia.com/gpu": "1"}),
        make_pod("c", cpu="1"),
    ]
    specs = group_jobspecs("default/g", pods, KNOWN)
    assert [(dict(c.shape), c.count) for c in specs.compute] == [
        ({"core": 2000, "gpu": 1}, 1),
        ({"core": 1000}, 2),
    ]


def test_device_request_adds_a_virtual_match_with_require_annotations() -> None:
    pod = make_pod(
        "sampler",
        cpu=None,
        extra={names.resource_name("qpu"): "1"},
        annotations={
            names.ANNOTATION_REQUIRE_PREFIX + "vendor": "ibm",
            names.ANNOTATION_REQUIRE_PREFIX + "region": "",
        },
    )
    specs = group_jobspecs("default/sampler", [pod], KNOWN)
    assert specs.compute == ()
    (d,) = specs.devices
    assert d.jobspec["resources"] == [
        {"type": "slot", "count": 1, "label": "device", "with": [{"type": "node", "count": 1}]}
    ]
    assert d.jobspec["attributes"]["system"] == {
        "constraints": {
            "properties": ["virtual=true", "class=qpu", "fluxion.flux-framework.org/vendor=ibm"]
        },
        "duration": 0,
    }


def test_device_count_is_the_max_over_members_and_requires_are_deduplicated() -> None:
    req = names.ANNOTATION_REQUIRE_PREFIX + "vendor"
    pods = [
        make_pod("a", extra={names.resource_name("qpu"): "1"}, annotations={req: "ibm"}),
        make_pod("b", extra={names.resource_name("qpu"): "2"}, annotations={req: "ibm"}),
    ]
    specs = group_jobspecs("default/g", pods, KNOWN)
    (d,) = specs.devices
    assert d.count == 2
    assert (
        d.jobspec["attributes"]["system"]["constraints"]["properties"].count(
            "fluxion.flux-framework.org/vendor=ibm"
        )
        == 1
    )
    assert "fluxion.flux-framework.org/vendor=ibm" not in str(specs.compute[0].jobspec)


def test_excluded_nodes_become_a_sorted_not_hostlist() -> None:
    specs = group_jobspecs("default/p", [make_pod("p")], KNOWN, exclude=["node-c", "node-b"])
    assert specs.compute[0].jobspec["attributes"]["system"]["constraints"] == {
        "and": [{"properties": ["virtual=false"]}, {"not": [{"hostlist": ["node-b", "node-c"]}]}]
    }


def test_unknown_virtual_type_is_refused_with_a_fix() -> None:
    pod = make_pod("p", extra={names.resource_name("fpga"): "1"})
    with pytest.raises(JobspecError, match="fpga.*not in the resources config"):
        group_jobspecs("default/p", [pod], KNOWN)
    with pytest.raises(JobspecError, match="no resources config"):
        group_jobspecs("default/p", [pod], set())


def test_empty_group_is_an_error() -> None:
    with pytest.raises(JobspecError, match="no pods"):
        group_jobspecs("default/g", [], KNOWN)


def test_members_taking_the_same_host_ports_are_matched_on_distinct_nodes() -> None:
    def pod(name: str, port: int | None) -> object:
        doc = make_pod(name, cpu="1", raw=True)
        if port is not None:
            doc["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
        return decode_pod(json.dumps(doc))

    pods = [pod("a", 8080), pod("b", None), pod("c", 8080), pod("d", 9090)]
    specs = group_jobspecs("default/g", pods, [])  # type: ignore[arg-type]
    spread = [cs for cs in specs.compute if cs.pods]
    # d takes a port no other member asks for: it may go anywhere, as b.
    assert [(cs.count, cs.pods) for cs in spread] == [(2, ("default/a", "default/c"))]
    for cs in spread:
        (node,) = cs.jobspec["resources"]
        assert node["type"] == "node" and node["count"] == cs.count
        assert node["with"][0]["type"] == "slot" and node["with"][0]["count"] == 1
    (plain,) = [cs for cs in specs.compute if not cs.pods]
    assert plain.count == 2 and plain.jobspec["resources"][0]["type"] == "slot"
    # Named specs come before the plain one of their shape, which takes the rest in order.
    assert specs.compute[-1] is plain


def test_members_one_keeps_off_the_others_node_are_matched_on_distinct_nodes() -> None:
    """Required anti-affinity per node (kubernetes.io/hostname) that picks other members
    links them as a shared host port does; on another topology key it does not."""

    def pod(name: str, labels: dict[str, str], key: str = "") -> object:
        doc = make_pod(name, cpu="1", raw=True, labels=labels)
        if key:
            term = {"labelSelector": {"matchLabels": {"app": "mpi"}}, "topologyKey": key}
            doc["spec"]["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        return decode_pod(json.dumps(doc))

    host = "kubernetes.io/hostname"
    pods = [
        pod("r0", {"app": "mpi"}, host),
        pod("r1", {"app": "mpi"}),
        pod("r2", {"app": "mpi"}, host),
        pod("x", {"app": "other"}),
        pod("z", {"app": "mpi"}, "topology.kubernetes.io/zone"),
    ]
    specs = group_jobspecs("default/g", pods, [])  # type: ignore[arg-type]
    spread = [(cs.count, cs.pods) for cs in specs.compute if cs.pods]
    assert spread == [(4, ("default/r0", "default/r1", "default/r2", "default/z"))]
    (plain,) = [cs for cs in specs.compute if not cs.pods]
    assert plain.count == 1


def test_members_kept_off_nodes_of_their_own_get_specs_of_their_own() -> None:
    pods = [make_pod(n, cpu="1") for n in ("a", "b", "c", "d")]
    specs = group_jobspecs(
        "default/g",
        pods,
        KNOWN,
        exclude=["node-z"],
        exclude_for={"default/b": ["node-x"], "default/d": ["node-x", "node-y"]},
    )

    def hosts(cs: Any) -> list[str]:
        (c,) = [c for c in cs.jobspec["attributes"]["system"]["constraints"]["and"] if "not" in c]
        return list(c["not"][0]["hostlist"])

    # The most kept-off first, then the less, then the plain spec of the rest.
    assert [(cs.pods, cs.count, hosts(cs)) for cs in specs.compute] == [
        (("default/d",), 1, ["node-x", "node-y", "node-z"]),
        (("default/b",), 1, ["node-x", "node-z"]),
        ((), 2, ["node-z"]),
    ]


def test_members_spread_per_node_beyond_the_nodes_go_in_rounds_but_shared_ports_do_not() -> None:
    """Five members spread per node (maxSkew 1) over two nodes: rounds of two, two and one,
    each on distinct nodes. Members that take one host port must be apart whatever the
    count: one spec on distinct nodes (it waits until there are nodes enough)."""

    def pod(name: str, port: int | None = None) -> object:
        doc = make_pod(name, cpu="1", raw=True, labels={"app": "web"})
        doc["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
        if port is not None:
            doc["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
        return decode_pod(json.dumps(doc))

    spread = [pod(f"w{i}") for i in range(5)]
    asked: list[int] = []

    def two() -> int:
        asked.append(2)
        return 2

    specs = group_jobspecs("default/g", spread, [], spread_over=two)  # type: ignore[arg-type]
    assert sorted(cs.count for cs in specs.compute) == [1, 2, 2]
    assert sorted(k for cs in specs.compute for k in cs.pods) == [p.key for p in spread]  # type: ignore[attr-defined]
    for cs in specs.compute:
        (node,) = cs.jobspec["resources"]
        assert node["type"] == "node" and node["with"][0]["count"] == 1
    assert asked == [2]
    ported = [pod(f"p{i}", 8080) for i in range(3)]
    specs = group_jobspecs("default/g", ported, [], spread_over=two)  # type: ignore[arg-type]
    assert [cs.count for cs in specs.compute] == [3]
    # Nothing spread per node: the node count is never read.
    asked.clear()
    group_jobspecs("default/g", [make_pod("x", cpu="1")], KNOWN, spread_over=two)
    assert asked == []
