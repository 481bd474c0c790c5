"""Prints, as JSON, every metric the fluence binaries expose on ``/metrics``, with its labels.

Runs in its own process (``python -m tests.support.metric_names`` from the
repo root) because telemetry is set up once per process: it builds the
extender and webhook apps and the device plugin's metrics through their real
factories, makes each instrument record once, and scrapes ``/metrics``.
"""

from __future__ import annotations

import json
import re

from starlette.testclient import TestClient

from deviceplugin.metrics import PluginMetrics
from fluence import ledger, names, resources, telemetry, untrusted
from fluence.events import EventRecorder
from scheduler_extender import gated_queue, leadership, podgroup_cleanup, qrmi_acquisition, requeue
from scheduler_extender.access import Caller
from scheduler_extender.app import create_app as extender_app
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env
from webhook.admission import Admission
from webhook.app import create_app as webhook_app
from webhook.env import EnvContract
from webhook.settings import WebhookSettings

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", re.M)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


class _NoTokens:
    def authenticate(self, token: str) -> Caller | None:
        return None

    def authorize(self, caller: Caller, path: str, verb: str) -> bool:
        return False


def scrape() -> dict[str, list[str]]:
    """Sample name -> the label names seen on it (``le`` included for buckets)."""
    env = Env([make_node("a")])
    extender = TestClient(extender_app(env.scheduler, metrics=True))
    pod = make_pod("probe", raw=True)
    env.cluster.add(pod)
    extender.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["a"]})
    forged = make_pod(
        "forged", node="a", phase="Running", annotations={names.ANNOTATION_ALLOCATION: "{}"}
    )
    env.ledger.observe(forged)  # an unsealed record: ignored and counted
    posted: list[dict[str, object]] = []
    recorder = EventRecorder(lambda ns, body: posted.append(body)).start()
    recorder.warn("default", "forged", "", "Probe", "counted")
    failing = EventRecorder(lambda ns, body: 1 / 0).start()
    failing.warn("default", "forged", "", "Probe", "dropped")
    recorder.stop()
    failing.stop()
    untrusted.count("Pod", untrusted.UNDECODABLE)  # what a skipped object records
    ledger._preemptions.add(1)  # what evicting a group for a higher-priority one records
    requeue._requeued.add(1)  # what marking a waiting pod that fits now records
    # What the queue records: a release, a refused one, a requeued group, the wait after an
    # end, leadership, a bare pods' PodGroup removed.
    gated_queue._released.add(1)
    gated_queue._refused.add(1)
    gated_queue._requeued.add(1)
    gated_queue._after_end.record(0.2)
    leadership._leading.add(1)
    podgroup_cleanup._removed.add(1)
    # What QRMI acquisitions record, by outcome.
    qrmi_acquisition._acquired.add(1, {"outcome": "acquired"})
    qrmi_acquisition._released.add(1, {"outcome": "released"})
    env.ledger.gang_timeout = 0.0
    env.ledger.expire()  # the probe pod's unbound holding times out
    rebuilding = TestClient(extender_app(env.scheduler, ready=lambda: False, metrics=False))
    rebuilding.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["a"]})
    contract = EnvContract.from_config(resources.load("examples/resources.yaml"), loaded=True)
    webhook = TestClient(
        webhook_app(WebhookSettings(), Admission(lambda: contract)), base_url="https://testserver"
    )
    webhook.post("/mutate", content=b"{}", headers={"content-type": "application/json"})
    plugin = PluginMetrics(lambda: {"fluence.flux-framework.org/qpu": 1})
    plugin.registrations.add(1, {"resource": "r", "result": "ok", "kind": "first"})
    plugin.server_restarts.add(1, {"resource": "r"})
    plugin.config_reloads.add(1, {"result": "ok"})
    guarded = TestClient(
        extender_app(env.scheduler, metrics=False, remote=_NoTokens()), client=("10.0.0.9", 1)
    )
    guarded.get("/state")  # no token from beyond loopback: refused and counted
    text = extender.get("/metrics/").text
    found: dict[str, set[str]] = {}
    for name, labels in _SAMPLE.findall(text):
        if name.startswith("fluence_"):
            found.setdefault(name, set()).update(_LABEL.findall(labels))
    return {name: sorted(labels) for name, labels in sorted(found.items())}


if __name__ == "__main__":
    telemetry.setup("fluence-metric-names")
    print(json.dumps(scrape()))
