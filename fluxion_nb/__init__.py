"""fluxion_nb: a Fluxion-compatible resource graph matcher (C++17 core, nanobind bindings)."""

from fluxion_nb.errors import InputError, NotFoundError, StateError
from fluxion_nb.graph import (
    AllocatedVertex,
    Allocation,
    Graph,
    MatchFormat,
    MatchOp,
    TraverserKind,
)

__all__ = [
    "AllocatedVertex",
    "Allocation",
    "Graph",
    "InputError",
    "MatchFormat",
    "MatchOp",
    "NotFoundError",
    "StateError",
    "TraverserKind",
]
