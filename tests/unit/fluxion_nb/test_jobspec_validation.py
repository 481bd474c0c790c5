"""Jobspecs Fluxion's reader refuses are refused here too, with the reason, changing nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fluxion_nb import Graph, InputError
from fluxion_nb.examples import pooled_cluster, slot_jobspec


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
