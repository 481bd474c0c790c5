"""deploy/grafana-dashboard.json queries only metrics the code creates (read from the source).

The live check, against a ``/metrics`` scrape with labels, is
tests/integration/test_grafana_dashboard_scrape.py.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"

# PromQL words that look like identifiers but are not metric names.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "label_values", "clamp_min", "clamp_max", "topk", "bottomk", "offset", "bool",
}  # fmt: skip
SCRAPE_ADDED_LABELS = {"job", "instance"}
"""Labels Prometheus attaches when it scrapes, not the exporter."""

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(r"\blabel_values\(\s*([^,()]+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")
"""Grafana's ``label_values(metric, label)`` template query."""
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"^\d")


def metric_names(expr: str) -> set[str]:
    """Identifiers of a PromQL expression that name metrics."""
    text = _LABEL_VALUES.sub(r"\1", expr)
    text = _STRINGS.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {w for w in _IDENT.findall(text) if w not in PROMQL_WORDS and not _NUMBER.match(w)}


def grouping_labels(expr: str) -> set[str]:
    """Labels an expression aggregates or joins on (and the label of ``label_values``)."""
    found = {
        label.strip()
        for group in _GROUPING.findall(expr)
        for label in group.split(",")
        if label.strip()
    }
    return found | {label for _, label in _LABEL_VALUES.findall(expr)}


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            yield query["query"]


INSTRUMENTS = {
    "create_counter": ("_total",),
    "create_up_down_counter": ("",),
    "create_histogram": ("_bucket", "_sum", "_count"),
    "create_gauge": ("",),
    "create_observable_gauge": ("",),
    "create_observable_counter": ("_total",),
    "create_observable_up_down_counter": ("",),
}
"""OpenTelemetry instrument factory -> suffixes its Prometheus exposition adds."""
CODE_DIRS = ("scheduler_extender", "webhook", "deviceplugin", "fluence")


def exported_in_code() -> set[str]:
    """Scraped names of every instrument the source creates, found by reading the code."""
    out: set[str] = set()
    for d in CODE_DIRS:
        for path in (REPO / d).rglob("*.py"):
            if "_gen" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in INSTRUMENTS
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    out.update(node.args[0].value + sfx for sfx in INSTRUMENTS[node.func.attr])
    return out


def test_every_queried_metric_is_created_in_the_code() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    in_code = exported_in_code()
    assert "fluence_extender_request_seconds_bucket" in in_code
    assert "fluence_webhook_reviews_total" in in_code
    queried: set[str] = set()
    for expr in expressions(dashboard):
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        queried |= names
        unknown = names - in_code
        assert not unknown, f"{expr!r} queries {sorted(unknown)}, which no code creates"
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in in_code}
    shown = {re.sub(r"_(bucket|count|sum)$", "", n) for n in queried}
    assert families - shown == set(), "created in the code but not on the dashboard"


def test_dashboard_panels_cover_the_operator_questions() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    for words in (
        "request latency per verb",
        "Match latency",
        "Allocations held",
        "utilization per resource type",
        "admissions",
        "registrations",
    ):
        assert words in titles, words
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
