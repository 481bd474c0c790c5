"""fluxion-rq speaks like resource-query where flux-sched's tests compare its words."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from fluxion_nb import cli
from fluxion_nb.examples import pooled_cluster


def _run(tmp_path: Path, cmds: str) -> tuple[str, str]:
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(pooled_cluster(nodes=1)))
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
