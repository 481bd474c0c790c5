"""How many pods the real controllers give what the examples apply."""

from __future__ import annotations

from pathlib import Path

from testbed.workloads import expected_pods, load_documents

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_expected_pods_follow_each_controller() -> None:
    assert expected_pods({"kind": "Pod"}) == 1
    assert expected_pods({"kind": "Deployment", "spec": {"replicas": 3}}) == 3
    assert expected_pods({"kind": "Deployment", "spec": {}}) == 1
    assert expected_pods({"kind": "Job", "spec": {"parallelism": 4, "completions": 2}}) == 2
    assert expected_pods({"kind": "Job", "spec": {"parallelism": 4}}) == 4
    assert expected_pods({"kind": "Job", "spec": {"parallelism": 4, "suspend": True}}) == 0
    assert expected_pods({"kind": "PodGroup", "spec": {}}) == 0


def test_the_examples_expect_the_pods_the_demo_shows() -> None:
    total = {
        f.name: sum(expected_pods(d) for d in load_documents(f))
        for f in sorted(EXAMPLES.glob("*.yaml"))
    }
    assert total["job-gang.yaml"] == 2
    assert total["label-gang.yaml"] == 2
    assert total["quantum-pod.yaml"] == 1


def test_load_documents_skips_non_objects(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("---\n# only a comment\n---\nfoo: bar\n---\napiVersion: v1\nkind: Pod\n")
    assert load_documents(path) == [{"apiVersion": "v1", "kind": "Pod"}]
