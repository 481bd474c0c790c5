"""Turning the extender's documents into terminal tables, and the graph into DOT.

Plain functions from documents to text so the output is tested without a
terminal; colour is only a wrapper around cells and never changes widths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fluence import names

RESET = "\x1b[0m"
BOLD = "\x1b[1m"
DIM = "\x1b[2m"
RED = "\x1b[31m"
GREEN = "\x1b[32m"
YELLOW = "\x1b[33m"
CYAN = "\x1b[36m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

TYPE_LABELS = {"core": "cpu", "memory": "memory", "gpu": "gpu"}
"""Graph vertex types in Kubernetes words."""


def visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


class Painter:
    """Applies ANSI colour when enabled; a no-op otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not codes:
            return text
        return "".join(codes) + text + RESET

    def share(self, text: str, used: int, capacity: int) -> str:
        """Green below half, yellow below 90%, red from 90% up."""
        if capacity <= 0:
            return self(text, DIM)
        frac = used / capacity
        return self(text, RED if frac >= 0.9 else YELLOW if frac >= 0.5 else GREEN)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], paint: Painter) -> str:
    """Left-aligned columns two spaces apart, widths from the visible text."""
    widths = [visible_len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], visible_len(cell))

    def line(cells: Sequence[str]) -> str:
        out = [c + " " * (widths[i] - visible_len(c)) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    head = line([paint(h, BOLD) for h in headers])
    return "\n".join([head, *(line(r) for r in rows)])


def amount(rtype: str, value: int) -> str:
    """Graph units in Kubernetes quantities: millicores -> cores, MiB -> Mi/Gi."""
    if rtype == "core":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if rtype == "memory":
        if value == 0:
            return "0"
        return f"{value // 1024}Gi" if value and value % 1024 == 0 else f"{value}Mi"
    return str(value)


def totals(state: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Sum over nodes per resource type: capacity, allocated, free."""
    out: dict[str, dict[str, int]] = {}
    for per in state.get("nodes", {}).values():
        for t, u in per.items():
            acc = out.setdefault(t, {"capacity": 0, "allocated": 0, "free": 0})
            for k in acc:
                acc[k] += int(u.get(k, 0))
    return dict(sorted(out.items()))


def backend_totals(state: Mapping[str, Any]) -> dict[str, int]:
    backends = state.get("backends", {})
    held = sum(1 for b in backends.values() if b.get("held"))
    return {"capacity": len(backends), "allocated": held, "free": len(backends) - held}


def status_doc(state: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/state`` document plus totals, for ``-o json|yaml``."""
    doc = dict(state)
    doc["totals"] = {"nodes": totals(state), "backends": backend_totals(state)}
    return doc


def _usage_cells(rtype: str, u: Mapping[str, int], paint: Painter) -> list[str]:
    cap, used, free = int(u["capacity"]), int(u["allocated"]), int(u["free"])
    pct = f"{(100 * used // cap) if cap else 0}%"
    return [
        amount(rtype, cap),
        paint.share(amount(rtype, used), used, cap),
        amount(rtype, free),
        paint.share(pct, used, cap),
    ]


def status_text(state: Mapping[str, Any], paint: Painter) -> str:
    """Nodes (with totals), backends, then the groups holding allocations and their pods."""
    sections: list[str] = []
    rows: list[list[str]] = []
    for node, per in sorted(state.get("nodes", {}).items()):
        for t, u in sorted(per.items()):
            rows.append([node, TYPE_LABELS.get(t, t), *_usage_cells(t, u, paint)])
    for t, u in totals(state).items():
        rows.append([paint("TOTAL", BOLD), TYPE_LABELS.get(t, t), *_usage_cells(t, u, paint)])
    headers = ["NODE", "RESOURCE", "CAPACITY", "ALLOCATED", "FREE", "USED"]
    sections.append(table(headers, rows, paint) if rows else "No nodes in the graph.")

    backends = state.get("backends", {})
    if backends:
        brows = []
        for name, b in sorted(backends.items()):
            attrs = ",".join(f"{k}={v}" for k, v in sorted(b.get("attributes", {}).items()))
            st = paint("held", YELLOW) if b.get("held") else paint("free", GREEN)
            brows.append([name, st, b.get("pod") or "-", attrs or "-"])
        bt = backend_totals(state)
        brows.append([paint("TOTAL", BOLD), f"{bt['allocated']}/{bt['capacity']} held", "", ""])
        sections.append(table(["BACKEND", "STATE", "POD", "ATTRIBUTES"], brows, paint))

    pods = state.get("pods", {})
    grows = []
    for group, g in sorted(state.get("groups", {}).items()):
        for pod, node in sorted(g.get("pods", {}).items()):
            p = pods.get(pod, {})
            amounts = ", ".join(
                f"{TYPE_LABELS.get(t, t)} {amount(t, n)}"
                for t, n in sorted(p.get("amounts", {}).items())
            )
            grows.append(
                [
                    paint(group, CYAN),
                    pod,
                    node or "-",
                    p.get("state", "-"),
                    g.get("backend") or "-",
                    amounts or "-",
                ]
            )
    if grows:
        headers = ["GROUP", "POD", "NODE", "STATE", "BACKEND", "HOLDS"]
        sections.append(table(headers, grows, paint))
    else:
        sections.append("No groups hold allocations.")
    foreign = sum(1 for p in pods.values() if p.get("state") == "foreign")
    if foreign:
        sections.append(f"{foreign} pod(s) bound by other schedulers are accounted as well.")
    return "\n\n".join(sections) + "\n"


def explain_text(doc: Mapping[str, Any], paint: Painter) -> str:
    verdict = str(doc.get("verdict", ""))
    colour = (
        GREEN if verdict == "placed" else RED if verdict in ("unsatisfiable", "invalid") else YELLOW
    )
    lines = [
        f"Pod:      {doc.get('pod')}",
        f"Verdict:  {paint(verdict, colour, BOLD)}",
        f"Reason:   {doc.get('reason')}",
        f"Group:    {doc.get('group') or '-'}",
    ]
    q = doc.get("quorum")
    if q:
        lines.append(f"Quorum:   {q['present']} of {q['min_count']} pod(s) present ({q['source']})")
    h = doc.get("holding")
    if h:
        lines.append(f"Holding:  {h['state']} on {h.get('node') or '-'}")
    lines.append(f"Node:     {doc.get('node') or (h or {}).get('node') or '-'}")
    lines.append(f"Backend:  {doc.get('backend') or '-'}")
    last = doc.get("last_match")
    if last:
        lines.append(f"Last match: {last}")
    members = doc.get("members") or []
    if members:
        rows = [[m["pod"], m.get("node") or "-", m.get("holding") or "-"] for m in members]
        lines += ["", table(["MEMBER", "NODE", "HOLDING"], rows, paint)]
    specs = doc.get("jobspecs") or []
    if specs:
        lines += ["", "Jobspecs:"]
        for s in specs:
            if s["kind"] == "compute":
                lines.append(f"  compute: {s['pods']} pod(s) of {s['each']}")
            else:
                lines.append(f"  device:  {s['count']} {s['type']}")
    return "\n".join(lines) + "\n"


def _seconds(n: float) -> str:
    n = int(n)
    if n < 120:
        return f"{n}s"
    if n < 7200:
        return f"{n // 60}m"
    return f"{n // 3600}h{n % 3600 // 60:02d}m"


def queue_text(waiting: Sequence[Mapping[str, Any]], paint: Painter) -> str:
    """``kubectl fluence queue``: like ``squeue --start``, the expected start of each group."""
    if not waiting:
        return "no group is waiting for capacity\n"
    rows = []
    for w in waiting:
        if w.get("reserved"):
            start = str(w.get("start") or "")
            when = paint("now", GREEN) if not w.get("starts_in") else start
            left = _seconds(w.get("starts_in") or 0)
        else:
            when, left = paint("-", YELLOW), str(w.get("note") or "not reserved")
        rows.append(
            [
                str(w.get("position", "")),
                str(w.get("group", "")),
                str(w.get("priority", 0)),
                str(w.get("pods", "")),
                _seconds(w.get("runtime") or 0) if w.get("runtime") else "-",
                _seconds(w.get("waiting_seconds") or 0),
                when,
                left,
            ]
        )
    headers = ["#", "GROUP", "PRIORITY", "PODS", "RUNTIME", "WAITING", "START", "IN"]
    return table(headers, rows, paint)


def match_text(doc: Mapping[str, Any], paint: Painter) -> str:
    status = str(doc.get("status", ""))
    colour = GREEN if status == "fits" else YELLOW if status == "busy" else RED
    lines = [f"{paint(status, colour, BOLD)}: {doc.get('message', '')}"]
    rows = [
        [node, ", ".join(f"{TYPE_LABELS.get(t, t)} {amount(t, n)}" for t, n in sorted(per.items()))]
        for node, per in sorted(doc.get("nodes", {}).items())
    ]
    if rows:
        lines.append(table(["NODE", "WOULD TAKE"], rows, paint))
    return "\n".join(lines) + "\n"


def _dot_id(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def graph_dot(jgf: Mapping[str, Any], usage: Mapping[str, Mapping[str, Mapping[str, int]]]) -> str:
    """The containment tree as Graphviz DOT; pools show allocated/capacity from ``/state``."""
    lines = ["digraph fluxion {", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
    for v in jgf.get("graph", {}).get("nodes", []):
        md = v.get("metadata", {})
        vtype, name = md.get("type", ""), md.get("name", "")
        props = md.get("properties") or {}
        virtual = names.PROPERTY_VIRTUAL_TRUE in props
        # Virtual vertices are all of type "node"; their basename is the configured type.
        label = f"{name}\n{md.get('basename', vtype) if virtual else vtype}"
        if virtual and int(md.get("size", 1)) > 1:
            label += f" x{md['size']}"
        attrs = []
        path = md.get("paths", {}).get("containment", "")
        parts = path.strip("/").split("/")
        if vtype in TYPE_LABELS and len(parts) >= 3:
            u = usage.get(parts[-2], {}).get(vtype)
            if u:
                label += f"\n{amount(vtype, u['allocated'])}/{amount(vtype, u['capacity'])}"
                if u["allocated"]:
                    attrs.append("style=filled, fillcolor=lightyellow")
        if virtual:
            attrs.append("shape=ellipse")
        extra = (", " + ", ".join(attrs)) if attrs else ""
        lines.append(f"  {_dot_id(str(v['id']))} [label={_dot_id(label)}{extra}];")
    for e in jgf.get("graph", {}).get("edges", []):
        lines.append(f"  {_dot_id(str(e['source']))} -> {_dot_id(str(e['target']))};")
    lines.append("}")
    return "\n".join(lines) + "\n"
