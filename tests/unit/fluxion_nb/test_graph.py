"""Behaviour of the typed Python API over the matcher."""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import replace
from typing import Any

import pytest

from fluxion_nb import Graph, InputError, NotFoundError, StateError
from fluxion_nb.examples import pooled_cluster, slot_jobspec


def test_four_one_cpu_pods_share_a_four_cpu_node_and_a_fifth_does_not_fit() -> None:
    g = Graph(
        pooled_cluster(nodes=1, cpus_milli=4000, memory_mib=8192), partial_pools={"core", "memory"}
    )
    gang = g.match(slot_jobspec(4, 1000, 1024))
    assert gang.status == "allocated"
    assert gang.by_node() == {"worker0": {"core": 4000, "memory": 4096}}
    fifth = g.match(slot_jobspec(1, 1000, 1024))
    assert fifth.status == "busy"


def test_tiny_slots_on_big_shared_pools_take_what_they_ask_and_ranges_take_their_max() -> None:
    # A 10m slot fits 3,200 times into one 32-core pool; only the slots asked for are cut.
    g = Graph(
        pooled_cluster(nodes=2, cpus_milli=32000, memory_mib=131072),
        policy="first",
        partial_pools={"core", "memory"},
    )
    for _ in range(50):
        assert sum(per["core"] for per in g.match(slot_jobspec(1, 10, 16)).by_node().values()) == 10
    gang = g.match(slot_jobspec(3, 10, 16))
    assert sum(per["core"] for per in gang.by_node().values()) == 30
    ranged = slot_jobspec(1, 10, 16)
    ranged["resources"][0]["count"] = {"min": 1, "max": 5, "operator": "+", "operand": 1}
    got = g.match(ranged).by_node()
    assert sum(per["core"] for per in got.values()) == 50
    assert sum(per["memory"] for per in got.values()) == 80


def _socket_cluster(nodes: int) -> dict[str, Any]:
    """cluster0 -> node<i> -> socket<0,1> -> 4 cores + 1 gpu each, as JGF."""
    verts: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def add(kind: str, ident: int, path: str, parent: str | None) -> str:
        vid = str(len(verts))
        meta = {"type": kind, "basename": kind, "name": f"{kind}{ident}", "id": ident}
        verts.append({"id": vid, "metadata": {**meta, "paths": {"containment": path}}})
        if parent is not None:
            edges.append(
                {"source": parent, "target": vid, "metadata": {"subsystem": "containment"}}
            )
        return vid

    root = add("cluster", 0, "/cluster0", None)
    core = gpu = 0
    for n in range(nodes):
        node = add("node", n, f"/cluster0/node{n}", root)
        for s in range(2):
            sp = f"/cluster0/node{n}/socket{s}"
            sock = add("socket", n * 2 + s, sp, node)
            for _ in range(4):
                add("core", core, f"{sp}/core{core}", sock)
                core += 1
            add("gpu", gpu, f"{sp}/gpu{gpu}", sock)
            gpu += 1
    return {"graph": {"nodes": verts, "edges": edges}}


def test_by_node_summed_by_the_core_equals_the_sum_of_the_described_vertices() -> None:
    g = Graph(_socket_cluster(3))
    slot = {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 1}]}
    gang = {"type": "slot", "count": 3, "label": "t"}
    gang["with"] = [{"type": "core", "count": 3}, {"type": "gpu", "count": 1}]
    whole_node = {"type": "node", "count": 1, "exclusive": True, "with": [slot]}
    for resource in (gang, whole_node):
        spec = {
            "version": 1,
            "resources": [resource],
            "attributes": {"system": {"duration": 60}},
            "tasks": [{"command": ["x"], "slot": "t", "count": {"per_slot": 1}}],
        }
        a = g.match(spec)
        assert a.ok
        fast = a.by_node()  # before anything describes the vertices
        expected: dict[str, dict[str, int]] = {}
        for v in a.vertices:
            if v.node and v.exclusive and v.type != "node":
                per = expected.setdefault(v.node, {})
                per[v.type] = per.get(v.type, 0) + v.amount
        assert len(expected) > 1 or "socket" in next(iter(expected.values()))
        assert fast == expected
        assert list(fast) == list(expected)  # the same node order
        assert a.by_node() == expected  # and once described


def test_fluxion_default_allocates_a_pool_whole_so_one_pod_per_node() -> None:
    g = Graph(pooled_cluster(nodes=1), policy="first")
    first = g.match(slot_jobspec(1, 1000, 1024))
    assert first.by_node() == {"worker0": {"core": 4000, "memory": 8192}}
    assert g.match(slot_jobspec(1, 1000, 1024)).status == "busy"


def test_unsatisfiable_is_told_apart_from_busy() -> None:
    g = Graph(pooled_cluster(nodes=2), partial_pools=True)
    assert (
        g.match(slot_jobspec(1, 5000, 1), "allocate_with_satisfiability").status == "unsatisfiable"
    )
    g.match(slot_jobspec(8, 1000, 1))
    assert g.match(slot_jobspec(1, 1000, 1), "allocate_with_satisfiability").status == "busy"
    assert g.satisfiable(slot_jobspec(8, 1000, 1))
    assert not g.satisfiable(slot_jobspec(9, 1000, 1))


def test_cancel_returns_exactly_the_units_taken() -> None:
    g = Graph(pooled_cluster(nodes=1), partial_pools=True)
    a = g.match(slot_jobspec(3, 1000, 1000))
    used = {u.type: u.used for u in g.usage() if u.type in ("core", "memory")}
    assert used == {"core": 3000, "memory": 3000}
    assert g.cancel(a.jobid)
    assert all(u.used == 0 for u in g.usage())


def test_partial_cancel_releases_one_nodes_share() -> None:
    g = Graph(pooled_cluster(nodes=2), partial_pools=True)
    a = g.match(slot_jobspec(8, 1000, 1000))
    assert sorted(a.nodes) == ["worker0", "worker1"]
    assert g.partial_cancel(a.jobid, ["/cluster/worker0"]) is False
    assert g.match(slot_jobspec(4, 1000, 1000)).by_node() == {
        "worker0": {"core": 4000, "memory": 4000}
    }
    assert g.partial_cancel(a.jobid, ["/cluster/worker1"]) is True


def test_reservation_in_the_future_when_busy_now() -> None:
    g = Graph(pooled_cluster(nodes=1), partial_pools=True)
    g.match(slot_jobspec(4, 1000, 1000, duration=100))
    r = g.match(slot_jobspec(4, 1000, 1000, duration=100), "allocate_orelse_reserve")
    assert r.status == "reserved"
    assert r.at == 100


def test_update_allocate_replays_a_recorded_allocation() -> None:
    cluster = pooled_cluster(nodes=2)
    g = Graph(cluster, partial_pools=True)
    a = g.match(slot_jobspec(2, 1000, 512))
    fresh = Graph(cluster, partial_pools=True)
    replayed = fresh.update_allocate(a.jobid, a.R, duration=3600)
    assert replayed.by_node() == a.by_node()
    assert [u.used for u in fresh.usage()] == [u.used for u in g.usage()]


def test_update_allocate_is_reserved_when_it_starts_later_or_is_booked_as_one() -> None:
    cluster = pooled_cluster(nodes=2)
    a = Graph(cluster, partial_pools=True).match(slot_jobspec(2, 1000, 512))
    g = Graph(cluster, partial_pools=True)
    started = g.update_allocate(1, a.R, at=100, duration=60, now=100)
    later = g.update_allocate(2, a.R, at=200, duration=60, now=100)
    booked = g.update_allocate(3, a.R, at=300, duration=60, now=300, reserve=True)
    assert (started.status, later.status, booked.status) == ("allocated", "reserved", "reserved")
    assert [g.info(j).state for j in (1, 2, 3)] == ["ALLOCATED", "RESERVED", "RESERVED"]
    # Only the booked one is a reservation on the vertices.
    assert "worker" in g.find("jobid-alloc=2")
    assert "worker" not in g.find("jobid-reserved=2")
    assert "worker" in g.find("jobid-reserved=3")


def test_hold_takes_exactly_what_an_equivalent_update_allocate_takes() -> None:
    cluster = pooled_cluster(nodes=2)
    matched = Graph(cluster, partial_pools=True)
    a = matched.match(slot_jobspec(3, 1000, 512))
    ((node, amounts),) = a.by_node().items()
    assert amounts == {"core": 3000, "memory": 1536}
    other = "worker0" if node == "worker1" else "worker1"
    i, j = node[-1], other[-1]
    held = Graph(cluster, partial_pools=True)
    pools = {f"/cluster/{node}/core{i}": 3000, f"/cluster/{node}/memory{i}": 1536}
    held.hold(7, pools, duration=60)
    assert [u.used for u in held.usage()] == [u.used for u in matched.usage()]
    # What is left stays free to others, exactly as after the match.
    assert (
        held.match(slot_jobspec(2, 1000, 1)).by_node()
        == matched.match(slot_jobspec(2, 1000, 1)).by_node()
    )
    assert held.cancel(7)
    assert {u.path: u.used for u in held.usage() if u.used} in (
        {f"/cluster/{node}/core{i}": 2000, f"/cluster/{node}/memory{i}": 2},
        {f"/cluster/{other}/core{j}": 2000, f"/cluster/{other}/memory{j}": 2},
    )


def test_hold_refuses_what_is_not_free_or_not_there_and_changes_nothing() -> None:
    g = Graph(pooled_cluster(nodes=1), partial_pools=True)
    g.hold(1, {"/cluster/worker0/core0": 4000}, duration=60)
    before = [u.used for u in g.usage()]
    with pytest.raises(StateError, match="hold"):
        g.hold(2, {"/cluster/worker0/core0": 1, "/cluster/worker0/memory0": 1}, duration=60)
    with pytest.raises(NotFoundError):
        g.hold(2, {"/cluster/worker9/core9": 1}, duration=60)
    with pytest.raises(InputError, match="positive"):
        g.hold(2, {"/cluster/worker0/memory0": 0}, duration=60)
    with pytest.raises(InputError, match="nothing"):
        g.hold(2, {}, duration=60)
    with pytest.raises(StateError, match="in use"):
        g.hold(1, {"/cluster/worker0/memory0": 1}, duration=60)
    with pytest.raises(InputError, match="invalid time"):
        g.hold(2, {"/cluster/worker0/memory0": 1}, duration=0)
    assert [u.used for u in g.usage()] == before
    assert g.stat()["jobs"] == 1


def test_malformed_inputs_raise_typed_errors_and_change_nothing() -> None:
    g = Graph(pooled_cluster(nodes=1), partial_pools=True)
    with pytest.raises(InputError, match="jobspec"):
        g.match("version: 1\nresources: [{type: bogus, count: 1}]\ntasks: []\nattributes: {}\n")
    with pytest.raises(InputError):
        g.match("{{{")
    with pytest.raises(NotFoundError):
        g.cancel(42)
    spec = slot_jobspec(1, 100, 10)
    with pytest.raises(InputError, match="unknown match operation 'allocat'"):
        g.match(spec, "allocat")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unknown match format 'rv2'.*rv1_nosched"):
        g.match(spec, format="rv2")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unknown match format 'xml'"):
        Graph(pooled_cluster(nodes=1), match_format="xml")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unknown match format"):
        g.find("status=up", format="yaml")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="required key"):
        Graph({"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster"}}], "edges": []}})
    assert g.stat()["jobs"] == 0
    assert all(u.used == 0 for u in g.usage())


def test_concurrent_matches_never_over_commit() -> None:
    g = Graph(pooled_cluster(nodes=4), partial_pools=True)
    results: list[str] = []

    def worker() -> None:
        for _ in range(10):
            results.append(g.match(slot_jobspec(1, 1000, 100)).status)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("allocated") == 16
    assert all(u.used <= u.size for u in g.usage())


def test_graph_accepts_jgf_text_and_reports_its_size() -> None:
    g = Graph.from_jgf(json.dumps(pooled_cluster(nodes=3)))
    assert g.stat() == {"vertices": 10, "edges": 9, "jobs": 0}


def test_graph_reads_jgf_bytes_and_files_and_rejects_bad_utf8(tmp_path: Any) -> None:
    text = json.dumps(pooled_cluster(nodes=3))
    assert Graph(text.encode()).stat() == Graph(text).stat()
    path = tmp_path / "g.json"
    path.write_text(text)
    assert Graph.from_file(path).stat() == {"vertices": 10, "edges": 9, "jobs": 0}
    with pytest.raises(InputError, match="UTF-8"):
        Graph(b'{"graph": "\xff"}')


def test_allocation_vertices_are_described_on_demand_and_act_as_a_tuple() -> None:
    g = Graph(pooled_cluster(nodes=2), policy="first")
    a = g.match(slot_jobspec(1, 1000, 1024))
    assert len(a.vertices) == len(tuple(a.vertices)) > 0
    assert a.vertices[-1].type == "cluster"
    assert a.vertices == tuple(a.vertices)
    assert copy.deepcopy(a.vertices) == tuple(a.vertices)
    assert replace(a, status="busy").vertices == a.vertices
    assert g.match(slot_jobspec(1, 1000, 1024), "satisfiability").vertices == ()


def test_variation_policy_places_on_the_lowest_performance_class_first() -> None:
    from fluxion_nb import _core

    assert "variation" in _core.policies()
    g = Graph(pooled_cluster(nodes=3), policy="variation")
    assert g.policy == "variation"
    g.set_property("/cluster/worker0", "perf_class", "7")
    g.set_property("/cluster/worker1", "perf_class", "1")
    # worker2 has no class, which counts as the worst. The class ranks the
    # node vertices, so the request names the node level.
    node_first = {
        "version": 1,
        "resources": [
            {
                "type": "node",
                "count": 1,
                "with": [
                    {
                        "type": "slot",
                        "count": 1,
                        "label": "t",
                        "with": [{"type": "core", "count": 1}],
                    }
                ],
            }
        ],
        "tasks": [{"command": ["x"], "slot": "t", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 60}},
    }
    order = [next(iter(g.match(node_first).by_node())) for _ in range(3)]
    assert order == ["worker1", "worker0", "worker2"]


def test_a_service_graph_forgets_cancelled_jobs_and_resource_query_keeps_them() -> None:
    service = Graph(
        pooled_cluster(nodes=2, cpus_milli=8000), partial_pools=True, keep_canceled=False
    )
    kept = Graph(pooled_cluster(nodes=2, cpus_milli=8000), partial_pools=True)
    for g in (service, kept):
        split = g.match(slot_jobspec(8, 1000, 1000))
        whole = g.match(slot_jobspec(1, 1000, 1000), jobid=9)
        assert split.ok and whole.ok
        g.cancel(whole.jobid)
        assert g.partial_cancel(split.jobid, ["/cluster/worker0"]) is False
        assert g.partial_cancel(split.jobid, ["/cluster/worker1"]) is True
        assert all(u.used == 0 for u in g.usage())
    assert service.jobs() == [] and service.info(9) is None
    assert kept.info(9) is not None and kept.info(9).state == "CANCELED"
    assert len(kept.jobs()) == 2 and service.stat()["jobs"] == kept.stat()["jobs"] == 0
    # The id of a forgotten job may be used again.
    again = service.match(slot_jobspec(1, 1000, 1000), jobid=9)
    assert again.ok and again.jobid == 9


def test_job_ids_at_the_top_of_the_range_do_not_overflow_the_counter() -> None:
    g = Graph(pooled_cluster(nodes=1), partial_pools=True)
    top = 2**63 - 1
    held = g.match(slot_jobspec(1, 1000, 1000), jobid=top)
    assert held.ok and held.jobid == top
    nxt = g.match(slot_jobspec(1, 1000, 1000))  # the automatic id does not wrap around
    assert nxt.ok and 0 < nxt.jobid < top
    g.hold(top - 1, {"/cluster/worker0/core0": 1000}, duration=3600)
    with pytest.raises(StateError):
        g.match(slot_jobspec(1, 1000, 1000), jobid=top)
    with pytest.raises((OverflowError, TypeError, InputError)):
        g.match(slot_jobspec(1, 1000, 1000), jobid=2**63)


def _chain(depth: int) -> dict[str, Any]:
    """cluster -> rack -> rack -> ... -> node, ``depth`` vertices in one line."""
    verts: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    path = ""
    for i in range(depth):
        typ = "cluster" if i == 0 else "node" if i == depth - 1 else "rack"
        path += f"/{typ}{i}"
        md = {"type": typ, "basename": typ, "name": f"{typ}{i}", "id": i, "uniq_id": i}
        md |= {"rank": -1, "exclusive": False, "unit": "", "size": 1}
        verts.append({"id": str(i), "metadata": md | {"paths": {"containment": path}}})
        if i:
            edges.append({"source": str(i - 1), "target": str(i), "metadata": {}})
    return {"graph": {"nodes": verts, "edges": edges}}


def test_a_tree_too_deep_to_walk_is_refused_with_a_clear_error() -> None:
    assert Graph(_chain(1000)).stat()["vertices"] == 1000
    with pytest.raises(InputError, match="deeper than 1024 levels"):
        Graph(_chain(2500))


def test_a_match_made_at_a_later_time_allocates_there_and_reserves_after_held_jobs() -> None:
    g = Graph(pooled_cluster(nodes=1, cpus_milli=4000, memory_mib=8192), partial_pools=True)
    g.hold(1, {"/cluster/worker0/core0": 4000}, at=100, duration=50)  # held over [100, 150)
    now = g.match(slot_jobspec(4, 1000, 1000, duration=10), jobid=2, now=120)
    assert now.status == "busy"
    later = g.match(
        slot_jobspec(4, 1000, 1000, duration=10), "allocate_orelse_reserve", jobid=3, now=120
    )
    assert (later.status, later.at) == ("reserved", 150)
    # Before the hold begins there is room, for as long as it ends before the hold starts.
    early = g.match(slot_jobspec(4, 1000, 1000, duration=10), jobid=4, now=80)
    assert (early.status, early.at) == ("allocated", 80)
    assert {u.path: u.used for u in g.usage(at=85)}["/cluster/worker0/core0"] == 4000
    assert {u.path: u.used for u in g.usage(at=95)}["/cluster/worker0/core0"] == 0
    with pytest.raises(InputError, match="time span"):
        g.match(slot_jobspec(1, 1000, 1000), jobid=5, now=-1)


def test_a_request_without_duration_made_later_is_held_for_the_rest_of_the_span() -> None:
    g = Graph(pooled_cluster(nodes=1, cpus_milli=4000, memory_mib=8192), partial_pools=True)
    late = g.match(slot_jobspec(1, 1000, 1000, duration=0), jobid=1, now=500)
    assert (late.status, late.at) == ("allocated", 500)
    assert g.match(slot_jobspec(1, 1000, 1000, duration=0), "without_allocating", now=900).ok


def _fits_after(change: str) -> tuple[str, str]:
    """(status before, status after ``change``) of one request on a graph that remembers
    failed matches: the change lets it fit."""
    g = Graph(
        pooled_cluster(nodes=2, cpus_milli=4000, memory_mib=4096),
        partial_pools=True,
        remember_failures=True,
    )
    two = slot_jobspec(2, 4000, 1024)  # one whole node each
    if change in ("cancel", "partial_cancel"):
        assert g.match(slot_jobspec(1, 4000, 1024), jobid=1).ok
    elif change == "set_status":
        g.set_status("/cluster/worker1", False)
    elif change == "set_property":
        two = {**two, "attributes": {"system": {"constraints": {"properties": ["fast"]}}}}
        g.set_property("/cluster/worker0", "fast")
    elif change == "attach":
        g.remove("/cluster/worker1")
    first = g.match(two, jobid=7)
    again = g.match(two, jobid=8)
    # Answered from memory (the same timing), nothing having changed, under its own id.
    assert (again.status, again.overhead, again.jobid) == (first.status, first.overhead, 8)
    before = first.status
    if change == "cancel":
        g.cancel(1)
    elif change == "partial_cancel":
        g.partial_cancel(1, ["/cluster/worker0", "/cluster/worker1"])
    elif change == "set_status":
        g.set_status("/cluster/worker1", True)
    elif change == "set_property":
        g.set_property("/cluster/worker1", "fast")
    elif change == "attach":
        node = pooled_cluster(nodes=2, cpus_milli=4000, memory_mib=4096)["graph"]
        keep = {
            v["id"] for v in node["nodes"] if "worker1" not in v["metadata"]["paths"]["containment"]
        }
        vertices = [
            v for v in node["nodes"] if v["id"] not in keep or v["metadata"]["type"] == "cluster"
        ]
        ids = {v["id"] for v in vertices}
        edges = [e for e in node["edges"] if e["source"] in ids and e["target"] in ids]
        g.attach(json.dumps({"graph": {"nodes": vertices, "edges": edges}}))
    return before, g.match(two, jobid=9).status


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("cancel", ("busy", "allocated")),
        ("partial_cancel", ("busy", "allocated")),
        ("set_status", ("busy", "allocated")),
        ("set_property", ("busy", "allocated")),
        ("attach", ("busy", "allocated")),
    ],
)
def test_a_failed_match_is_remembered_only_until_the_graph_changes(
    change: str, expected: tuple[str, str]
) -> None:
    assert _fits_after(change) == expected
