"""Serving certificates rotate under load without one failed admission.

``fluence-webhook certs`` (the real command) issues the certificates into the
directory a running ``fluence-webhook`` serves from; a client that trusts only
the bundle the command wrote (as the API server trusts only ``caBundle``) posts
AdmissionReviews the whole time, while the serving certificate is renewed twice
from the same CA and then the CA itself is replaced.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from cryptography import x509

from fluence import pki
from tests.integration.test_webhook_process import WebhookProcess
from tests.integration.test_webhook_server import served_certificate
from tests.support.admission import container, pod, review

SCRIPT = Path(sys.executable).with_name("fluence-webhook")


def certs(out: Path, *extra: str) -> None:
    done = subprocess.run(
        [
            str(SCRIPT),
            "certs",
            "--out",
            str(out),
            "--dns",
            "localhost",
            "--ip",
            "127.0.0.1",
            "--days",
            "2",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


class Client(threading.Thread):
    """Posts reviews back to back, each time trusting the bundle currently on disk (and
    presenting the client certificate the server asks for)."""

    def __init__(self, url: str, bundle: Path, client: pki.ClientFiles | None) -> None:
        super().__init__(daemon=True)
        self.url, self.bundle, self.client = url, bundle, client
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        body = review(pod(container()))
        while not self.stop.is_set():
            context = ssl.create_default_context(cadata=self.bundle.read_text())
            if self.client is not None:
                context.load_cert_chain(self.client.cert_file, self.client.key_file)
            try:
                with httpx.Client(verify=context, timeout=5) as c:
                    r = c.post(self.url + "/mutate", json=body)
                if r.status_code == 200:
                    self.ok += 1
                else:
                    self.failures.append(f"HTTP {r.status_code}")
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
            time.sleep(0.02)


def wait_served(server: WebhookProcess, pem: bytes, timeout: float = 20) -> None:
    want = x509.load_pem_x509_certificate(pem)
    deadline = time.monotonic() + timeout
    while served_certificate(server) != want:
        assert time.monotonic() < deadline, "the new certificate was not served in time"
        time.sleep(0.2)


def test_renewals_and_a_ca_rotation_fail_no_admission(tmp_path: Path) -> None:
    server = WebhookProcess(tmp_path)
    tls = server.tls_dir
    certs(tls)  # replaces the fixture's pair before the server starts
    ca_key = (tls / "ca" / "ca.key").read_bytes()
    with server:
        client = Client(server.url, tls / "ca.crt", server.client_files)
        client.start()
        try:
            bundles = [(tls / "ca.crt").read_bytes()]
            for _ in range(2):  # serving certificate renewed from the same CA
                before = served_certificate(server)
                certs(tls, "--renew-days", "5")
                wait_served(server, (tls / "tls.crt").read_bytes())
                assert served_certificate(server) != before
                bundles.append((tls / "ca.crt").read_bytes())
            assert bundles[0] == bundles[1] == bundles[2]
            assert (tls / "ca" / "ca.key").read_bytes() == ca_key
            certs(tls, "--ca-renew-days", "4000")  # the CA is replaced
            wait_served(server, (tls / "tls.crt").read_bytes())
            assert (tls / "ca" / "ca.key").read_bytes() != ca_key
            assert len(x509.load_pem_x509_certificates((tls / "ca.crt").read_bytes())) == 2
            time.sleep(1.0)
        finally:
            client.stop.set()
            client.join(10)
    assert client.failures == []
    assert client.ok > 20
