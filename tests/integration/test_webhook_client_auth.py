"""Only the API server gets a review answered: the webhook process over mutual TLS.

With ``FLUENCE_CLIENT_CA`` the TLS port asks every client for a certificate that CA
signed. A forged AdmissionReview posted from anywhere else (no certificate, or one
from another CA) never reaches the handler; the kubelet's probes and Prometheus go to
a plain port that does not answer ``/mutate``. Without a client CA the webhook says
so (log, ``/readyz``, metric) and lends nobody its rights.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fluence import names, pki
from tests.integration.test_webhook_process import WebhookProcess
from tests.support.admission import QPU, container, pod, response_ops, review
from webhook.admission import UNAUTHENTICATED_GANG

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resources.yaml"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def forged_review() -> dict[str, Any]:
    """A gang pod 'from the job controller' for another tenant's Job."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "theirs", "uid": "u"}
    body = review(
        pod(
            container(requests={QPU: "1"}),
            labels={names.LABEL_GROUP: "theirs"},
            owners=[{**owner, "controller": True}],
        ),
        namespace="other-tenant",
    )
    body["request"]["userInfo"] = {"username": JOB_CONTROLLER, "groups": ["system:masters"]}
    return body


def post_over_tls(proc: WebhookProcess, context: ssl.SSLContext) -> int:
    """POST one review on a fresh TLS connection; the HTTP status, or the TLS error raised."""
    data = json.dumps(forged_review()).encode()
    with (
        socket.create_connection(("127.0.0.1", proc.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(
            b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(data)}\r\nconnection: close\r\n\r\n".encode()
            + data
        )
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    if not answer:
        raise ConnectionError("closed without an answer")
    return int(answer.split(b" ", 2)[1])


def other_ca_context(proc: WebhookProcess, workdir: Path) -> ssl.SSLContext:
    """Trusts the webhook, presents a client certificate from a CA the webhook never saw."""
    stranger = pki.issue_client_cert(workdir / "stranger", "system:kube-apiserver")
    context = proc.ssl_context(client_cert=False)
    context.load_cert_chain(stranger.cert_file, stranger.key_file)
    return context


@pytest.fixture
def mtls(tmp_path: Path) -> Iterator[WebhookProcess]:
    with WebhookProcess(tmp_path, resources=EXAMPLE) as proc:
        yield proc


def test_only_a_client_certificate_from_the_client_ca_gets_a_review_answered(
    mtls: WebhookProcess, tmp_path: Path
) -> None:
    for refused in (mtls.ssl_context(client_cert=False), other_ca_context(mtls, tmp_path)):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post_over_tls(mtls, refused)
    assert post_over_tls(mtls, mtls.ssl_context()) == 200
    with mtls.client() as c:
        answered = c.post("/mutate", json=forged_review())
    response, ops = response_ops(answered.content)
    assert response["allowed"] is True and ops  # the backend variables


def test_probes_and_metrics_answer_on_the_plain_port_and_mutate_does_not(
    mtls: WebhookProcess,
) -> None:
    with mtls.probes() as c:
        assert c.get("/healthz").text == "ok"
        ready = c.get("/readyz")
        assert ready.status_code == 200 and "client auth: mtls" in ready.text
        refused = c.post("/mutate", json=forged_review())
        assert refused.status_code == 403 and "TLS only" in refused.text
        metrics = c.get("/metrics/").text
    assert 'fluence_webhook_client_auth{mode="mtls"' in metrics
    mode = {
        line.split('mode="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("fluence_webhook_client_auth{")
    }
    assert mode == {"mtls": 1.0, "none": 0.0}
    # Nothing plain on the TLS port either.
    with (
        httpx.Client(base_url=mtls.url.replace("https", "http"), timeout=5) as c,
        pytest.raises(httpx.TransportError),
    ):
        c.post("/mutate", json=forged_review())


def test_a_replaced_client_ca_is_followed_without_a_restart(
    mtls: WebhookProcess, tmp_path: Path
) -> None:
    """The old CA is dropped, not kept beside the new one."""
    assert mtls.client_files is not None and mtls.proc is not None
    pid = mtls.proc.pid
    old = mtls.ssl_context()
    successor = pki.issue_client_cert(tmp_path / "next", "apiserver")
    mtls.client_files.ca_file.write_bytes(successor.ca_file.read_bytes())
    new = mtls.ssl_context(client_cert=False)
    new.load_cert_chain(successor.cert_file, successor.key_file)
    deadline = time.monotonic() + 20
    while True:
        try:
            assert post_over_tls(mtls, new) == 200
            break
        except (ssl.SSLError, ConnectionError):
            assert time.monotonic() < deadline, "the new client CA was not loaded within 20s"
            time.sleep(0.2)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        post_over_tls(mtls, old)
    assert mtls.proc.pid == pid and mtls.proc.poll() is None


def test_an_unreadable_client_ca_stops_the_start(tmp_path: Path) -> None:
    """Fail closed: a broken CA file is not taken for no CA at all."""
    proc = WebhookProcess(tmp_path)
    assert proc.client_files is not None
    proc.client_files.ca_file.write_text("not a certificate\n")
    with pytest.raises(RuntimeError, match="exited"):
        proc.start(timeout=20)
    assert proc.stop() == 1
    assert "FLUENCE_CLIENT_CA" in proc.log_path.read_text()


def test_without_a_client_ca_the_mode_is_stated_and_no_gang_is_wired(tmp_path: Path) -> None:
    with WebhookProcess(tmp_path, resources=EXAMPLE, mtls=False) as proc:
        with proc.client() as c:
            response, _ = response_ops(c.post("/mutate", json=forged_review()).content)
        assert UNAUTHENTICATED_GANG in response["warnings"]
        with proc.probes() as c:
            assert "client auth: none" in c.get("/readyz").text
            assert 'fluence_webhook_client_auth{mode="none"' in c.get("/metrics/").text
    started = [
        json.loads(line) for line in proc.log_path.read_text().splitlines() if line.startswith("{")
    ]
    (said,) = [line for line in started if "client_auth" in line]
    assert said["client_auth"] == "none" and said["level"] == "warning"
