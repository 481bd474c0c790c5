"""Build the seed corpora of the libFuzzer targets.

    python make_corpus.py OUT_DIR [FIXTURES_DIR]

FIXTURES_DIR is a flux-sched style ``data/resource`` tree (``jgfs/*.json``,
``jobspecs/**/*.yaml``). Writes OUT_DIR/{json,jgf,jobspec,update,yaml}/: small JGFs,
the jobspecs converted to JSON, R documents (jgf and rv1) obtained by
matching those jobspecs against the fixed graph of the targets (when the
fluxion_nb module is importable), and regressions/<target>-*.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
MAX_JGF = 60_000


def put(d: Path, data: str | bytes) -> None:
    d.mkdir(parents=True, exist_ok=True)
    raw = data if isinstance(data, bytes) else data.encode()
    (d / hashlib.sha1(raw).hexdigest()).write_bytes(raw)


def main() -> int:
    out = Path(sys.argv[1])
    fixtures = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    small = (HERE / "small_graph.json").read_text()
    jgfs = [small]
    jobspecs: list[str] = []
    yaml_texts: list[str] = []
    for p in sorted((HERE / "seeds").glob("*.json")):
        jobspecs.append(p.read_text())
    if fixtures and fixtures.is_dir():
        for p in sorted((fixtures / "jgfs").rglob("*.json")):
            if p.stat().st_size <= MAX_JGF:
                jgfs.append(p.read_text())
        for p in sorted((fixtures / "jobspecs").rglob("*.yaml")):
            yaml_texts.append(p.read_text())
            try:
                doc = yaml.safe_load(p.read_text())
            except yaml.YAMLError:
                continue
            if doc is not None:
                jobspecs.append(json.dumps(doc))
    for t in jgfs:
        put(out / "jgf", t)
        put(out / "json", t)
    for t in jobspecs:
        put(out / "jobspec", t)
        put(out / "json", t)
        put(out / "yaml", t)
    for t in yaml_texts:
        put(out / "yaml", t)
    n_r = 0
    try:
        from fluxion_nb.graph import Graph, MatchFormat
    except ImportError:
        Graph = None  # type: ignore[assignment,misc]
    if Graph is not None:
        fmts: tuple[MatchFormat, ...] = ("jgf", "rv1")
        for fmt in fmts:
            g = Graph(small, match_format=fmt)
            for t in jobspecs:
                try:
                    r = g.match(t, "allocate")
                except Exception:  # noqa: BLE001 - seeds only
                    continue
                if r.status == "allocated":
                    put(out / "update", r.R)
                    n_r += 1
                    g.cancel(r.jobid)
    # Known-bad inputs stay in every run, so a fixed bug cannot come back.
    for p in sorted((HERE / "regressions").glob("*-*")):
        put(out / p.name.split("-", 1)[0], p.read_bytes())
    for name in ("json", "jgf", "jobspec", "update", "yaml"):
        (out / name).mkdir(parents=True, exist_ok=True)
    print(f"seeds: {len(jgfs)} jgf, {len(jobspecs)} jobspec, {n_r} R -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
