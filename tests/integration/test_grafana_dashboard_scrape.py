"""deploy/grafana-dashboard.json against a live ``/metrics`` scrape: metric names and labels.

The scrape runs in a child process (``tests.support.metric_names``) because
telemetry is set up once per process; it builds the extender and webhook apps
and the device plugin's metrics through their real factories.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.unit.deploy.test_grafana_dashboard import (
    DASHBOARD,
    REPO,
    SCRAPE_ADDED_LABELS,
    expressions,
    grouping_labels,
    metric_names,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Metric -> labels, scraped from the extender/webhook/device-plugin metrics in a child."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.metric_names"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {k: set(v) for k, v in json.loads(done.stdout).items()}


def test_parser_finds_metrics_and_not_functions_or_labels() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, verb) (rate(x_bucket{job=~"a|b"}[5m]))) '
        "/ ignoring(verb) y_total"
    )
    assert metric_names(expr) == {"x_bucket", "y_total"}
    assert grouping_labels(expr) == {"le", "verb"}
    assert metric_names("label_values(z_count, job)") == {"z_count"}
    assert grouping_labels("label_values(z_count, job)") == {"job"}


def test_every_queried_metric_is_exported(exported: dict[str, set[str]]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queried: set[str] = set()
    for expr in expressions(dashboard):
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        queried |= names
        unknown = names - exported.keys()
        assert not unknown, f"{expr!r} queries {sorted(unknown)}, not exported"
        for name in names:
            missing = grouping_labels(expr) - exported[name] - SCRAPE_ADDED_LABELS
            assert not missing, f"{expr!r} groups {name} by {sorted(missing)}, not on it"
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exported}
    shown = {re.sub(r"_(bucket|count|sum)$", "", n) for n in queried}
    assert families - shown == set(), "exported but not on the dashboard"
