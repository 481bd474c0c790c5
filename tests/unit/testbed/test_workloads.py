"""The pods the demo creates on behalf of the Deployment and Job controllers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fluence import names
from testbed.workloads import (
    ANNOTATION_JOB_COMPLETION_INDEX,
    ENV_JOB_COMPLETION_INDEX,
    LABEL_JOB_COMPLETION_INDEX,
    LABEL_POD_TEMPLATE_HASH,
    load_documents,
    pods_for_job,
    pods_for_replicaset,
    replicaset_for,
    template_hash,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def stored(body: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
    """What the apiserver answers on create, as far as the builders care."""
    out = copy.deepcopy(body)
    out["metadata"].update(namespace="demo", uid=uid)
    return out


def test_deployment_gets_a_replicaset_and_replicas_pods_with_its_template() -> None:
    podgroup, deployment = load_documents(EXAMPLES / "podgroup.yaml")
    assert podgroup["kind"] == "PodGroup" and podgroup["metadata"]["name"] == "training"
    rs = replicaset_for(stored(deployment, "dep-uid"))
    pth = template_hash(deployment["spec"]["template"])
    assert rs["metadata"]["name"] == f"training-{pth}"
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "dep-uid"
    assert rs["spec"]["selector"]["matchLabels"] == {
        "app": "training",
        LABEL_POD_TEMPLATE_HASH: pth,
    }
    pods = pods_for_replicaset(stored(rs, "rs-uid"))
    assert len(pods) == 2
    assert len({p["metadata"]["name"] for p in pods}) == 2
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"training-{pth}-")
        assert pod["metadata"]["namespace"] == "demo"
        assert pod["metadata"]["labels"] == {"app": "training", LABEL_POD_TEMPLATE_HASH: pth}
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("ReplicaSet", "rs-uid", True)
        assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "training"}


def test_template_hash_is_stable_and_follows_the_template() -> None:
    (deployment,) = [
        d for d in load_documents(EXAMPLES / "podgroup.yaml") if d["kind"] == "Deployment"
    ]
    template = deployment["spec"]["template"]
    assert template_hash(template) == template_hash(copy.deepcopy(template))
    changed = copy.deepcopy(template)
    changed["spec"]["containers"][0]["image"] = "busybox:1.37"
    assert template_hash(changed) != template_hash(template)


def test_indexed_job_gets_one_pod_per_index_owned_by_the_job() -> None:
    (job,) = load_documents(EXAMPLES / "job-gang.yaml")
    pods = pods_for_job(stored(job, "job-uid"))
    assert [p["metadata"]["labels"][LABEL_JOB_COMPLETION_INDEX] for p in pods] == ["0", "1"]
    for index, pod in enumerate(pods):
        meta = pod["metadata"]
        assert meta["name"].startswith(f"job-gang-{index}-")
        assert meta["annotations"][ANNOTATION_JOB_COMPLETION_INDEX] == str(index)
        assert meta["labels"][names.LABEL_GROUP] == "job-gang"
        owner = meta["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"]) == (
            "batch/v1",
            "Job",
            "job-gang",
            "job-uid",
        )
        assert pod["spec"]["hostname"] == f"job-gang-{index}"
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env[ENV_JOB_COMPLETION_INDEX]["valueFrom"]["fieldRef"]["fieldPath"] == (
            f"metadata.annotations['{ANNOTATION_JOB_COMPLETION_INDEX}']"
        )
    # The template itself is left as it was.
    assert "env" not in job["spec"]["template"]["spec"]["containers"][0]


def test_job_pod_count_is_parallelism_capped_by_completions() -> None:
    (job,) = load_documents(EXAMPLES / "job-gang.yaml")
    job = stored(job)
    job["spec"].update(parallelism=5, completions=3)
    assert len(pods_for_job(job)) == 3
    job["spec"].pop("completions")
    job["spec"].pop("completionMode")
    pods = pods_for_job(job)
    assert len(pods) == 5
    assert all(LABEL_JOB_COMPLETION_INDEX not in p["metadata"].get("labels", {}) for p in pods)


def test_load_documents_skips_non_objects(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("resources: []\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n")
    assert [d["kind"] for d in load_documents(path)] == ["Pod"]
