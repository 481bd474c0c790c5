"""Replay flux-sched's resource-query cases through fluxion-rq; compare outputs byte for byte.

The fixture data stays where it lies (FLUXION_FIXTURES, default ../shared/fixtures/fluxion);
GRUG graphs are replaced by their JGF twins in jgf-from-grug/.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fluxion_nb import cli

from . import grug_associations

DEFAULT_FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "fluxion"


def fixtures_dir() -> Path:
    return Path(os.environ.get("FLUXION_FIXTURES", DEFAULT_FIXTURES))


@dataclass
class CaseResult:
    test_file: str
    case: str
    passed: bool
    reason: str


def _graph_for(fx: Path, load_file: str, load_format: str, subsystems: str = "CA") -> Path | None:
    if load_format == "jgf":
        p = fx / load_file
        return p if p.exists() else None
    if load_file.endswith(".graphml"):
        # The twins hold the containment subsystem only. A case matching on
        # another subsystem uses flux-sched's own JGF of that graph, which
        # has every subsystem (same vertices, names and containment edges).
        if subsystems.upper() != "CA":
            full = fx / "data" / "resource" / "jgfs" / (Path(load_file).stem + ".json")
            return full if full.exists() else None
        twin = fx / "jgf-from-grug" / (Path(load_file).stem + ".json")
        return twin if twin.exists() else None
    return None


def _subsystems(q: dict[str, Any]) -> str:
    return q.get("match_subsystems") or "CA"


def _argv(q: dict, graph: Path, out: Path) -> list[str]:
    argv = ["-L", str(graph), "-f", "jgf", "-d", "-t", str(out), "-S", _subsystems(q)]
    if q.get("policy"):
        argv += ["-P", q["policy"]]
    if q.get("match_format"):
        argv += ["-F", q["match_format"]]
    if q.get("prune_filters"):
        argv += ["-p", q["prune_filters"]]
    if q.get("traverser"):
        argv += ["-T", q["traverser"]]
    return argv


def _stderr_file(raw: str) -> str | None:
    """The file a case sends resource-query's stderr to (`2> file`; not `2>>`)."""
    m = re.search(r"(?<![0-9>])2>\s*(?!>)(\S+)", raw)
    return m.group(1) if m else None


# Output filters the sharness files apply before comparing (`X.filt` from `X`).
_FILTERS = {
    # t3012 filter_run_variations: drop the vertex's uniq_id from get-property
    "t3012-resource-properties.t": lambda t: re.sub(r" \(vtx's uniq_id=[0-9]\)", "", t),
}


def _output(outputs: dict[str, bytes], got_name: str, test_file: str) -> bytes | None:
    if got_name in outputs:
        return outputs[got_name]
    base = got_name.removesuffix(".filt")
    filt = _FILTERS.get(test_file)
    if base != got_name and base in outputs and filt:
        return filt(outputs[base].decode()).encode()
    return None


def _expected(fx: Path, case: dict, expected: str) -> bytes | None:
    """The expected bytes; a bare name is the case's expected file with
    @TEST_SRCDIR@ filled in, as the sharness file prepares it with sed."""
    p = fx / expected
    if p.exists():
        return p.read_bytes()
    for q in case["queries"]:
        for e in q.get("expected", []):
            cand = fx / Path(e).parent / expected
            if cand.exists():
                return cand.read_text().replace("@TEST_SRCDIR@", str(fx)).encode()
    return None


def replay_case(case: dict, fx: Path) -> CaseResult:
    tf, name = case["test_file"], case["case"]
    outputs: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for q in case["queries"]:
            if q.get("traverser") not in (None, "", "simple", "flexible"):
                return CaseResult(tf, name, False, f"traverser {q['traverser']} not supported")
            graph = _graph_for(fx, q["load_file"], q.get("load_format") or "grug", _subsystems(q))
            if graph is None:
                return CaseResult(tf, name, False, f"no JGF graph for {q['load_file']}")
            if q["load_file"].endswith(".graphml"):
                graph = grug_associations.restore(
                    fx / q["load_file"], graph, Path(tmp) / f"twin-{graph.name}"
                )
            cmds = (fx / q["cmds_file"]).read_text().replace("@TEST_SRCDIR@", str(fx))
            cmd_path = Path(tmp) / "cmds"
            cmd_path.write_text(cmds)
            out = Path(tmp) / q["test_output"]
            old_stdin = sys.stdin
            err = io.StringIO()
            try:
                sys.stdin = io.StringIO(cmds)
                with (
                    contextlib.redirect_stdout(io.StringIO()),
                    contextlib.redirect_stderr(err),
                ):
                    rc = cli.main(_argv(q, graph, out))
            except Exception as exc:  # a crash is a failure of this case, reported
                return CaseResult(tf, name, False, f"crashed: {type(exc).__name__}: {exc}")
            finally:
                sys.stdin = old_stdin
            if rc != 0:
                return CaseResult(tf, name, False, f"exit code {rc}")
            outputs[q["test_output"]] = out.read_bytes() if out.exists() else b""
            if stderr_file := _stderr_file(q.get("raw", "")):
                outputs[stderr_file] = err.getvalue().encode()
        for got_name, expected in case["all_test_cmp"]:
            got = _output(outputs, got_name, tf)
            if got is None:
                return CaseResult(tf, name, False, f"no output {got_name}")
            want = _expected(fx, case, expected)
            if want is None:
                return CaseResult(tf, name, False, f"no expected file {expected}")
            if got != want:
                return CaseResult(tf, name, False, f"output differs from {expected}")
    return CaseResult(tf, name, True, "")


def jgf_cases(fx: Path) -> list[dict]:
    """Self-contained cases whose graphs exist as JGF (directly or as a GRUG twin)."""
    cases = json.loads((fx / "cases.json").read_text())
    out = []
    for c in cases:
        if not c.get("self_contained"):
            continue
        if all(
            _graph_for(fx, q["load_file"], q.get("load_format") or "grug", _subsystems(q))
            for q in c["queries"]
        ):
            out.append(c)
    return out


def main() -> int:
    fx = fixtures_dir()
    results = [replay_case(c, fx) for c in jgf_cases(fx)]
    passed = sum(r.passed for r in results)
    for r in results:
        if not r.passed:
            print(f"FAIL {r.test_file} :: {r.case} :: {r.reason}")
    print(json.dumps({"cases": len(results), "passed": passed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
