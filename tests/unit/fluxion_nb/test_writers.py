"""R writers as flux-sched's match writers: rv1's properties map and R_lite's entry order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluxion_nb import Graph


def cluster(nodes: list[tuple[dict[str, str], list[int]]]) -> dict[str, Any]:
    """cluster -> node<i> (rank i, its properties) -> one core vertex per listed core id."""
    verts: list[dict[str, Any]] = []
    edges: list[dict[str, str]] = []

    def vtx(typ: str, name: str, idx: int, path: str, rank: int, props: dict[str, str]) -> str:
        uid = str(len(verts))
        md = {"type": typ, "name": name, "id": idx, "uniq_id": int(uid), "rank": rank}
        verts.append({"id": uid, "metadata": {**md, "paths": {"containment": path}}})
        if props:
            verts[-1]["metadata"]["properties"] = props
        return uid

    root = vtx("cluster", "cluster0", 0, "/cluster0", -1, {})
    for rank, (props, cores) in enumerate(nodes):
        path = f"/cluster0/node{rank}"
        node = vtx("node", f"node{rank}", rank, path, rank, props)
        edges.append({"source": root, "target": node})
        for c in cores:
            core = vtx("core", f"core{c}", c, f"{path}/core{c}", rank, {})
            edges.append({"source": node, "target": core})
    return {"graph": {"nodes": verts, "edges": edges}}


def cores(n: int) -> dict[str, Any]:
    """``n`` slots of one core each."""
    return {
        "version": 1,
        "resources": [
            {"type": "slot", "count": n, "label": "s", "with": [{"type": "core", "count": 1}]}
        ],
        "tasks": [{"command": ["x"], "slot": "s", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 60}},
    }


def test_rv1_lists_the_ranks_of_each_property_of_the_matched_nodes() -> None:
    g = Graph(
        cluster(
            [
                ({"zone-a": "", "virtual": "false"}, [0, 1]),
                ({"virtual": "false"}, [0, 1]),
                ({"zone-b": ""}, [0, 1]),
            ]
        ),
        policy="first",
        match_format="rv1_nosched",
    )
    r = json.loads(g.match(cores(6)).R)
    execution = r["execution"]
    # After the node list, before the times, as flux-sched packs it.
    assert list(execution) == ["R_lite", "nodelist", "properties", "starttime", "expiration"]
    assert execution["properties"] == {"virtual=false": "0-1", "zone-a": "0", "zone-b": "2"}


def test_rv1_has_no_properties_key_when_no_matched_node_has_one() -> None:
    g = Graph(cluster([({}, [0, 1])]), policy="first", match_format="rv1")
    execution = json.loads(g.match(cores(1)).R)["execution"]
    assert "properties" not in execution
    assert list(execution) == ["R_lite", "nodelist", "starttime", "expiration"]


@pytest.mark.parametrize("first", [0, 1])
def test_r_lite_entries_come_in_the_order_of_their_children_text(first: int) -> None:
    # One node gives core 0, the other cores 2-3: whichever the walk emits first,
    # the entry whose children read {"core": "0"} is written first.
    nodes: list[tuple[dict[str, str], list[int]]] = [({}, [2, 3]), ({}, [2, 3])]
    nodes[first] = ({}, [0])
    g = Graph(cluster(nodes), policy="first", match_format="rlite")
    r = json.loads(g.match(cores(3)).R)
    assert r == [
        {"rank": str(first), "children": {"core": "0"}},
        {"rank": str(1 - first), "children": {"core": "2-3"}},
    ]
