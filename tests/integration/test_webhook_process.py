"""Running ``fluence-webhook`` as a real process over TLS, and its life cycle.

:class:`WebhookProcess` is shared with the e2e tests and the benchmark: it
issues a certificate with :mod:`webhook.certs`, starts the console script on a
free loopback port and always stops it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fluence import pki
from testbed.processes import StartStop, free_port, terminate
from webhook.certs import CertBundle, generate, write_files

SCRIPT = Path(sys.executable).with_name("fluence-webhook")


class WebhookProcess(StartStop):
    """A ``fluence-webhook`` child process serving HTTPS (and plain probes) on 127.0.0.1."""

    def __init__(
        self,
        workdir: Path,
        *,
        resources: Path | None = None,
        kubeconfig: Path | None = None,
        extra_env: dict[str, str] | None = None,
        client: pki.ClientFiles | None = None,
        mtls: bool = True,
    ) -> None:
        self.workdir = workdir
        self.tls_dir = workdir / "tls"
        self.bundle: CertBundle = generate(["localhost"], ["127.0.0.1"], days=2)
        write_files(self.bundle, self.tls_dir)
        self.client_files: pki.ClientFiles | None = None
        if mtls:
            self.client_files = client or pki.issue_client_cert(workdir / "client", "apiserver")
        self.port = free_port()
        self.probe_port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.probe_url = f"http://127.0.0.1:{self.probe_port}"
        self.log_path = workdir / "webhook.log"
        self.env = {
            **os.environ,
            "FLUENCE_BIND": f"127.0.0.1:{self.port}",
            "FLUENCE_PROBE_BIND": f"127.0.0.1:{self.probe_port}",
            "FLUENCE_TLS_CERT": str(self.tls_dir / "tls.crt"),
            "FLUENCE_TLS_KEY": str(self.tls_dir / "tls.key"),
            "FLUENCE_CLIENT_CA": str(self.client_files.ca_file if self.client_files else ""),
            "FLUENCE_RESOURCES": str(resources or ""),
            "FLUENCE_KUBECONFIG": str(kubeconfig or ""),
            "FLUENCE_GANG": "true" if kubeconfig else "false",
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.crt"

    def ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        """Trusts the serving CA; presents the client certificate unless told not to."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client_cert and self.client_files is not None:
            context.load_cert_chain(self.client_files.cert_file, self.client_files.key_file)
        return context

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.ssl_context(), timeout=10)

    def probes(self) -> httpx.Client:
        """Plain HTTP to the probe port, as the kubelet and Prometheus call it."""
        return httpx.Client(base_url=self.probe_url, timeout=10)

    def start(self, timeout: float = 30.0) -> WebhookProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(SCRIPT)], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        with self.probes() as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"fluence-webhook exited: {self.log_path.read_text()}")
                try:
                    if c.get("/readyz", timeout=1).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"fluence-webhook not ready in {timeout}s: {self.log_path.read_text()}")

    def stop(self, grace: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        return terminate(self.proc, grace)


@pytest.fixture
def webhook_process(tmp_path: Path) -> Iterator[WebhookProcess]:
    with WebhookProcess(tmp_path) as proc:
        yield proc


def test_sigterm_stops_the_server_cleanly(webhook_process: WebhookProcess) -> None:
    with webhook_process.client() as c:
        assert c.get("/healthz").text == "ok"
    assert webhook_process.stop() == 0


def test_missing_certificate_exits_with_a_message(tmp_path: Path) -> None:
    proc = WebhookProcess(tmp_path)
    (proc.tls_dir / "tls.crt").unlink()
    with pytest.raises(RuntimeError, match="exited"):
        proc.start(timeout=20)
    assert proc.stop() == 1
    assert "FLUENCE_TLS_CERT" in proc.log_path.read_text()


def negotiated_protocol(proc: WebhookProcess) -> str | None:
    """What ALPN picks when a client offers HTTP/2 first, as kube-apiserver does."""
    context = proc.ssl_context()
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", proc.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.selected_alpn_protocol()


@pytest.mark.parametrize(("http2", "expected"), [("true", "h2"), ("false", "http/1.1")])
def test_http2_setting_decides_what_tls_clients_negotiate(
    tmp_path: Path, http2: str, expected: str
) -> None:
    with WebhookProcess(tmp_path, extra_env={"FLUENCE_HTTP2": http2}) as proc:
        assert negotiated_protocol(proc) == expected
        with proc.client() as c:
            assert c.get("/healthz").text == "ok"
