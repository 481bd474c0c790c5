"""Type stubs for the C++ core module (see bindings.cpp)."""

from typing import Literal

class InputError(ValueError): ...
class NotFoundError(LookupError): ...
class StateError(RuntimeError): ...

class AllocatedVertex:
    path: str
    type: str
    name: str
    id: int
    rank: int
    amount: int
    exclusive: bool
    node: str
    properties: dict[str, str]

class MatchResult:
    status: str
    jobid: int
    at: int
    duration: int
    overhead: float
    R: str
    error: str
    @property
    def emitted(self) -> int: ...
    preorder: int
    postorder: int

class JobRecord:
    jobid: int
    state: str
    at: int
    duration: int
    overhead: float
    R: str

class Usage:
    path: str
    type: str
    name: str
    size: int
    used: int

class Matcher:
    policy: str
    match_format: str
    @property
    def traverser(self) -> Literal["simple", "flexible"]: ...
    def __init__(
        self,
        jgf: str | bytes,
        policy: str = "first",
        prune_filters: str = "ALL:core,ALL:node",
        match_format: str = "jgf",
        partial_pool_types: set[str] = ...,
        traverser: Literal["simple", "flexible"] = "simple",
        subsystems: str = "CA",
        keep_canceled: bool = True,
    ) -> None: ...
    def match(
        self, jobspec_json: str, op: str = "allocate", jobid: int | None = None, format: str = ""
    ) -> MatchResult: ...
    def update_allocate(
        self, jobid: int, R: str, at: int, duration: int, reserve: bool = False, format: str = ""
    ) -> MatchResult: ...
    def hold(self, jobid: int, holdings: list[tuple[str, int]], at: int, duration: int) -> None: ...
    def cancel(self, jobid: int, noent_ok: bool = False) -> bool: ...
    def partial_cancel(self, jobid: int, paths: list[str]) -> bool: ...
    def partial_cancel_r(self, jobid: int, R: str, format: str = "jgf") -> bool: ...
    def describe(self, result: MatchResult) -> list[AllocatedVertex]: ...
    def held_by_node(self, result: MatchResult) -> list[tuple[str, list[tuple[str, int]]]]: ...
    def info(self, jobid: int) -> JobRecord | None: ...
    def jobs(self) -> list[JobRecord]: ...
    def stat(self) -> dict[str, int]: ...
    def next_jobid(self) -> int: ...
    def set_status(self, path: str, up: bool) -> None: ...
    def get_status(self, path: str) -> bool: ...
    def set_property(self, path: str, key: str, value: str) -> None: ...
    def get_property(self, path: str) -> dict[str, str]: ...
    def uniq_id(self, path: str) -> int: ...
    def attach(self, jgf: str) -> None: ...
    def remove(self, path: str) -> None: ...
    def remove_ranks(self, idset: str) -> None: ...
    def usage(self) -> list[Usage]: ...
    def find(self, criteria: str, format: str = ...) -> str: ...
    def traversal_counts(self) -> tuple[int, int]: ...

def policies() -> list[str]: ...
def yaml_to_json(text: str) -> str | None:
    """The YAML (or JSON) document as compact JSON, read by the core's fast reader.

    None when the text lies outside the subset that reader handles (see
    src/yaml_subset.hpp) or is not valid YAML: read it with PyYAML then. An
    accepted text gives what ``json.dumps(yaml.safe_load(text))`` would parse to.
    """

DUPLICATE_ROOT_ERROR: str
