"""Jobspecs Fluxion's reader refuses are refused here too, with the reason, changing nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fluxion_nb import Graph, InputError
from fluxion_nb.examples import pooled_cluster, slot_jobspec
from fluxion_nb.jobspec import to_json
from tests.conformance.replay import fixtures_dir
from tests.support.shared_data import require


def spec() -> dict[str, Any]:
    return slot_jobspec(1, 1000, 1024)


def edited(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The valid jobspec with the entry at ``path`` set to ``value`` (deleted when None)."""
    doc = copy.deepcopy(spec())
    at: Any = doc
    for key in path[:-1]:
        at = at[key]
    if value is None:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return doc


CORE = ("resources", 0, "with", 0)
TASK = ("tasks", 0)

REFUSED = [
    ("no attributes", edited(("attributes",), None), "missing 'attributes'"),
    ("resource key", edited((*CORE, "requires"), [{"properties": ["x"]}]), "unknown resource key"),
    ("max alone", edited((*CORE, "count"), {"min": 1, "max": 4}), "all or none"),
    (
        "operator without max",
        edited((*CORE, "count"), {"min": 1, "operator": "+", "operand": 1}),
        "all or none",
    ),
    ("command text", edited((*TASK, "command"), "app"), "'command' sequence"),
    ("two task counts", edited((*TASK, "count"), {"per_slot": 1, "total": 2}), "one entry"),
    ("no task count", edited((*TASK, "count"), None), "'count' mapping"),
    ("distribution list", edited((*TASK, "distribution"), ["a"]), "'distribution'"),
    ("task attributes", edited((*TASK, "attributes"), "x"), "'attributes' must be a mapping"),
]


@pytest.mark.parametrize(
    ("doc", "why"), [(d, w) for _, d, w in REFUSED], ids=[n for n, _, _ in REFUSED]
)
def test_a_jobspec_fluxion_refuses_is_refused_with_its_reason(
    doc: dict[str, Any], why: str
) -> None:
    g = Graph(pooled_cluster(nodes=1))
    before = [(u.path, u.used) for u in g.usage()]
    with pytest.raises(InputError, match=why):
        g.match(doc)
    assert [(u.path, u.used) for u in g.usage()] == before
    assert g.match(spec()).status == "allocated"


ACCEPTED = [
    ("null attributes", edited(("attributes",), None) | {"attributes": None}),
    ("full range", edited((*CORE, "count"), {"min": 1, "max": 4, "operator": "+", "operand": 1})),
    ("task with distribution", edited((*TASK, "distribution"), "scatter")),
]


@pytest.mark.parametrize("doc", [d for _, d in ACCEPTED], ids=[n for n, _ in ACCEPTED])
def test_what_fluxion_accepts_is_still_accepted(doc: dict[str, Any]) -> None:
    assert Graph(pooled_cluster(nodes=1)).match(doc).status == "allocated"


def _validation(kind: str) -> list[Path]:
    base = require(
        fixtures_dir() / "data" / "resource" / "jobspecs" / "validation",
        "flux-sched's jobspec validation cases",
        "FLUXION_FIXTURES",
    )
    return sorted((base / kind).glob("*.yaml"))


def _types(node: Any) -> set[str]:
    """Every resource type a jobspec names."""
    out: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            out.add(node["type"])
        for v in node.values():
            out |= _types(v)
    elif isinstance(node, list):
        for v in node:
            out |= _types(v)
    return out


def _graph_of(types: set[str]) -> dict[str, Any]:
    """A root with one vertex of each type, so that every type is known."""
    nodes = [{"id": "0", "metadata": {"type": "cluster", "paths": {"containment": "/c0"}}}]
    edges = []
    for i, t in enumerate(sorted(types - {"slot", "cluster"}), start=1):
        meta = {"type": t, "id": i, "paths": {"containment": f"/c0/{t}{i}"}}
        nodes.append({"id": str(i), "metadata": meta})
        edges.append({"source": "0", "target": str(i)})
    return {"graph": {"nodes": nodes, "edges": edges}}


def test_every_jobspec_flux_sched_calls_invalid_is_refused() -> None:
    """flux-sched's t3000 cases: its reader refuses each of these (bad counts, keys,
    scalars, constraints), and so does ours, leaving the graph as it was."""
    files = _validation("invalid")
    assert len(files) >= 40
    g = Graph(pooled_cluster(nodes=1))
    for f in files:
        with pytest.raises(InputError):
            g.match(f.read_text(), "satisfiability")
    assert g.match(spec()).status == "allocated"


def test_every_jobspec_flux_sched_calls_valid_is_read() -> None:
    """And reads each of its valid ones, on a graph that has their resource types (a
    type the graph lacks is refused here, where Fluxion would match nothing); sibling
    slots need the flexible traverser."""
    files = _validation("valid")
    assert len(files) >= 20
    for f in files:
        doc = json.loads(to_json(f.read_text()))
        traverser = "flexible" if f.name == "use_case_2.4.yaml" else "simple"
        g = Graph(_graph_of(_types(doc)), traverser=traverser)
        assert g.match(doc, "satisfiability").status in ("satisfiable", "unsatisfiable"), f.name


@pytest.mark.parametrize(
    ("constraints", "why"),
    [
        ({"properties": ["f^oo"]}, "invalid property name"),
        ({"properties": ["^f^oo"]}, "invalid property name"),
        ({"properties": ["a"], "ranks": [0]}, "one operator"),
        ({"ranks": [[0]]}, "must be scalars"),
        ({"ranks": ["x"]}, "idset"),
    ],
)
def test_constraints_fluxion_refuses_are_refused(constraints: dict[str, Any], why: str) -> None:
    doc = spec()
    doc["attributes"]["system"]["constraints"] = constraints
    with pytest.raises(InputError, match=why):
        Graph(pooled_cluster(nodes=1)).match(doc)


def test_ranks_and_scalar_keys_may_be_numbers_as_in_yaml() -> None:
    doc = spec()
    doc["attributes"]["system"]["constraints"] = {"or": [{"ranks": [0]}, {"hostlist": [7]}]}
    doc["resources"][0]["id"] = 3
    doc["resources"][0]["label"] = 5
    doc["tasks"][0]["slot"] = "5"
    assert Graph(pooled_cluster(nodes=1)).match(doc).status == "allocated"
    doc["resources"][0]["id"] = ["a", "b"]
    with pytest.raises(InputError, match="'id' must be a scalar"):
        Graph(pooled_cluster(nodes=1)).match(doc)
