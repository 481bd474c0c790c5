"""POST /mutate end to end inside the process: status codes, responses, and fuzzing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from fluence import names, resources
from tests.support.admission import QPU, apply_patch, container, pod, response_ops, review
from tests.unit.webhook.test_gang import FakeCluster
from webhook.admission import Admission
from webhook.app import create_app
from webhook.env import EnvContract
from webhook.gang import GangWiring
from webhook.settings import ClientAuth, WebhookSettings

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "resources.yaml"
CONTRACT = EnvContract.from_config(resources.load(EXAMPLE), loaded=True)
SETTINGS = WebhookSettings(max_body_bytes=64 * 1024)


def client_for(admission: Admission, ready: bool = True) -> TestClient:
    """Requests arrive as on the TLS port (scheme https), where /mutate is answered."""
    app = create_app(SETTINGS, admission, ready=lambda: ready)
    return TestClient(app, base_url="https://testserver")


CLIENT = client_for(Admission(lambda: CONTRACT))


def post(body: Any, client: TestClient = CLIENT) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/mutate", content=data, headers={"content-type": "application/json"})


def test_quantum_pod_gets_a_base64_json_patch_and_the_uid_back() -> None:
    p = pod(container(requests={QPU: "1"}))
    r = post(review(p, uid="abc-123"))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    out = r.json()
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    response, ops = response_ops(r.content)
    assert response["uid"] == "abc-123" and response["allowed"] is True
    env = apply_patch(p, ops)["spec"]["containers"][0]["env"]
    assert {e["name"] for e in env} >= {"QRMI_BACKEND", "FLUXION_BACKEND"}


def test_nothing_to_change_means_no_patch_fields() -> None:
    unqueued = client_for(Admission(lambda: CONTRACT, queue=False))
    r = post(review(pod(container(requests={"cpu": "1"}))), unqueued)
    assert r.json()["response"] == {"uid": "0f1e2d3c", "allowed": True}


def test_malformed_reviews_are_400_with_a_reason() -> None:
    good = review(pod(container()))
    no_uid = json.loads(json.dumps(good))
    del no_uid["request"]["uid"]
    empty_uid = json.loads(json.dumps(good))
    empty_uid["request"]["uid"] = ""
    cases = {
        b"{not json": "not JSON",
        b"[]": "admission.k8s.io/v1",
        json.dumps({**good, "apiVersion": "admission.k8s.io/v1beta1"}).encode(): "v1beta1",
        json.dumps({**good, "kind": "Pod"}).encode(): "kind",
        json.dumps({k: v for k, v in good.items() if k != "request"}).encode(): "no 'request'",
        json.dumps(no_uid).encode(): "uid",
        json.dumps(empty_uid).encode(): "empty 'uid'",
    }
    for body, reason in cases.items():
        r = post(body)
        assert r.status_code == 400, body
        assert reason in r.text, (body, r.text)


def test_non_pod_and_non_create_are_allowed_with_a_warning() -> None:
    for r in (
        post(review({"apiVersion": "v1", "kind": "ConfigMap"}, kind="ConfigMap")),
        post(review(pod(container(requests={QPU: "1"})), operation="UPDATE")),
    ):
        assert r.status_code == 200
        response = r.json()["response"]
        assert response["allowed"] is True and "patch" not in response
        assert "only mutates Pod CREATE" in response["warnings"][0]


def test_object_that_is_not_a_pod_is_allowed_with_a_warning() -> None:
    for obj in (None, [1, 2], {"spec": {"containers": "nope"}}, {"metadata": 3}):
        r = post(review(obj))
        assert r.status_code == 200, obj
        response = r.json()["response"]
        assert response["allowed"] is True and "patch" not in response
        assert response["warnings"], obj


def test_body_over_the_limit_is_413() -> None:
    big = review(pod(container(requests={QPU: "1"}), annotations={"x": "y" * 70_000}))
    r = post(big)
    assert r.status_code == 413
    assert "FLUENCE_MAX_BODY_BYTES" in r.text


def test_internal_error_admits_with_a_warning_instead_of_500() -> None:
    def broken() -> EnvContract:
        raise RuntimeError("bug")

    r = post(review(pod(container(requests={QPU: "1"}))), client_for(Admission(broken)))
    assert r.status_code == 200
    response = r.json()["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "internal error" in response["warnings"][0]


def test_gang_pod_is_linked_and_dry_run_creates_nothing() -> None:
    cluster = FakeCluster()
    wiring = GangWiring(cluster)
    wiring.served = True
    client = client_for(Admission(lambda: CONTRACT, wiring))
    p = pod(container(), labels={names.LABEL_GROUP: "g"}, annotations={"x": "1"})
    _, ops = response_ops(post(review(p, namespace="team", dry_run=True), client).content)
    assert ops == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": names.QUEUE_GATE}]},
        {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "g"}},
    ]
    assert cluster.created == []
    _, ops2 = response_ops(post(review(p, namespace="team"), client).content)
    assert ops2 == ops
    assert [(b["metadata"]["namespace"], b["metadata"]["name"]) for b in cluster.created] == [
        ("team", "g")
    ]


def test_gang_link_is_idempotent_on_reinvocation() -> None:
    wiring = GangWiring(FakeCluster())
    wiring.served = True
    client = client_for(Admission(lambda: CONTRACT, wiring))
    p = pod(container(requests={QPU: "1"}), labels={names.LABEL_GROUP: "g"})
    _, ops = response_ops(post(review(p), client).content)
    assert {op["path"] for op in ops} == {
        "/spec/containers/0/env",
        "/spec/schedulingGates",
        "/spec/schedulingGroup",
    }
    again = post(review(apply_patch(p, ops)), client).json()["response"]
    assert "patch" not in again and "warnings" not in again


def test_probes_and_metrics() -> None:
    assert CLIENT.get("/healthz").text == "ok"
    assert CLIENT.get("/readyz").status_code == 200
    assert CLIENT.get("/readyz").text == "ok; client auth: none"
    assert client_for(Admission(lambda: CONTRACT), ready=False).get("/readyz").status_code == 503
    post(review(pod(container())))
    metrics = CLIENT.get("/metrics/")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")


def test_mutate_is_refused_on_the_plain_port_and_the_mode_is_reported() -> None:
    """The probe port (scheme http) serves the kubelet and Prometheus, never reviews."""
    app = create_app(SETTINGS, Admission(lambda: CONTRACT), client_auth=ClientAuth.MTLS)
    plain = TestClient(app, base_url="http://testserver")
    refused = post(review(pod(container(requests={QPU: "1"}))), plain)
    assert refused.status_code == 403 and "TLS only" in refused.text
    assert plain.get("/readyz").text == "ok; client auth: mtls"


# --- fuzzing -----------------------------------------------------------------------

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
keys = st.sampled_from(["QRMI_BACKEND", "HOME", QPU, "cpu", "name", "env", "resources"])
loose_containers = st.fixed_dictionaries(
    {"name": st.text(max_size=5) | json_values},
    optional={
        "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["QRMI_BACKEND", "A"])}))
        | json_values,
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "requests": st.dictionaries(keys, st.just("1"), max_size=2) | json_values,
                "limits": st.dictionaries(keys, st.just(1), max_size=2),
            },
        ),
    },
)
loose_pods = st.fixed_dictionaries(
    {
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(loose_containers, max_size=3) | json_values},
            optional={
                "schedulerName": st.sampled_from([names.SCHEDULER_NAME, "x"]) | json_values,
                "initContainers": st.lists(loose_containers, max_size=2) | json_values,
            },
        )
    },
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(
                    st.sampled_from([names.LABEL_GROUP, "a"]), st.text(max_size=5)
                ),
                "annotations": st.dictionaries(
                    st.sampled_from([names.ANNOTATION_ENV_CONTAINERS, names.ANNOTATION_GROUP_SIZE]),
                    st.text(max_size=5),
                )
                | json_values,
            },
        )
    },
)
reviews = st.one_of(
    json_values,
    st.builds(
        lambda obj, uid, op, kind, dry: review(obj, uid=uid, operation=op, kind=kind, dry_run=dry),
        loose_pods | json_values,
        st.text(max_size=6),
        st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
        st.sampled_from(["Pod", "Node"]),
        st.booleans(),
    ),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reviews)
def test_fuzzed_reviews_never_5xx_and_patches_apply(body: Any) -> None:
    r = post(body)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert r.text
        return
    out = r.json()
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    response, ops = response_ops(r.content)
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is True
    if ops:
        patched = apply_patch(body["request"]["object"], ops)
        again = review(patched, uid="again")
        assert "patch" not in post(again).json()["response"]
