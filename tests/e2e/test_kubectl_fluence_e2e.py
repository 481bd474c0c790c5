"""``kubectl fluence`` against the real extender and kube-scheduler on the local control plane.

The CLI runs as a child process (``python -m fluence.kubectl``) with ``--url``
pointing at a ``fluence-extender`` process that serves the inspection routes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api

from fluence.group_jobspec import compute_jobspec
from fluence.pods import decode_pod, pod_requests, split_requests
from testbed import ControlPlane
from tests.e2e.test_extender_e2e import Extender, Stack, Suite, wait_for
from tests.support.extender import fluence_scheduler

REPO = Path(__file__).resolve().parents[2]


class InspectingExtender(Extender):
    """The extender entry point with the inspection routes mounted (tests.support.extender)."""

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.extender"],
            env=self.env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(self.ready, 60, "the extender to become ready", self.log_tail)


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("kubectl-fluence")
    extender = InspectingExtender(workdir, control_plane.kubeconfig)
    with fluence_scheduler(control_plane, extender) as scheduler:
        yield Stack(control_plane, extender, scheduler)


@pytest.fixture
def suite(stack: Stack, kube: ApiClient, namespace: str) -> Iterator[Suite]:
    with Suite(stack, kube, namespace) as s:
        yield s


def kubectl_fluence(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fluence.kubectl", "--url", url, *args],
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def bound_requests(core: CoreV1Api, nodes: set[str]) -> dict[str, int]:
    """Sum of the graph-unit requests of every running pod bound to one of ``nodes``."""
    total: dict[str, int] = {}
    pods = core.api_client.sanitize_for_serialization(core.list_pod_for_all_namespaces())
    for doc in pods["items"]:
        pod = decode_pod(json.dumps(doc))
        if pod.spec.node_name not in nodes or pod.terminal:
            continue
        compute, _ = split_requests(pod_requests(pod))
        for t, n in compute.items():
            total[t] = total.get(t, 0) + n
    return total


def test_status_totals_equal_the_bound_pods_requests(suite: Suite) -> None:
    suite.add_nodes(2, cpu="4", memory="8Gi")
    suite.podgroup("train", 2)
    for i in range(2):
        suite.pod(f"train-{i}", cpu="1500m", memory="1Gi", group="train")
    suite.pod("solo", cpu="500m", memory="300Mi")
    suite.wait_bound("train-0", "train-1", "solo")
    done = kubectl_fluence(suite.stack.extender.url, "status", "-o", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    expected = bound_requests(suite.core, set(doc["nodes"]))
    assert expected["core"] >= 3500
    got = {t: u["allocated"] for t, u in doc["totals"]["nodes"].items() if u["allocated"]}
    assert got == expected
    group = doc["groups"][f"{suite.ns}/train"]
    assert set(group["pods"]) == {f"{suite.ns}/train-0", f"{suite.ns}/train-1"}
    table = kubectl_fluence(suite.stack.extender.url, "status")
    assert table.returncode == 0 and "\x1b[" not in table.stdout
    assert any(line.split()[:2] == ["TOTAL", "cpu"] for line in table.stdout.splitlines())


def test_the_real_kubectl_runs_fluence_as_a_plugin(suite: Suite) -> None:
    """``kubectl fluence`` as users type it: kubectl finds kubectl-fluence on PATH."""
    kubectl = suite.stack.cp.binaries.kubectl
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "NO_COLOR": "1", "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    listed = subprocess.run(
        [str(kubectl), "plugin", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert any(line.endswith("/kubectl-fluence") for line in listed.stdout.splitlines()), (
        listed.stdout + listed.stderr
    )
    done = subprocess.run(
        [
            str(kubectl),
            "fluence",
            "--kubeconfig",
            str(suite.stack.cp.kubeconfig),
            "--url",
            suite.stack.extender.url,
            "status",
            "-o",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "totals" in json.loads(done.stdout)


def test_explain_names_why_gang_members_wait_and_where_placed_ones_went(suite: Suite) -> None:
    node = suite.add_nodes(1, cpu="4")[0]
    suite.pod("blocker", cpu="3")
    suite.wait_bound("blocker")
    url = suite.stack.extender.url
    done = kubectl_fluence(url, "explain", "blocker", "-n", suite.ns, "-o", "json")
    placed = json.loads(done.stdout)
    assert placed["verdict"] == "placed" and placed["holding"]["node"] == node
    suite.podgroup("quorum", 3)
    for i in range(2):
        suite.pod(f"quorum-{i}", cpu="100m", group="quorum")
    done = kubectl_fluence(url, "explain", f"{suite.ns}/quorum-0")
    assert done.returncode == 0, done.stderr
    assert "waiting for 1 more pod(s) of group" in done.stdout
    suite.podgroup("big", 2)
    for i in range(2):
        suite.pod(f"big-{i}", cpu="1", group="big")
    wait_for(
        lambda: suite.unschedulable_message("big-0") or suite.unschedulable_message("big-1"),
        60,
        "the gang to be reported unschedulable",
        lambda: suite.describe("big-0", "big-1"),
    )
    assert suite.node_of("big-0") == "" and suite.node_of("big-1") == ""
    done = kubectl_fluence(url, "explain", "big-1", "-n", suite.ns, "-o", "json")
    doc = json.loads(done.stdout)
    assert doc["verdict"] == "busy", doc
    assert f"group {suite.ns}/big does not fit now" in doc["reason"]
    assert doc["jobspecs"] and doc["jobspecs"][0]["pods"] == 2


def test_match_on_an_impossible_jobspec_exits_2_and_changes_nothing(
    suite: Suite, tmp_path: Path
) -> None:
    suite.add_nodes(1, cpu="4")
    suite.pod("sitter", cpu="1")
    suite.wait_bound("sitter")
    url = suite.stack.extender.url
    huge = tmp_path / "huge.yaml"
    huge.write_text(yaml.safe_dump(compute_jobspec((("core", 1_000_000),), 1, "what-if")))
    before = suite.stack.extender.state()
    done = kubectl_fluence(url, "match", str(huge))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("unsatisfiable:")
    assert suite.stack.extender.state() == before
    small = tmp_path / "small.json"
    small.write_text(json.dumps(compute_jobspec((("core", 1000),), 1, "what-if")))
    done = kubectl_fluence(url, "match", str(small), "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    fit: dict[str, Any] = json.loads(done.stdout)
    assert fit["status"] == "fits" and fit["nodes"]
    assert suite.stack.extender.state() == before
