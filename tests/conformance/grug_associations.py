"""Put back the containment edges a GRUG recipe's ASSOCIATE_IN step makes.

The JGF twins of the GRUG graphs were exported with `find`, which walks the
containment tree and so keeps one parent per vertex. A recipe edge with
`gen_method=ASSOCIATE_IN` gives every vertex of the source type an edge to
every existing vertex of the target type (mtl3.graphml: the global L2 storage
unit shares the racks' L1 units and their SSDs), and those second parents are
lost. This restores them so the twin is the graph the GRUG reader builds.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

_NS = {"g": "http://graphml.graphdrawing.org/xmlns"}


def _data(elem: ET.Element) -> dict[str, str]:
    return {d.get("key", ""): (d.text or "").strip() for d in elem.findall("g:data", _NS)}


def associations(graphml: Path) -> list[tuple[str, str]]:
    """(source type, target type) of each containment ASSOCIATE_IN recipe edge."""
    root = ET.parse(graphml).getroot()
    types = {n.get("id"): _data(n).get("type", "") for n in root.iter(f"{{{_NS['g']}}}node")}
    out = []
    for e in root.iter(f"{{{_NS['g']}}}edge"):
        d = _data(e)
        if d.get("gen_method") != "ASSOCIATE_IN":
            continue
        if d.get("e_subsystem", "containment") != "containment":
            continue
        out.append((types[e.get("source")], types[e.get("target")]))
    return out


def restore(graphml: Path, twin: Path, dest: Path) -> Path:
    """The twin itself when nothing is missing, else a repaired copy at `dest`."""
    links = associations(graphml)
    if not links:
        return twin
    doc = json.loads(twin.read_text())
    nodes, edges = doc["graph"]["nodes"], doc["graph"]["edges"]

    def uniq(n: dict[str, Any]) -> int:
        return int(n["metadata"].get("uniq_id", n["id"]))

    by_type: dict[str, list[str]] = {}
    for n in sorted(nodes, key=uniq):  # GRUG's generation order
        by_type.setdefault(n["metadata"]["type"], []).append(n["id"])
    have = {(e["source"], e["target"]) for e in edges}
    added = 0
    for src_type, tgt_type in links:
        for s in by_type.get(src_type, []):
            for t in by_type.get(tgt_type, []):
                if (s, t) not in have:
                    edges.append(
                        {"source": s, "target": t, "metadata": {"subsystem": "containment"}}
                    )
                    have.add((s, t))
                    added += 1
    if not added:
        return twin
    dest.write_text(json.dumps(doc))
    return dest
