"""The core's fast YAML reader (`_core.yaml_to_json`) against PyYAML.

Whatever the fast reader accepts must read exactly as PyYAML's SafeLoader
followed by json.dumps reads it, types included (True is not 1, 1 is not
1.0); whatever it declines goes to PyYAML. The jobspecs of the fixtures and
the benchmarks must take the fast path.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxion_nb import InputError, _core
from fluxion_nb.jobspec import to_json
from tests.conformance.replay import fixtures_dir
from tests.support.shared_data import BENCH_JOBSPECS, require

ROOT = Path(__file__).resolve().parents[3]
LOADERS: tuple[type[Any], ...] = (yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types, mappings in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _pyyaml(text: str, loader: type[Any]) -> Any:
    """What the PyYAML path gives, through JSON text as the core receives it."""
    return json.loads(json.dumps(yaml.load(text, Loader=loader), default=str))


def _agrees_with_pyyaml(text: str) -> bool:
    """Checks the fast reader against both PyYAML loaders; True if it accepted the text."""
    fast = _core.yaml_to_json(text)
    if fast is None:
        return False
    ours = json.loads(fast)
    for loader in LOADERS:
        try:
            theirs = _pyyaml(text, loader)
        except yaml.YAMLError as exc:
            pytest.fail(f"fast reader accepted what {loader.__name__} rejects ({exc}): {text!r}")
        assert _same(ours, theirs), (loader.__name__, text, fast, theirs)
    return True


def _files(root: Path, *patterns: str) -> list[Path]:
    return sorted(p for pat in patterns for p in root.rglob(pat)) if root.is_dir() else []


FIXTURE_JOBSPECS = _files(
    fixtures_dir() / "data" / "resource" / "jobspecs", "*.yaml", "*.yml", "*.json"
)
BENCH_FILES = _files(BENCH_JOBSPECS, "*.yaml", "*.json")
EXAMPLE_FILES = _files(ROOT / "examples", "*.yaml", "*.yml", "*.json")


# --------------------------------------------------------------------------
# Files: fixtures, benchmarks, examples
# --------------------------------------------------------------------------
def test_fixture_jobspecs_read_as_pyyaml_reads_them_and_mostly_fast() -> None:
    require(fixtures_dir() / "data", "flux-sched's resource-query fixtures", "FLUXION_FIXTURES")
    assert FIXTURE_JOBSPECS, f"no jobspecs under {fixtures_dir()}"
    fast = [p for p in FIXTURE_JOBSPECS if _agrees_with_pyyaml(p.read_text())]
    declined = sorted(str(p.relative_to(fixtures_dir())) for p in set(FIXTURE_JOBSPECS) - set(fast))
    print(
        f"fixture jobspecs on the fast path: {len(fast)}/{len(FIXTURE_JOBSPECS)}; not: {declined}"
    )
    assert len(fast) >= 0.95 * len(FIXTURE_JOBSPECS), declined


def test_bench_jobspecs_all_take_the_fast_path() -> None:
    require(BENCH_JOBSPECS, "the baseline's benchmark jobspecs", "FLUENCE_SHARED")
    assert BENCH_FILES, f"no jobspecs under {BENCH_JOBSPECS}"
    slow = [p.name for p in BENCH_FILES if not _agrees_with_pyyaml(p.read_text())]
    assert not slow


def test_examples_read_as_pyyaml_reads_them() -> None:
    # Kubernetes manifests, some with several documents, which the fast reader declines.
    assert EXAMPLE_FILES
    for p in EXAMPLE_FILES:
        _agrees_with_pyyaml(p.read_text())


# --------------------------------------------------------------------------
# jobspec.to_json: fast path, fallback, errors
# --------------------------------------------------------------------------
JOBSPEC = """\
version: 1
resources:
  - type: slot
    count: 2
    label: task
    with:
      - type: core
        count: 4
attributes:
  system:
    duration: 3600.0
tasks:
  - command: [ "app", '--flag' ]
    slot: task
    count:
      per_slot: 1
"""


def test_to_json_takes_the_fast_path_for_a_plain_jobspec() -> None:
    fast = _core.yaml_to_json(JOBSPEC)
    assert fast is not None
    assert to_json(JOBSPEC) == fast
    assert _same(json.loads(fast), _pyyaml(JOBSPEC, yaml.SafeLoader))


def test_to_json_falls_back_to_pyyaml_outside_the_subset() -> None:
    text = "version: &v 1\nresources: []\ntasks: []\nattributes: {system: {duration: *v}}\n"
    assert _core.yaml_to_json(text) is None
    assert json.loads(to_json(text))["attributes"]["system"]["duration"] == 1


@pytest.mark.parametrize(
    "constraints",
    [
        "{properties: [fast]}",
        "{properties: ['fast', slow]}",
        "{and: [{properties: ['a']}, {not: [{properties: [b]}]}]}",
        "{properties: [!!str fast]}",
        "{properties: [1]}",
    ],
)
def test_a_property_that_is_not_a_quoted_string_is_refused(constraints: str) -> None:
    """Fluxion's reader: "non-string property specified". The fast reader declines
    such text (JSON keeps no quoting) and the composed YAML nodes are checked."""
    text = f"version: 1\nattributes:\n  system:\n    constraints: {constraints}\n"
    assert _core.yaml_to_json(text) is None
    with pytest.raises(InputError, match="non-string property specified"):
        to_json(text)


@pytest.mark.parametrize(
    "text",
    [
        "attributes: {system: {constraints: {properties: ['fast', \"^slow\"]}}}\n",
        "attributes: {system: {constraints: {hostlist: [node0], ranks: [0]}}}\n",
        "attributes: {user: {properties: [fast]}}\n",
        '{"attributes": {"system": {"constraints": {"properties": ["fast"]}}}}',
        "p: &p 'fast'\nattributes: {system: {constraints: {or: [{properties: [*p]}]}}}\n",
    ],
)
def test_quoted_properties_and_other_lists_pass(text: str) -> None:
    assert json.loads(to_json(text)) == yaml.safe_load(text)


def test_to_json_keeps_pyyaml_errors_for_invalid_yaml() -> None:
    with pytest.raises(InputError, match="not valid YAML or JSON"):
        to_json("foo: bar: baz\n")


def test_to_json_rejects_a_document_that_is_not_a_mapping() -> None:
    assert _core.yaml_to_json("- a\n- b\n") == '["a","b"]'
    with pytest.raises(InputError, match="must be a mapping"):
        to_json("- a\n- b\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: yes\nb: Off\nc: ~\nd:\ne: -5\nf: +7\ng: 0\nh: 1.50\n",
            '{"a":true,"b":false,"c":null,"d":null,"e":-5,"f":7,"g":0,"h":1.50}',
        ),
        ("1: x\nfalse: y\nnull: z\n'2': w\n", '{"1":"x","false":"y","null":"z","2":"w"}'),
        (
            '{"a": [1, "b", {"c": null}], "d": "\\u00e9\\n"}',
            '{"a":[1,"b",{"c":null}],"d":"\u00e9\\n"}',
        ),
        ("- a: 1\n  b: [x, 'y''s']\n- - 2\n  - 3\n", '[{"a":1,"b":["x","y\'s"]},[2,3]]'),
        ("k:\n- 1\n- 2\nl: 3 # comment\n", '{"k":[1,2],"l":3}'),
        (
            "core: 0-15\nhost: node[0-3]\nv: 1.2.3-rc\n",
            '{"core":"0-15","host":"node[0-3]","v":"1.2.3-rc"}',
        ),
        ("---\na: 'b'\n...\n", '{"a":"b"}'),
    ],
)
def test_accepted_shapes(text: str, expected: str) -> None:
    assert _core.yaml_to_json(text) == expected
    _agrees_with_pyyaml(text)


@pytest.mark.parametrize(
    "text",
    [
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "a: |\n  text\n",
        "a: >\n  text\n",
        "? a\n: b\n",
        "<<: {a: 1}\n",
        "a: 1\na: 2\n",
        "1: a\ntrue: b\n",
        "a: 1\n---\nb: 2\n",
        "%YAML 1.1\n---\na: 1\n",
        "a:\tb\n",
        "a: b\r\n",
        "a: b\n  c\n",
        'a: "b\n  c"\n',
        "a: 0x1F\n",
        "a: 010\n",
        "a: 1_000\n",
        "a: 1:30\n",
        "a: 2001-12-14\n",
        "a: .inf\n",
        "a: 1e5\n",
        "a: 1.0e+999\n",
        "a: 9223372036854775808\n",
        "1.5: a\n",
        'a: "\\q"\n',
        'a: "\\ud83d\\ude00"\n',
        "[a, b,]\n",
        "{a, b: 1}\n",
        "[a?b]\n",
        "{a:1}\n",
        "",
        "# only a comment\n",
        "\ud800: x\n",
        "[" * 200 + "]" * 200,
    ],
)
def test_declined_inputs(text: str) -> None:
    assert _core.yaml_to_json(text) is None


# --------------------------------------------------------------------------
# Property: random jobspec-like documents in every dump style
# --------------------------------------------------------------------------
TRICKY = [
    *("yes", "No", "on", "OFF", "y", "n", "true", "False", "null", "~", "Null", "NULL", ""),
    *("1", "-5", "+7", "0", "-0", "007", "0x1F", "0b101", "1_000", "1:30", "2001-12-14", "1e3"),
    *("1.5", "1.", ".5", "1.0e+3", "-0.0", ".inf", "-.inf", ".nan", "NaN", "Infinity"),
    *("0-15", "1-3,5", "0:15", "1e-5", "+.inf", "1.2.3", "2001-12-14 21:59:43.10 -5", "12:30:00"),
    *(" ", " lead", "trail ", "a: b", "a:b", "#x", "x #y", "x#y", "- a", "-a", "[x]", "{x}"),
    *("a,b", "'q'", '"dq"', "back\\slash", "tab\there", "line\nbreak", "=", "<<", "&a", "*a"),
    *("!t", "|", ">", "%", "@", "`", "?", ":x", "x:y", "...", "---", "é", "日本", "😀", "\x85"),
]
# Mostly what jobspecs hold, so that many documents stay within the subset.
WORDS = st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-1000, max_value=10**6),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    WORDS,
    WORDS,
    st.sampled_from(TRICKY),
    st.text(max_size=8),
)
KEYS = st.one_of(
    WORDS,
    WORDS,
    st.sampled_from(TRICKY),
    st.text(max_size=6),
    st.integers(-(2**63) - 1, 2**63),
    st.booleans(),
    st.none(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=24,
)
DOCS = st.dictionaries(KEYS, VALUES, min_size=1, max_size=6)

Dump = Callable[[Any], str]
DUMPS: list[tuple[str, Dump]] = [
    ("block", lambda d: yaml.safe_dump(d, default_flow_style=False, sort_keys=False)),
    ("flow", lambda d: yaml.safe_dump(d, default_flow_style=True, sort_keys=False)),
    ("mixed", lambda d: yaml.safe_dump(d, default_flow_style=None, sort_keys=False)),
    ("indent4", lambda d: yaml.safe_dump(d, default_flow_style=False, sort_keys=False, indent=4)),
    ("indent3-narrow", lambda d: yaml.safe_dump(d, indent=3, width=24, sort_keys=False)),
    (
        "unicode-markers",
        lambda d: yaml.safe_dump(
            d, allow_unicode=True, explicit_start=True, explicit_end=True, sort_keys=False
        ),
    ),
    ("json", lambda d: json.dumps(d)),
    ("json-indent", lambda d: json.dumps(d, indent=2, ensure_ascii=False)),
    ("json-compact", lambda d: json.dumps(d, separators=(",", ":"))),
]

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(doc=DOCS)
def test_dumped_documents_read_as_pyyaml_reads_them(doc: dict[Any, Any]) -> None:
    for _, dump in DUMPS:
        text = dump(doc)
        try:
            _pyyaml(text, LOADERS[-1])
        except yaml.YAMLError:
            # json.dumps output that is not YAML 1.1 (e.g. a tab in a key).
            assert _core.yaml_to_json(text) is None, text
            continue
        _agrees_with_pyyaml(text)


@pytest.mark.parametrize(("style", "dump"), DUMPS, ids=[name for name, _ in DUMPS])
def test_redumped_fixture_jobspecs_take_the_fast_path(style: str, dump: Dump) -> None:
    require(fixtures_dir() / "data", "flux-sched's resource-query fixtures", "FLUXION_FIXTURES")
    docs = []
    for p in FIXTURE_JOBSPECS:
        try:
            doc = yaml.safe_load(p.read_text())
        except yaml.YAMLError:
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    assert docs, f"no jobspecs under {fixtures_dir()}"
    # Declined: json.dumps writes 1e30 as 1e+30, a string to YAML 1.1 that
    # looks like a number; narrow lines would fold long strings over lines.
    fast = sum(_agrees_with_pyyaml(dump(d)) for d in docs)
    print(f"{style}: {fast}/{len(docs)} on the fast path")
    assert fast >= 0.98 * len(docs), f"{style}: {fast}/{len(docs)} on the fast path"


# --------------------------------------------------------------------------
# Robustness: garbage and mutated jobspecs
# --------------------------------------------------------------------------
EDIT_PIECES = [
    *" \n:-#'\"[]{},?&*!|>\t01.e+~x\\%@`=<\r\x00é",
    *("  ", "\n  ", ": ", "- ", "yes", "1.5", "1e+3", "0x1", "---", "...", "\\u00e9", "''"),
]
SEED_TEXTS = [
    JOBSPEC,
    *(p.read_text() for p in BENCH_FILES),
    *(p.read_text() for p in FIXTURE_JOBSPECS[:40]),
]


def _accepted_is_json(text: str) -> None:
    """An accepted text gives JSON; that JSON, read again, is declined or reads the same."""
    fast = _core.yaml_to_json(text)
    if fast is not None:
        json.loads(fast)
        again = _core.yaml_to_json(fast)
        assert again is None or again == fast, (text, fast, again)


@PROPERTY
@given(data=st.binary(max_size=300))
def test_random_bytes_never_crash(data: bytes) -> None:
    for text in (data.decode("latin-1"), data.decode("utf-8", errors="surrogateescape")):
        _accepted_is_json(text)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.sampled_from(SEED_TEXTS),
    edits=st.lists(
        st.tuples(st.floats(0, 1), st.sampled_from(EDIT_PIECES), st.integers(0, 3)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_jobspecs_read_as_pyyaml_reads_them(
    seed: str, edits: list[tuple[float, str, int]]
) -> None:
    text = seed
    for where, piece, drop in edits:
        at = int(where * len(text))
        text = text[:at] + piece + text[at + drop :]
    _agrees_with_pyyaml(text)


def test_many_random_mutations_never_crash() -> None:
    rnd = random.Random(7)
    for _ in range(3000):
        text = rnd.choice(SEED_TEXTS)
        for _ in range(rnd.randrange(1, 6)):
            at = rnd.randrange(len(text) + 1)
            text = text[:at] + rnd.choice(EDIT_PIECES) + text[at + rnd.randrange(3) :]
        _accepted_is_json(text)


def test_a_yaml_alias_bomb_is_refused_quickly_and_clearly() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 9):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    bomb += "version: 1\nresources: *i\n"
    started = time.perf_counter()
    with pytest.raises(InputError, match="aliases"):
        to_json(bomb)
    assert time.perf_counter() - started < 1.0
