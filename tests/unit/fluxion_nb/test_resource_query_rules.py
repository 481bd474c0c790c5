"""fluxion-rq against rules of resource-query read from flux-sched's source.

Which types a jobspec may name and what a refused jobspec costs (libjobspec's
``Resource``, reapi_cli's ``match_allocate``); properties as quoted strings
(libjobspec's ``PropertyConstraint``); what the rv1 writers print when R_lite
records nothing (``match_writers.cpp``); reservations at the end of the graph
(vertex planners over 0..INT64_MAX, ``dfu_traverser_t::run``); host lists
(flux-core's libhostlist).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fluxion_nb import Graph
from tests.unit.fluxion_nb.test_cli import _rq

_BAR = "INFO: ============================="
_END = 3153600000


def _four_nodes(properties: dict[int, dict[str, str]] | None = None) -> dict[str, Any]:
    """cluster0 -> node0..3 (ranks 0..3) -> core0, core1 and memory0 (size 8)."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, str]] = []

    def vertex(type_: str, name: str, idx: int, rank: int, path: str, size: int = 1) -> str:
        key = str(len(nodes))
        meta: dict[str, Any] = {"type": type_, "name": name, "id": idx, "rank": rank, "size": size}
        if type_ == "node" and properties and idx in properties:
            meta["properties"] = properties[idx]
        nodes.append({"id": key, "metadata": {**meta, "paths": {"containment": path}}})
        return key

    root = vertex("cluster", "cluster0", 0, -1, "/cluster0")
    for n in range(4):
        path = f"/cluster0/node{n}"
        node = vertex("node", f"node{n}", n, n, path)
        edges.append({"source": root, "target": node})
        for c in range(2):
            edges.append(
                {"source": node, "target": vertex("core", f"core{c}", c, n, f"{path}/core{c}")}
            )
        edges.append(
            {"source": node, "target": vertex("memory", "memory0", 0, n, f"{path}/memory0", 8)}
        )
    return {"graph": {"nodes": nodes, "edges": edges}}


def _slot(type_: str, count: int = 1, *, slots: int = 1, duration: int = 60) -> dict[str, Any]:
    return {
        "version": 1,
        "resources": [
            {
                "type": "slot",
                "count": slots,
                "label": "t",
                "with": [{"type": type_, "count": count}],
            }
        ],
        "tasks": [{"command": ["x"], "slot": "t", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": duration}},
    }


def _write(tmp_path: Path, name: str, doc: dict[str, Any] | str) -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _failed(jobid: int, *, unsatisfiable: bool = False) -> str:
    why = "INFO: Unsatisfiable request\n" if unsatisfiable else ""
    return f"{_BAR}\nINFO: No matching resources found\n{why}INFO: JOBID={jobid}\n{_BAR}\n"


def _placed(jobid: int, mode: str = "ALLOCATED", at: str = "Now") -> str:
    return f"{_BAR}\nINFO: JOBID={jobid}\nINFO: RESOURCES={mode}\nINFO: SCHEDULED AT={at}\n{_BAR}\n"


def _library_rs(graph: dict[str, Any], jobspecs: list[dict[str, Any]], fmt: str) -> list[str]:
    """The R of each jobspec allocated in turn through the library (which matches
    as fluxion-rq does and carries nothing from one R to the next)."""
    g = Graph(graph, match_format=fmt)  # type: ignore[arg-type]
    return [g.match(js).R for js in jobspecs]


def test_a_type_known_to_no_one_is_a_jobspec_error_that_takes_no_job_id(tmp_path: Path) -> None:
    """nic is neither in the graph, built in, nor in a prune filter: the reader refuses
    it, the counter stays. ssd is built in: it is read, matches nothing (busy) and the
    failed allocation takes its id."""
    nic = _write(tmp_path, "nic.json", _slot("nic"))
    ssd = _write(tmp_path, "ssd.json", _slot("ssd"))
    core = _write(tmp_path, "core.json", _slot("core"))
    cmds = f"match allocate {nic}\nmatch allocate {ssd}\nmatch allocate {core}\n"
    cmds += f"match satisfiability {nic}\nmatch allocate_orelse_reserve {nic}\n"
    cmds += f"match allocate {core}\nquit\n"
    out, err = _rq(tmp_path, _four_nodes(), cmds)
    first, second = _library_rs(_four_nodes(), [_slot("core"), _slot("core")], "simple")
    assert out == (
        _failed(1)
        + _failed(1)
        + first
        + _placed(2)
        + f"{_BAR}\nINFO: Satisfiable request\n{_BAR}\n"
        + _failed(3)
        + second
        + _placed(3)
    )
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert lines[0].startswith("match_allocate: ERROR: Jobspec error for 1: ")
    assert "'nic' is not a resource type known to fluxion" in lines[0]
    assert lines[2].startswith("match_allocate: ERROR: Jobspec error for 3: ")


def test_a_prune_filter_makes_its_types_known(tmp_path: Path) -> None:
    nic = _write(tmp_path, "nic.json", _slot("nic"))
    cmds = f"match allocate {nic}\nmatch allocate {nic}\nquit\n"
    out, err = _rq(tmp_path, _four_nodes(), cmds, "-p", "ALL:core,ALL:nic")
    assert (out, err) == (_failed(1) + _failed(2), "")


_PROPERTY_YAML = """version: 1
resources:
  - type: slot
    count: 1
    label: t
    with:
      - type: core
        count: 1
tasks:
  - command: [x]
    slot: t
    count:
      per_slot: 1
attributes:
  system:
    duration: 60
    constraints:
      properties: {props}
"""


def test_a_property_must_be_a_quoted_string(tmp_path: Path) -> None:
    """A plain YAML scalar is "non-string property specified", a jobspec error that
    takes no id; quoted (or JSON) it matches."""
    plain = _write(tmp_path, "plain.yaml", _PROPERTY_YAML.format(props="[fast]"))
    block = _write(tmp_path, "block.yaml", _PROPERTY_YAML.format(props="\n        - fast"))
    quoted = _write(tmp_path, "quoted.yaml", _PROPERTY_YAML.format(props='["fast"]'))
    single = _write(tmp_path, "single.yaml", _PROPERTY_YAML.format(props="\n        - 'fast'"))
    doc = _slot("core")
    doc["attributes"]["system"]["constraints"] = {"properties": ["fast"]}
    as_json = _write(tmp_path, "fast.json", doc)
    cmds = "".join(f"match allocate {p}\n" for p in (plain, block, quoted, single, as_json))
    graph = _four_nodes({2: {"fast": ""}, 3: {"fast": ""}})
    out, err = _rq(tmp_path, graph, cmds + "quit\n")
    rs = _library_rs(graph, [doc] * 3, "simple")
    assert out == (
        _failed(1) + _failed(1) + rs[0] + _placed(1) + rs[1] + _placed(2) + rs[2] + _placed(3)
    )
    assert (
        len({line.split("---")[-1] for r in rs for line in r.splitlines() if "node" in line}) == 2
    )
    lines = err.splitlines()
    assert [line.split(": ", 3)[2] for line in lines] == ["Jobspec error for 1"] * 2
    assert all("non-string property specified" in line for line in lines), err


def test_rv1_writers_print_nothing_when_r_lite_records_nothing(tmp_path: Path) -> None:
    """Memory alone (with its node and the cluster), or a find of a node alone: no R
    at all, only the INFO blocks."""
    mem = _write(tmp_path, "mem.json", _slot("memory", 4))
    for fmt in ("rv1_nosched", "rv1"):
        cmds = f"match allocate {mem}\nfind jobid-alloc=1\nfind names=node0\nquit\n"
        out, err = _rq(tmp_path, _four_nodes(), cmds, "-F", fmt)
        exprs = ("jobid-alloc=1", "names=node0")
        found = "".join(f'{_BAR}\nINFO: EXPRESSION="{e}"\n{_BAR}\n' for e in exprs)
        assert out == _placed(1) + found, fmt
        assert err == ""


def _insert_after(text: str, marker: str, extra: str) -> str:
    at = text.index(marker) + len(marker)
    return text[:at] + extra + ", " + text[at:]


def test_rv1_puts_an_unprinted_scheduling_graph_before_the_next_r(tmp_path: Path) -> None:
    """Job 1 (memory only) prints no R; its vertices and edges open job 2's
    scheduling graph, ahead of job 2's own. Job 3's R is its own again."""
    mem = _write(tmp_path, "mem.json", _slot("memory", 4))
    core = _write(tmp_path, "core.json", _slot("core"))
    cmds = f"match allocate {mem}\nmatch allocate {core}\nmatch allocate {core}\nquit\n"
    out, _ = _rq(tmp_path, _four_nodes(), cmds, "-F", "rv1")
    # The same matches through the library, which carries nothing over.
    g = Graph(_four_nodes(), match_format="rv1")
    job1 = json.loads(g.match(_slot("memory", 4), format="jgf").R)["graph"]
    job2 = g.match(_slot("core")).R
    job3 = g.match(_slot("core")).R
    nodes = ", ".join(json.dumps(n, separators=(", ", ": ")) for n in job1["nodes"])
    edges = ", ".join(json.dumps(e, separators=(", ", ": ")) for e in job1["edges"])
    assert len(job1["nodes"]) == 3
    assert len(job1["edges"]) == 2
    carried = _insert_after(_insert_after(job2, '"graph": {"nodes": [', nodes), '"edges": [', edges)
    assert out == _placed(1) + carried + _placed(2) + job3 + _placed(3)


def test_a_reservation_may_run_past_the_graph_end_cut_to_it(tmp_path: Path) -> None:
    """All eight cores for 100 s; then one core for the whole span (duration 0) fits
    from 100, its end cut to the graph's."""
    eight = _write(tmp_path, "eight.json", _slot("core", slots=8, duration=100))
    one = _write(tmp_path, "one.json", _slot("core", duration=0))
    cmds = f"match allocate {eight}\nmatch without_allocating_future {one}\n"
    cmds += f"match allocate_orelse_reserve {one}\nquit\n"
    out, err = _rq(tmp_path, _four_nodes(), cmds, "-F", "rv1_nosched")
    # At 100 the graph is as free as a fresh one at 0: the same core, from 100 to the end.
    (fresh,) = _library_rs(_four_nodes(), [_slot("core", duration=0)], "rv1_nosched")
    later = fresh.replace('"starttime": 0,', '"starttime": 100,')
    assert later != fresh and f'"expiration": {_END}}}' in later
    assert err == ""
    blocks = out.split(f"{_BAR}\n")
    assert blocks[2:] == [
        later,
        "INFO: JOBID=2\nINFO: RESOURCES=MATCHED\nINFO: SCHEDULED AT=100\n",
        later,
        "INFO: JOBID=2\nINFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=100\n",
        "",
    ]


def test_host_lists_join_ranges_across_a_change_of_digit_count(tmp_path: Path) -> None:
    from tests.unit.fluxion_nb.test_cli import ranked_cluster

    hosts = tuple(f"worker{i}" for i in range(2, 17))
    whole = _write(
        tmp_path,
        "all.json",
        {
            "version": 1,
            "resources": [
                {
                    "type": "node",
                    "count": 15,
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
        },
    )
    out, _ = _rq(
        tmp_path,
        ranked_cluster(hosts, cores=1, gpus=0),
        f"match allocate {whole}\nquit\n",
        "-F",
        "rv1_nosched",
    )
    r = json.loads(out.split("\n", 1)[0])
    assert r["execution"]["nodelist"] == ["worker[2-16]"]
