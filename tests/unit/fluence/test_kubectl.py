"""``kubectl fluence`` output from fixed documents, and the CLI driven against the real app."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from fluence.group_jobspec import compute_jobspec
from fluence.kubectl import cli, render
from fluence.kubectl.client import ExtenderClient, Reply
from scheduler_extender.app import create_app
from scheduler_extender.inspect import inspect_routes
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env

STATE: dict[str, Any] = {
    "version": 1,
    "nodes": {
        "node-a": {
            "core": {"capacity": 4000, "allocated": 3000, "free": 1000},
            "memory": {"capacity": 8192, "allocated": 1024, "free": 7168},
        },
        "node-b": {
            "core": {"capacity": 4000, "allocated": 500, "free": 3500},
            "memory": {"capacity": 8192, "allocated": 0, "free": 8192},
        },
    },
    "backends": {
        "ibm_fez": {"held": True, "pod": "ml/sampler", "attributes": {"vendor": "ibm"}},
        "ibm_marrakesh": {"held": False, "pod": None, "attributes": {"vendor": "ibm"}},
    },
    "groups": {
        "ml/train": {"pods": {"ml/train-0": "node-a", "ml/train-1": "node-b"}, "backend": None},
        "ml/sampler": {"pods": {"ml/sampler": "node-a"}, "backend": "ibm_fez"},
    },
    "pods": {
        "ml/train-0": {
            "node": "node-a",
            "state": "committed",
            "group": "ml/train",
            "amounts": {"core": 2500, "memory": 1024},
            "backend": None,
        },
        "ml/train-1": {
            "node": "node-b",
            "state": "tentative",
            "group": "ml/train",
            "amounts": {"core": 500},
            "backend": None,
        },
        "ml/sampler": {
            "node": "node-a",
            "state": "committed",
            "group": "ml/sampler",
            "amounts": {"core": 500},
            "backend": "ibm_fez",
        },
    },
}


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_status_table_lists_nodes_totals_backends_and_groups() -> None:
    text = render.status_text(STATE, render.Painter(False))
    got = rows(text)
    assert ["NODE", "RESOURCE", "CAPACITY", "ALLOCATED", "FREE", "USED"] in got
    assert ["node-a", "cpu", "4", "3", "1", "75%"] in got
    assert ["node-a", "memory", "8Gi", "1Gi", "7Gi", "12%"] in got
    assert ["node-b", "cpu", "4", "500m", "3500m", "12%"] in got
    assert ["TOTAL", "cpu", "8", "3500m", "4500m", "43%"] in got
    assert ["TOTAL", "memory", "16Gi", "1Gi", "15Gi", "6%"] in got
    assert ["ibm_fez", "held", "ml/sampler", "vendor=ibm"] in got
    assert ["ibm_marrakesh", "free", "-", "vendor=ibm"] in got
    assert ["TOTAL", "1/2", "held"] in got
    assert [
        "ml/train",
        "ml/train-0",
        "node-a",
        "committed",
        "-",
        "cpu",
        "2500m,",
        "memory",
        "1Gi",
    ] in got
    assert ["ml/train", "ml/train-1", "node-b", "tentative", "-", "cpu", "500m"] in got
    assert ["ml/sampler", "ml/sampler", "node-a", "committed", "ibm_fez", "cpu", "500m"] in got
    assert "\x1b[" not in text


def test_coloured_table_keeps_the_columns_aligned() -> None:
    plain = render.status_text(STATE, render.Painter(False))
    coloured = render.status_text(STATE, render.Painter(True))
    assert "\x1b[31m" in coloured or "\x1b[33m" in coloured
    stripped = render._ANSI.sub("", coloured)
    assert stripped == plain


def test_status_json_totals_sum_the_nodes() -> None:
    doc = render.status_doc(STATE)
    assert doc["totals"]["nodes"]["core"] == {"capacity": 8000, "allocated": 3500, "free": 4500}
    assert doc["totals"]["backends"] == {"capacity": 2, "allocated": 1, "free": 1}


def test_dot_output_is_a_digraph_of_the_containment_tree() -> None:
    env = Env([make_node("a", cpu="4")])
    dot = render.graph_dot(env.graph.jgf, env.graph.node_usage())
    assert dot.startswith("digraph fluxion {") and dot.rstrip().endswith("}")
    assert '"a\\nnode"' in dot and '"core0\\ncore\\n0/4"' in dot
    edges = [ln for ln in dot.splitlines() if "->" in ln]
    assert len(edges) == len(env.graph.jgf["graph"]["edges"])


class AppTransport:
    """Sends the CLI's requests into the real extender app, in process."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def request(
        self, method: str, path: str, params: dict[str, str] | None = None, body: bytes = b""
    ) -> Reply:
        r = self.client.request(method, path, params=params, content=body or None)
        return Reply(r.status_code, r.content)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    e = Env([make_node("a", cpu="4"), make_node("b", cpu="4")])
    app = create_app(e.scheduler, max_body_bytes=1 << 20, metrics=False)
    app.router.routes.extend(inspect_routes(e.scheduler))
    client = TestClient(app)

    @contextlib.contextmanager
    def connect(_: Any) -> Iterator[ExtenderClient]:
        yield ExtenderClient(AppTransport(client))

    monkeypatch.setattr(cli, "connect", connect)
    yield e


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.run(cli.parser().parse_args(list(argv)), out)
    return code, out.getvalue()


def test_match_exit_codes_follow_the_verdict(env: Env, tmp_path: Path) -> None:
    blocker = make_pod("blocker", cpu="3", raw=True)
    env.cluster.add(blocker)
    env.filter(blocker, ["a", "b"])
    for cores, status, code in ((1000, "fits", 0), (3500, "busy", 1), (9000, "unsatisfiable", 2)):
        path = tmp_path / f"{cores}.yaml"
        path.write_text(yaml.safe_dump(compute_jobspec((("core", cores),), 2, "what-if")))
        got, text = run("--no-color", "match", str(path))
        assert got == code, text
        assert text.startswith(f"{status}:")
    got, text = run("match", str(tmp_path / "1000.yaml"), "-o", "json")
    assert json.loads(text)["status"] == "fits"


def test_status_and_explain_through_the_cli(env: Env) -> None:
    env.cluster.add_group("g", 2)
    pods = [make_pod(f"g{i}", cpu="1", group="g", raw=True) for i in range(2)]
    for p in pods:
        env.cluster.add(p)
    env.filter(pods[0], ["a", "b"])
    code, text = run("status", "-o", "json")
    doc = json.loads(text)
    assert code == 0 and doc["totals"]["nodes"]["core"]["allocated"] == 2000
    code, text = run("--no-color", "status")
    assert ["TOTAL", "cpu", "8", "2", "6", "25%"] in rows(text)
    assert "\x1b[" not in text
    code, text = run("--no-color", "explain", "g1", "-n", "default")
    assert "Verdict:  placed" in text and "Group:    default/g" in text
    code, text = run("explain", "default/g1", "-o", "yaml")
    assert yaml.safe_load(text)["holding"]["state"] == "tentative"


def test_graph_render_without_graphviz_says_so(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("fluence.kubectl.cli.shutil.which", lambda _: None)
    code, _ = run("graph", "--render", str(tmp_path / "g.png"))
    assert code == cli.EXIT_BAD_INPUT
    assert "Graphviz 'dot' is not installed" in capsys.readouterr().err
    code, text = run("graph", "-o", "jgf")
    assert code == 0 and json.loads(text)["graph"]["nodes"][0]["metadata"]["type"] == "cluster"
    code, text = run("graph", "-o", "dot")
    assert code == 0 and text.startswith("digraph")


def test_unreachable_extender_is_exit_3_with_advice(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--url", "http://127.0.0.1:9", "status"])
    assert code == cli.EXIT_UNREACHABLE
    assert "cannot reach the extender" in capsys.readouterr().err


def test_queue_lists_waiting_groups_in_order_with_their_expected_start(env: Env) -> None:
    blocker = make_pod("blocker", cpu="4", raw=True)
    blocker["metadata"]["annotations"] = {"fluence.flux-framework.org/runtime": "10m"}
    env.cluster.add(blocker)
    env.filter(blocker, ["a", "b"])
    code, text = run("--no-color", "queue")
    assert code == 0 and text == "no group is waiting for capacity\n"
    env.cluster.add_group("big", 2)
    big = [make_pod(f"big-{i}", cpu="4", group="big", raw=True) for i in range(2)]
    for p in big:
        env.cluster.add(p)
    out = env.filter(big[0], ["a", "b"])
    assert "reserved from" in json.dumps(out)
    code, text = run("--no-color", "queue")
    got = rows(text)
    assert ["#", "GROUP", "PRIORITY", "PODS", "RUNTIME", "WAITING", "START", "IN"] in got
    line = next(r for r in got if r[1] == "default/big")
    assert line[0] == "1" and line[3] == "2" and line[4] == "60m"
    assert line[7] in ("10m", "9m")  # the blocker's planned end
    code, text = run("queue", "-o", "json")
    (doc,) = json.loads(text)
    assert doc["reserved"] and doc["starts_in"] in (599, 600) and doc["position"] == 1


def test_plan_says_fits_starts_at_or_never_for_a_manifest_and_changes_nothing(
    env: Env, tmp_path: Path
) -> None:
    blocker = make_pod("blocker", cpu="4", raw=True)
    blocker["metadata"]["annotations"] = {"fluence.flux-framework.org/runtime": "10m"}
    env.cluster.add(blocker)
    env.filter(blocker, ["a", "b"])
    before = env.graph.node_usage()

    def job(name: str, parallelism: int, cpu: str) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {
                    "parallelism": parallelism,
                    "template": {
                        "spec": {
                            "schedulerName": "fluence",
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                        }
                    },
                },
            }
        )

    cases = {
        "small": (job("small", 2, "1"), "fits", 0),
        "both": (job("both", 2, "4"), "busy", 1),  # needs the blocker's node too
        "huge": (job("huge", 3, "4"), "unsatisfiable", 2),
    }
    for name, (text, status, code) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n" + text)
        got, out = run("--no-color", "plan", "-f", str(path))
        assert got == code and out.startswith(f"{status}:"), out
    got, out = run("plan", "-f", str(tmp_path / "both.yaml"), "-o", "json")
    doc = json.loads(out)
    assert (
        doc["pods"] == 2 and doc["starts_in"] in (599, 600) and "would start at" in doc["message"]
    )
    assert env.graph.node_usage() == before
    (tmp_path / "empty.yaml").write_text("kind: Service\n")
    assert run("plan", "-f", str(tmp_path / "empty.yaml"))[0] == cli.EXIT_BAD_INPUT
