"""Without client authentication a forged review borrows none of the webhook's rights.

Anyone who reaches the port can claim to be the job controller or an admin, name any
namespace and any owner. Built for that mode, the webhook creates no PodGroup, asks
no SubjectAccessReview and reads no Job; the backend variables, a function of the pod
alone, still come. Built for mutual TLS, the same review is wired, which shows the
cluster would have been asked.
"""

from __future__ import annotations

from typing import Any

import pytest

from fluence import names
from tests.support.admission import QPU, container, pod, response_ops, review
from tests.unit.webhook.test_app import CONTRACT, client_for, post
from tests.unit.webhook.test_gang import FakeCluster
from webhook.__main__ import build_admission
from webhook.admission import UNAUTHENTICATED_GANG
from webhook.settings import ClientAuth, WebhookSettings

JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}
FORGED_USERS = {
    "job controller": {"username": "system:serviceaccount:kube-system:job-controller"},
    "cluster admin": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
}


class Cluster(FakeCluster):
    """The fake API server, also answering Job deadline reads (and recording them)."""

    def job_deadline(self, namespace: str, name: str) -> int | None:
        self.job_reads.append((namespace, name))
        return 600


def forged(user: dict[str, Any], namespace: str) -> dict[str, Any]:
    body = review(
        pod(
            container(requests={QPU: "1"}),
            labels={names.LABEL_GROUP: "theirs"},
            annotations={names.ANNOTATION_GROUP_SIZE: "64"},
            owners=[JOB],
        ),
        namespace=namespace,
    )
    body["request"]["userInfo"] = user
    return body


async def admitted(mode: ClientAuth, body: dict[str, Any]) -> tuple[Cluster, Any]:
    cluster = Cluster(jobs={"train": 4})
    admission = build_admission(
        WebhookSettings(api_budget_seconds=5), lambda: CONTRACT, cluster, mode
    )
    if admission.wiring is not None:
        await admission.wiring.refresh()
    return cluster, response_ops(post(body, client_for(admission)).content)


@pytest.mark.parametrize("who", sorted(FORGED_USERS))
@pytest.mark.parametrize("namespace", ["other-tenant", "kube-system"])
async def test_a_forged_review_creates_no_podgroup_and_reads_no_job(
    who: str, namespace: str
) -> None:
    cluster, (response, ops) = await admitted(ClientAuth.NONE, forged(FORGED_USERS[who], namespace))
    assert cluster.created == [] and cluster.job_reads == [] and cluster.reviews == []
    paths = {op["path"] for op in ops}
    # The variables and the queue's gate; no link, no deadline.
    assert paths == {"/spec/containers/0/env", "/spec/schedulingGates"}
    assert response["warnings"] == [UNAUTHENTICATED_GANG]


async def test_with_mutual_tls_the_same_review_is_acted_on() -> None:
    """The API server vouches for the review: the job controller's pod is wired."""
    cluster, (_, ops) = await admitted(
        ClientAuth.MTLS, forged(FORGED_USERS["job controller"], "team")
    )
    assert [b["metadata"]["namespace"] for b in cluster.created] == ["team"]
    assert ("team", "train") in cluster.job_reads
    assert {"/spec/schedulingGroup", "/spec/activeDeadlineSeconds"} <= {op["path"] for op in ops}


def test_the_mode_follows_the_client_ca_file(tmp_path: Any) -> None:
    ca = tmp_path / "ca.crt"
    assert WebhookSettings(client_ca="").client_auth() is ClientAuth.NONE
    assert WebhookSettings(client_ca=str(ca)).client_auth() is ClientAuth.NONE
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert WebhookSettings(client_ca=str(ca)).client_auth() is ClientAuth.MTLS
