"""The ``fluence-webhook`` process over real TLS: reviews, limits, cert rotation, config reload."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from hypothesis import HealthCheck, given, settings

from fluence import names
from tests.integration.test_webhook_process import WebhookProcess
from tests.support.admission import QPU, apply_patch, container, pod, response_ops, review
from tests.unit.webhook.test_app import reviews
from webhook.certs import generate, write_files

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resources.yaml"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WebhookProcess]:
    resources = tmp_path / "resources.yaml"
    shutil.copy(EXAMPLE, resources)
    with WebhookProcess(tmp_path, resources=resources) as proc:
        yield proc


@pytest.fixture
def client(server: WebhookProcess) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def mutate(client: httpx.Client, body: Any) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/mutate", content=data, headers={"content-type": "application/json"})


def test_quantum_pod_is_patched_over_tls(client: httpx.Client) -> None:
    p = pod(container(requests={QPU: "1"}))
    r = mutate(client, review(p, uid="u-1"))
    assert r.status_code == 200
    response, ops = response_ops(r.content)
    assert response["uid"] == "u-1"
    env = {e["name"] for e in apply_patch(p, ops)["spec"]["containers"][0]["env"]}
    # The example backends carry a QRMI type: QRMI's own job variables come with them.
    qrmi_job = {
        "QRMI_JOB_QPU_RESOURCES",
        "QRMI_JOB_QPU_TYPES",
        "SLURM_JOB_QPU_RESOURCES",
        "SLURM_JOB_QPU_TYPES",
    }
    assert (
        env == {"QRMI_BACKEND", "FLUXION_BACKEND", "FLUXION_QRMI_TYPE", "FLUXION_VENDOR"} | qrmi_job
    )


def test_classical_pod_gets_only_the_queue_gate_and_bad_bodies_get_4xx(
    client: httpx.Client,
) -> None:
    _, ops = response_ops(mutate(client, review(pod(container()))).content)
    assert ops == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": names.QUEUE_GATE}]}
    ]
    assert mutate(client, b"nope").status_code == 400
    assert mutate(client, b"x" * (3 * 1024 * 1024 + 1)).status_code == 413
    assert client.get("/healthz").text == "ok"
    assert client.get("/metrics/").status_code == 200


@pytest.mark.slow
def test_http2_carries_reviews_and_survives_a_413(server: WebhookProcess) -> None:
    """The API server talks HTTP/2 to webhooks and multiplexes every call on one connection."""
    with httpx.Client(base_url=server.url, verify=server.ssl_context(), http2=True) as c:
        p = pod(container(requests={QPU: "1"}))
        first = mutate(c, review(p))
        assert first.http_version == "HTTP/2"
        assert response_ops(first.content)[1]
        assert mutate(c, b"x" * (3 * 1024 * 1024 + 1)).status_code == 413
        for i in range(1100):  # past Hypercorn's default per-connection request limit
            r = mutate(c, review(p, uid=f"u{i}"))
            assert r.status_code == 200 and r.json()["response"]["uid"] == f"u{i}"


def served_certificate(server: WebhookProcess) -> x509.Certificate:
    """The certificate the server presents (read without verifying it, client cert given)."""
    context = server.ssl_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_rotated_certificate_is_served_without_restart(server: WebhookProcess) -> None:
    old = x509.load_pem_x509_certificate(server.bundle.cert_pem)
    assert served_certificate(server) == old
    pid = server.proc.pid if server.proc else None
    new_bundle = generate(["localhost"], ["127.0.0.1"], days=3)
    write_files(new_bundle, server.tls_dir)
    new = x509.load_pem_x509_certificate(new_bundle.cert_pem)
    deadline = time.monotonic() + 20
    while served_certificate(server) != new:
        assert time.monotonic() < deadline, "rotated certificate not served within 20s"
        time.sleep(0.2)
    assert server.proc is not None and server.proc.pid == pid and server.proc.poll() is None
    # Clients trusting only the new CA get through; the old CA no longer verifies.
    with server.client() as c:
        assert mutate(c, review(pod(container()))).status_code == 200
    old_ca = ssl.create_default_context(cadata=server.bundle.ca_pem.decode())
    assert server.client_files is not None
    old_ca.load_cert_chain(server.client_files.cert_file, server.client_files.key_file)
    with httpx.Client(verify=old_ca) as c, pytest.raises(httpx.ConnectError):
        c.get(server.url + "/healthz")


def test_resources_config_change_changes_the_variables(
    server: WebhookProcess, client: httpx.Client
) -> None:
    resources = Path(server.env["FLUENCE_RESOURCES"])
    resources.write_text(
        "resources:\n- type: qpu\n  name: aer\n  attributes: {region: us-east, vendor: ibm}\n"
    )
    p = pod(container(requests={QPU: "1"}))
    _, ops = response_ops(mutate(client, review(p)).content)
    env = {e["name"] for e in apply_patch(p, ops)["spec"]["containers"][0]["env"]}
    assert env == {"QRMI_BACKEND", "FLUXION_BACKEND", "FLUXION_REGION", "FLUXION_VENDOR"}


def test_fuzzed_reviews_against_the_process(server: WebhookProcess) -> None:
    with server.client() as c:

        @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
        @given(reviews)
        def check(body: Any) -> None:
            r = mutate(c, body)
            assert r.status_code in (200, 400), r.text
            if r.status_code == 200:
                out = r.json()
                assert out["kind"] == "AdmissionReview"
                assert out["response"]["uid"] == body["request"]["uid"]
                assert out["response"]["allowed"] is True

        check()
    assert server.proc is not None and server.proc.poll() is None
