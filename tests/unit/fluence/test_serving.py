"""ReloadingTLS with a client CA trusts that CA and nothing else, and follows its file."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from fluence import pki
from fluence.serving import ReloadingTLS, TLSFiles


def serving(tmp_path: Path) -> TLSFiles:
    cert, key, _ = pki.issue_serving_cert(tmp_path / "tls", ["127.0.0.1"])
    return TLSFiles(cert, key)


def test_without_a_client_ca_no_client_certificate_is_asked_for(tmp_path: Path) -> None:
    tls = ReloadingTLS(serving(tmp_path))
    assert tls.context.verify_mode == ssl.CERT_NONE


def test_a_client_ca_is_required_and_is_the_only_trust(tmp_path: Path) -> None:
    """Not the system store on top, which would admit any publicly issued client cert."""
    client = pki.issue_client_cert(tmp_path / "client", "apiserver")
    tls = ReloadingTLS(serving(tmp_path), client_ca=client.ca_file)
    assert tls.context.verify_mode == ssl.CERT_REQUIRED
    assert tls.context.cert_store_stats()["x509_ca"] == 1
    assert tls.context.get_ca_certs()[0]["subject"] == ((("commonName", "apiserver-ca"),),)


def test_a_new_client_ca_replaces_the_old_one(tmp_path: Path) -> None:
    client = pki.issue_client_cert(tmp_path / "client", "apiserver")
    tls = ReloadingTLS(serving(tmp_path), client_ca=client.ca_file)
    assert not tls.reload_if_changed()
    successor = pki.CertificateAuthority("successor")
    client.ca_file.write_bytes(successor.cert_pem)
    stamp = os.stat(client.ca_file).st_mtime + 5
    os.utime(client.ca_file, (stamp, stamp))
    assert tls.reload_if_changed()
    assert tls.current is not tls.context
    (only,) = tls.current.get_ca_certs()
    assert only["subject"] == ((("commonName", "successor"),),)
    # A broken file keeps the last good context.
    client.ca_file.write_text("garbage\n")
    os.utime(client.ca_file, (stamp + 5, stamp + 5))
    current = tls.current
    assert not tls.reload_if_changed()
    assert tls.current is current
