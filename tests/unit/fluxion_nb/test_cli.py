"""fluxion-rq speaks like resource-query where flux-sched's tests compare its words."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from fluxion_nb import Graph, cli
from fluxion_nb.examples import pooled_cluster, slot_jobspec


def _run(tmp_path: Path, cmds: str, nodes: int = 1) -> tuple[str, str]:
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(pooled_cluster(nodes=nodes)))
    out = tmp_path / "out"
    err = io.StringIO()
    old = sys.stdin
    sys.stdin = io.StringIO(cmds)
    try:
        with contextlib.redirect_stderr(err):
            assert cli.main(["-L", str(gpath), "-f", "jgf", "-d", "-t", str(out)]) == 0
    finally:
        sys.stdin = old
    return out.read_text(), err.getvalue()


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
