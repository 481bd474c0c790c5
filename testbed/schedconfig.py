"""KubeSchedulerConfiguration documents for a kube-scheduler that delegates to fluence.

``ControlPlane.start_scheduler`` takes the body of the configuration (without
``apiVersion``/``kind``); these build it for the demo, the benchmarks and tests.
"""

from __future__ import annotations

from typing import Any

from fluence import names


def extender_config(url: str) -> dict[str, Any]:
    """One ``extenders`` entry: filter, prioritize, preempt and bind go to the extender at
    ``url``, as in the shipped configuration."""
    return {
        "urlPrefix": url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "preemptVerb": "preempt",
        "bindVerb": "bind",
        "weight": 1,
        "nodeCacheCapable": True,
        "httpTimeout": "30s",
    }


def scheduler_config(
    extender_url: str | None,
    *,
    profile: str = names.SCHEDULER_NAME,
    fast_backoff: bool = True,
) -> dict[str, Any]:
    """A kube-scheduler with one profile, delegating to the extender when a URL is given.

    ``fast_backoff`` retries unschedulable pods after 1-2 s instead of the defaults.
    """
    doc: dict[str, Any] = {"percentageOfNodesToScore": 100}
    if fast_backoff:
        doc["podInitialBackoffSeconds"] = 1
        doc["podMaxBackoffSeconds"] = 2
    doc["profiles"] = [{"schedulerName": profile}]
    if extender_url:
        doc["extenders"] = [extender_config(extender_url)]
    return doc
