"""The webhook gates every pod of the fluence profile for the queue, once."""

from __future__ import annotations

from typing import Any

from fluence import names
from tests.support.admission import apply_patch, container, pod, response_ops, review
from tests.unit.webhook.test_app import CONTRACT, client_for, post
from webhook.admission import Admission

GATE = {"name": names.QUEUE_GATE}
QUEUED = client_for(Admission(lambda: CONTRACT))


def admitted(obj: dict[str, Any], client: Any = QUEUED) -> Any:
    _, ops = response_ops(post(review(obj), client).content)
    return apply_patch(obj, ops)


def test_a_fluence_pod_is_gated_for_the_queue() -> None:
    out = admitted(pod(container(requests={"cpu": "1"})))
    assert out["spec"]["schedulingGates"] == [GATE]


def test_other_gates_are_kept_and_ours_goes_after_them() -> None:
    p = pod(container())
    p["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    out = admitted(p)
    assert out["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, GATE]


def test_a_pod_already_gated_by_the_queue_is_not_gated_twice() -> None:
    once = admitted(pod(container()))
    again = post(review(once), QUEUED).json()["response"]
    assert "patch" not in again


def test_pods_of_other_schedulers_are_not_gated() -> None:
    out = admitted(pod(container(), scheduler="default-scheduler"))
    assert "schedulingGates" not in out["spec"]


def test_without_the_queue_pods_are_not_gated() -> None:
    out = admitted(pod(container()), client_for(Admission(lambda: CONTRACT, queue=False)))
    assert "schedulingGates" not in out["spec"]


def test_an_unauthenticated_webhook_still_gates() -> None:
    """Gating gives a forger nothing: the queue places the pod as any other of its profile."""
    unauthenticated = client_for(Admission(lambda: CONTRACT, authenticated=False))
    assert admitted(pod(container()), unauthenticated)["spec"]["schedulingGates"] == [GATE]
