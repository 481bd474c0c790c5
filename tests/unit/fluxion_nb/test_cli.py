"""fluxion-rq speaks like resource-query where flux-sched's tests compare its words."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from fluxion_nb import Graph, cli
from fluxion_nb.errors import InputError, UnknownTypeError
from fluxion_nb.examples import pooled_cluster, slot_jobspec
from tests.conformance.replay import fixtures_dir
from tests.support.shared_data import require
from tests.unit.fluxion_nb.test_reservation_timing import per_core_graph

_BAR = "INFO: ============================="


def _run(tmp_path: Path, cmds: str, nodes: int = 1) -> tuple[str, str]:
    return _rq(tmp_path, pooled_cluster(nodes=nodes), cmds)


def test_get_property_without_properties_names_the_vertex(tmp_path: Path) -> None:
    out, _ = _run(tmp_path, "get-property /cluster/worker0\n")
    assert out == "No properties were found for /cluster/worker0 (vtx's uniq_id=1).\n"


def test_attach_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    second_root = tmp_path / "other.json"
    second_root.write_text(
        json.dumps(
            {
                "graph": {
                    "nodes": [
                        {
                            "id": "0",
                            "metadata": {"type": "cluster", "paths": {"containment": "/x0"}},
                        }
                    ],
                    "edges": [],
                }
            }
        )
    )
    _, err = _run(
        tmp_path,
        f"attach {missing} extra\nattach {missing}\nattach {second_root}\nfind status=up\n",
    )
    assert err == (
        "ERROR: malformed command\n"
        f"ERROR: can't open {missing}\n"
        "ERROR: can't attach JGF subgraph \n"
        "ERROR: add_subgraph: ERROR: add subgraph error: Invalid argument\n"
        "add_subgraph: ERROR: reader returned error: add_graph_metadata: failed to add root "
        "metadata for containment subsystem. Possible duplicate root.\n\n\n"
    )


def test_set_status_changes_the_vertex_alone_as_resource_query_does(tmp_path: Path) -> None:
    """A node marked down on its own stays down when the cluster above it comes back up;
    the cluster going down leaves its descendants' own status as it was."""
    out, err = _run(
        tmp_path,
        "set-status /cluster/worker0 down\n"
        "set-status /cluster down\n"
        "get-status /cluster\n"
        "set-status /cluster up\n"
        "get-status /cluster\n"
        "get-status /cluster/worker0\n"
        "set-status /cluster/worker0 up\n"
        "set-status /cluster down\n"
        "get-status /cluster/worker0\n",
    )
    assert err == ""
    assert out == (
        "/cluster is down\n/cluster is up\n/cluster/worker0 is down\n/cluster/worker0 is up\n"
    )


def test_update_numbers_jobs_and_names_its_mode_as_resource_query_does(tmp_path: Path) -> None:
    """The mode follows the start time, a failed replay prints the no-match block, and the
    next match takes the updated id plus one, even below ids already used."""
    js = tmp_path / "js.json"
    js.write_text(json.dumps(slot_jobspec(1, 1, 1, duration=3600)))
    # R of the node a third match takes, once two jobs hold the first two.
    g = Graph(pooled_cluster(nodes=4), match_format="jgf")
    for _ in range(2):
        g.match(js.read_text())
    r = tmp_path / "r.json"
    r.write_text(g.match(js.read_text()).R)
    out, err = _run(
        tmp_path,
        f"match allocate {js}\n"
        f"match allocate {js}\n"
        f"update allocate jgf {r} 10 100 3600\n"
        f"match allocate {js}\n"
        f"update reserve jgf {r} 5 0 3600\n"
        f"match allocate {js}\n"
        f"update allocate jgf {r} 10 0 3600\n"
        f"update allocate jgf {r} 12 0 0\n",
        nodes=4,
    )
    infos = [line for line in out.splitlines() if line.startswith("INFO: ") and "===" not in line]
    assert infos == [
        "INFO: JOBID=1",
        "INFO: RESOURCES=ALLOCATED",
        "INFO: SCHEDULED AT=Now",
        "INFO: JOBID=2",
        "INFO: RESOURCES=ALLOCATED",
        "INFO: SCHEDULED AT=Now",
        # `update allocate` starting later is a reservation.
        "INFO: JOBID=10",
        "INFO: RESOURCES=RESERVED",
        "INFO: SCHEDULED AT=100",
        "INFO: JOBID=11",
        "INFO: RESOURCES=ALLOCATED",
        "INFO: SCHEDULED AT=Now",
        # The node is reserved from 100 on: the replay fails, and still numbers.
        "INFO: No matching resources found",
        "INFO: JOBID=5",
        "INFO: No matching resources found",
        "INFO: JOBID=6",
    ]
    assert err.count("ERROR: traverser run () returned error") == 1
    assert "ERROR: existing Jobid" in err
    assert "ERROR: invalid time (0, 0)" in err


def ranked_cluster(
    hosts: tuple[str, ...] = ("node0", "node1"), cores: int = 16, gpus: int = 4
) -> dict:
    """The graph flux-sched builds from an rv1exec R such as its tiny_rv1exec.json, as JGF:
    cluster0, one node per host at rank = position, single cores and gpus under it, so
    that an rv1exec R names its vertices."""
    nodes: list[dict] = []
    edges: list[dict] = []

    def vertex(type_: str, name: str, idx: int, rank: int, path: str) -> str:
        key = str(len(nodes))
        meta = {"type": type_, "name": name, "id": idx, "rank": rank, "size": 1}
        nodes.append({"id": key, "metadata": {**meta, "paths": {"containment": path}}})
        return key

    root = vertex("cluster", "cluster0", 0, -1, "/cluster0")
    for rank, host in enumerate(hosts):
        digits = host[len(host.rstrip("0123456789")) :]
        node = vertex("node", host, int(digits) if digits else -1, rank, f"/cluster0/{host}")
        edges.append({"source": root, "target": node})
        for kind, count in (("core", cores), ("gpu", gpus)):
            for i in range(count):
                child = vertex(kind, f"{kind}{i}", i, rank, f"/cluster0/{host}/{kind}{i}")
                edges.append({"source": node, "target": child})
    return {"graph": {"nodes": nodes, "edges": edges}}


def _rq(tmp_path: Path, graph: dict, cmds: str, *options: str) -> tuple[str, str]:
    """fluxion-rq on ``graph`` with ``cmds`` on stdin: its -t output and its stderr."""
    gpath = tmp_path / "graph.json"
    gpath.write_text(json.dumps(graph))
    out = tmp_path / "rq.out"
    err = io.StringIO()
    old = sys.stdin
    sys.stdin = io.StringIO(cmds)
    try:
        with contextlib.redirect_stderr(err):
            argv = ["-L", str(gpath), "-f", "jgf", "-d", "-t", str(out), *options]
            assert cli.main(argv) == 0
    finally:
        sys.stdin = old
    return out.read_text(), err.getvalue()


def _rv1exec(entries: list[tuple[str, dict[str, str]]], nodelist: list[str]) -> str:
    r_lite = [{"rank": rank, "children": children} for rank, children in entries]
    execution = {"R_lite": r_lite, "nodelist": nodelist, "starttime": 0, "expiration": 1000000}
    return json.dumps({"version": 1, "execution": execution})


_CORE_ON_A_NODE = {
    "version": 9999,
    "resources": [
        {
            "type": "node",
            "count": 1,
            "with": [
                {
                    "type": "slot",
                    "count": 1,
                    "label": "default",
                    "with": [{"type": "core", "count": 1}, {"type": "gpu", "count": 1}],
                }
            ],
        }
    ],
    "attributes": {"system": {"duration": 3600}},
    "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}],
}


def test_update_rv1exec_replays_what_match_wrote_as_resource_query_does(tmp_path: Path) -> None:
    """flux-sched t3022 #12/#13: four matches written rv1_nosched, each R replayed with
    `update allocate rv1exec` on a fresh graph, give the same output byte for byte."""
    js = tmp_path / "js.json"
    js.write_text(json.dumps(_CORE_ON_A_NODE))
    graph = ranked_cluster()
    opts = ("-P", "high", "-F", "rv1_nosched")
    matched, _ = _rq(tmp_path, graph, f"match allocate {js}\n" * 4 + "quit\n", *opts)
    rs = [line for line in matched.splitlines() if not line.startswith("INFO")]
    assert len(rs) == 4
    cmds = ""
    for jobid, r in enumerate(rs, start=1):
        path = tmp_path / f"r{jobid}.json"
        path.write_text(r + "\n")
        cmds += f"update allocate rv1exec {path} {jobid} 0 3600\n"
    updated, err = _rq(tmp_path, graph, cmds + "quit\n", *opts)
    assert err == ""
    assert updated == matched
    # A fifth match finds the graph as the four matches left it: node1's gpus are taken.
    after_matches, _ = _rq(tmp_path, graph, f"match allocate {js}\n" * 5 + "quit\n", *opts)
    after_updates, _ = _rq(tmp_path, graph, cmds + f"match allocate {js}\nquit\n", *opts)
    fifth = after_updates.splitlines()[-6]
    assert fifth == after_matches.splitlines()[-6]
    assert json.loads(fifth)["execution"]["R_lite"] == [
        {"rank": "0", "children": {"core": "15", "gpu": "3"}}
    ]


def test_update_rv1exec_rolls_back_a_failed_update_as_resource_query_does(tmp_path: Path) -> None:
    """flux-sched t3022 #16, compared with its expected output: an R naming a child the
    node lacks (asic0) fails and holds nothing, so the next two fill both nodes."""
    fx = require(fixtures_dir() / "data" / "resource", "flux-sched's fixtures", "FLUXION_FIXTURES")
    jobs = fx / "jobspecs" / "update"
    out, err = _rq(
        tmp_path,
        ranked_cluster(),
        f"update allocate rv1exec {jobs / 'test012.json'} 1 0 3600\n"
        f"update allocate rv1exec {jobs / 'test013.json'} 2 0 3600\n"
        f"update allocate rv1exec {jobs / 'test014.json'} 3 0 3600\n"
        "find sched-now=free\nquit\n",
        "-P",
        "high",
    )
    assert out == (fx / "expected" / "update" / "016.R.out").read_text()
    assert err.startswith("ERROR: traverser run () returned error \nERROR: ")
    assert "asic0" in err


def test_update_rv1exec_prints_and_numbers_as_the_jgf_update_does(tmp_path: Path) -> None:
    """Reserved at a later start, refused for what the graph lacks or another job holds:
    the no-match block, the error on stderr, nothing held, and the next id follows."""
    part = tmp_path / "part.json"
    part.write_text(_rv1exec([("0", {"core": "0-1"})], ["node0"]))
    missing_rank = tmp_path / "rank.json"
    missing_rank.write_text(_rv1exec([("0", {"core": "2"}), ("5", {"core": "0"})], ["node[0,5]"]))
    wrong_host = tmp_path / "host.json"
    wrong_host.write_text(_rv1exec([("0", {"core": "2"})], ["node1"]))
    missing_core = tmp_path / "core.json"
    missing_core.write_text(_rv1exec([("1", {"core": "15-16"})], ["node1"]))
    rest = tmp_path / "rest.json"
    rest.write_text(_rv1exec([("0", {"core": "2-15", "gpu": "0-3"})], ["node0"]))
    out, err = _rq(
        tmp_path,
        ranked_cluster(),
        f"update reserve rv1exec {part} 7 100 3600\n"
        f"update allocate rv1exec {missing_rank} 8 0 3600\n"
        f"update allocate rv1exec {wrong_host} 9 0 3600\n"
        f"update allocate rv1exec {missing_core} 10 0 3600\n"
        f"update allocate rv1exec {part} 11 50 3600\n"
        f"update allocate rv1exec {rest} 12 0 3600\n"
        "find sched-now=allocated\nquit\n",
        "-F",
        "rv1_nosched",
    )
    blocks = [b for b in out.split(f"{_BAR}\n") if b]
    reserved = json.loads(blocks[0])
    assert reserved["execution"]["starttime"] == 100
    assert reserved["execution"]["expiration"] == 3700
    assert reserved["execution"]["R_lite"] == [{"rank": "0", "children": {"core": "0-1"}}]
    assert blocks[1] == "INFO: JOBID=7\nINFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=100\n"
    for i, jobid in enumerate((8, 9, 10, 11), start=2):
        assert blocks[i] == f"INFO: No matching resources found\nINFO: JOBID={jobid}\n"
    assert blocks[7] == "INFO: JOBID=12\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n"
    assert err.count("ERROR: traverser run () returned error") == 4
    assert "node5" in err and "core16" in err
    # sched-now=allocated: every vertex holding an allocation, whatever its start: job
    # 12's and job 7's (an update records an allocation, even from 100 on); the refused
    # ones left nothing.
    held = json.loads(blocks[8])["execution"]["R_lite"]
    assert held == [{"rank": "0", "children": {"core": "0-15", "gpu": "0-3"}}]


def test_update_rv1exec_on_a_pooled_graph_fails_as_resource_query_does(tmp_path: Path) -> None:
    """A Kubernetes-shaped node (one core pool of N units) has no single core an rv1exec R
    can name: flux-sched looks children up as size-1 vertices."""
    graph = pooled_cluster(nodes=1)
    for v in graph["graph"]["nodes"][1:]:  # everything under the root: rank 0
        v["metadata"]["rank"] = 0
    node = next(n for n in graph["graph"]["nodes"] if n["metadata"]["type"] == "node")
    r = tmp_path / "r.json"
    r.write_text(_rv1exec([("0", {"core": "0"})], [node["metadata"]["name"]]))
    js = tmp_path / "js.json"
    js.write_text(json.dumps(slot_jobspec(1, 1, 1, duration=3600)))
    out, err = _rq(tmp_path, graph, f"update allocate rv1exec {r} 3 0 3600\nmatch allocate {js}\n")
    assert out.startswith(f"{_BAR}\nINFO: No matching resources found\nINFO: JOBID=3\n{_BAR}\n")
    assert "INFO: JOBID=4\nINFO: RESOURCES=ALLOCATED" in out
    assert "ERROR: traverser run () returned error" in err
    assert "pool of 4000 units" in err


def test_update_reserve_records_an_allocation_whose_state_follows_its_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """resource-query's update walk always records an allocation on the vertices (its
    sub-command is only checked), and the job is ALLOCATED when it starts at 0, else
    RESERVED, which partial cancel refuses."""
    graph = ranked_cluster()
    r = tmp_path / "r.json"
    r.write_text(Graph(graph, match_format="jgf").match(_CORE_ON_A_NODE).R)
    out, err = _rq(
        tmp_path,
        graph,
        f"update reserve jgf {r} 5 0 3600\n"
        "find jobid-alloc=5\n"
        "find jobid-reserved=5\n"
        f"update allocate jgf {r} 7 4000 3600\n"
        "find sched-future=reserved\n"
        "info 5\n"
        "info 7\n"
        f"partial-cancel 7 jgf {r}\n"
        "quit\n",
    )
    assert "INFO: JOBID=5\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now" in out
    assert "INFO: JOBID=7\nINFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=4000" in out
    alloc = out.split('EXPRESSION="jobid-alloc=5"')[0].rsplit("SCHEDULED AT=Now", 1)[1]
    assert "core15[1:x]" in alloc and "node1[1:x]" in alloc
    # Nothing is a reservation: neither job's vertices, nor anything in the future.
    for expr in ("jobid-reserved=5", "sched-future=reserved"):
        found = out.split(f'EXPRESSION="{expr}"')[0].rsplit(_BAR, 2)
        assert found[-2].strip() == "", (expr, found[-2])
    info = capsys.readouterr().out
    assert "INFO: 5, ALLOCATED, 0," in info
    assert "INFO: 7, RESERVED, 4000," in info
    assert "ERROR: reservations not currently supported by partial cancel" in err


def test_update_under_a_node_exclusive_policy_takes_the_node_whole(tmp_path: Path) -> None:
    """Under lonodex, resource-query's update walk takes each node R reaches whole: its
    R names every core and gpu of node1, the next node-exclusive match goes to node0, a
    third finds nothing, and after the cancel node1 is free again. Under a policy that
    is not node-exclusive only the core and gpu R names are held."""
    graph = ranked_cluster()
    r = tmp_path / "r.json"
    r.write_text(Graph(graph, match_format="jgf").match(_CORE_ON_A_NODE).R)
    js = tmp_path / "js.json"
    js.write_text(json.dumps(_CORE_ON_A_NODE))
    cmds = (
        f"update allocate jgf {r} 1 0 3600\n"
        f"match allocate {js}\n"
        f"match allocate {js}\n"
        "cancel 1\n"
        f"match allocate {js}\n"
        "quit\n"
    )
    out, _ = _rq(tmp_path, graph, cmds, "-P", "lonodex")
    first = out.split("INFO: JOBID=1")[0]
    assert first.count("core") == 16 and first.count("gpu") == 4
    assert "node1[1:x]" in first
    assert [line for line in out.splitlines() if "node" in line or "JOBID" in line] == [
        "      ------node1[1:x]",
        "INFO: JOBID=1",
        "      ------node0[1:x]",
        "INFO: JOBID=2",
        "INFO: JOBID=3",
        "      ------node1[1:x]",
        "INFO: JOBID=4",
    ]
    assert out.count("No matching resources found") == 1
    out, _ = _rq(tmp_path, graph, cmds, "-P", "low")
    first = out.split("INFO: JOBID=1")[0]
    assert first.count("core") == 1 and first.count("gpu") == 1
    assert "No matching resources found" not in out


def test_a_slot_under_a_node_whose_cores_sit_in_sockets_matches_nothing(tmp_path: Path) -> None:
    """As in resource-query: node -> slot -> core(2) with sockets between node and cores
    finds the slot in a socket, but the selection marks only the socket's core edges, so
    the update walk stops at the node and nothing is allocated. With the socket named,
    or the slot at the top, the same cores are allocated."""
    shapes = {
        "node-slot": [{"type": "node", "count": 1, "with": ["SLOT"]}],
        "node-socket-slot": [
            {"type": "node", "count": 1, "with": [{"type": "socket", "count": 1, "with": ["SLOT"]}]}
        ],
        "slot": ["SLOT"],
    }
    slot = {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 2}]}
    outs = {}
    for name, shape in shapes.items():
        text = json.dumps(shape).replace('"SLOT"', json.dumps(slot))
        js = tmp_path / f"{name}.json"
        js.write_text(
            json.dumps(
                {
                    "version": 9999,
                    "resources": json.loads(text),
                    "attributes": {"system": {"duration": 3600}},
                    "tasks": [{"command": ["x"], "slot": "t", "count": {"per_slot": 1}}],
                }
            )
        )
        outs[name], _ = _rq(tmp_path, per_core_graph(1, 8, 2), f"match allocate {js}\nquit\n")
    assert "INFO: No matching resources found" in outs["node-slot"]
    assert "Unsatisfiable" not in outs["node-slot"]
    for name in ("node-socket-slot", "slot"):
        assert "INFO: RESOURCES=ALLOCATED" in outs[name], name
        assert outs[name].count("[1:x]") == 2, name


def test_a_type_the_graph_lacks_matches_nothing_as_resource_query_answers(tmp_path: Path) -> None:
    """A type Fluxion knows (ssd is built in) that the graph lacks is read, and the walk
    finds none of it: busy for an allocation now, unsatisfiable where the operation asks
    about any time, and a failed allocation still takes its job id. A type it does not
    know (switch) is a jobspec error: no id taken, and satisfiability says "Satisfiable".
    The library refuses the latter with a typed error (an InputError)."""
    ops = ["allocate", "allocate_with_satisfiability", "satisfiability"]
    ops += ["allocate_orelse_reserve", "without_allocating", "without_allocating_future"]
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(_CORE_ON_A_NODE))
    docs = {}
    for kind in ("ssd", "switch"):
        doc = json.loads(json.dumps(_CORE_ON_A_NODE))
        doc["resources"] = [{"type": kind, "count": 1, "with": doc["resources"]}]
        docs[kind] = doc
        (tmp_path / f"{kind}.json").write_text(json.dumps(doc))
    outs = {}
    for kind in docs:
        js = tmp_path / f"{kind}.json"
        cmds = "".join(f"match {op} {js}\n" for op in ops) + f"match allocate {ok}\nquit\n"
        outs[kind], _ = _rq(tmp_path, ranked_cluster(), cmds)
    blocks = [b for b in outs["ssd"].split(f"{_BAR}\n") if b and not b.startswith("      -")]
    assert blocks[:6] == [
        "INFO: No matching resources found\nINFO: JOBID=1\n",
        "INFO: No matching resources found\nINFO: Unsatisfiable request\nINFO: JOBID=2\n",
        "INFO: Unsatisfiable request\n",
        "INFO: No matching resources found\nINFO: Unsatisfiable request\nINFO: JOBID=3\n",
        "INFO: No matching resources found\nINFO: JOBID=4\n",
        "INFO: No matching resources found\nINFO: Unsatisfiable request\nINFO: JOBID=4\n",
    ]
    assert "INFO: JOBID=4\nINFO: RESOURCES=ALLOCATED" in outs["ssd"]
    blocks = [b for b in outs["switch"].split(f"{_BAR}\n") if b and not b.startswith("      -")]
    refused = "INFO: No matching resources found\nINFO: JOBID=1\n"
    assert blocks[:6] == [refused, refused, "INFO: Satisfiable request\n"] + [refused] * 3
    assert "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED" in outs["switch"]
    with pytest.raises(UnknownTypeError, match="'switch' is not a resource type known") as caught:
        Graph(ranked_cluster()).match(docs["switch"])
    assert isinstance(caught.value, InputError)
