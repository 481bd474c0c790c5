"""Certificates from fluence.pki: SANs, usages and a chain that verifies."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fluence.pki import (
    CertificateAuthority,
    issue_serving_cert,
    write_service_account_keys,
)


def test_serving_cert_has_ip_and_dns_sans(tmp_path: Path) -> None:
    cert_path, key_path, ca_pem = issue_serving_cert(tmp_path, ["127.0.0.1", "localhost"])
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert key_path.stat().st_mode & 0o077 == 0
    assert ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")


def test_serving_cert_chain_verifies_against_returned_ca(tmp_path: Path) -> None:
    cert_path, _, ca_pem = issue_serving_cert(tmp_path)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_tls_handshake_succeeds_with_ca_pem_as_trust(tmp_path: Path) -> None:
    """What a webhook caller does: trust only ca_pem and check the host name."""
    cert_path, key_path, ca_pem = issue_serving_cert(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_path, key_path)
    client_ctx = ssl.create_default_context(cadata=ca_pem.decode())
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    hosts = ("127.0.0.1", "localhost")

    def serve() -> None:
        for _ in hosts:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        for host in hosts:
            raw = socket.create_connection(("127.0.0.1", port))
            with client_ctx.wrap_socket(raw, server_hostname=host) as tls:
                assert tls.recv(2) == b"ok"
    finally:
        thread.join(5)
        listener.close()


def test_shared_ca_issues_certs_for_several_servers(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    a, _, pem_a = issue_serving_cert(tmp_path / "a", ca=ca)
    b, _, pem_b = issue_serving_cert(tmp_path / "b", ["10.0.0.7"], ca=ca)
    assert pem_a == pem_b == ca.cert_pem
    for path in (a, b):
        x509.load_pem_x509_certificate(path.read_bytes()).verify_directly_issued_by(ca.cert)


def test_client_cert_carries_user_and_groups() -> None:
    ca = CertificateAuthority()
    issued = ca.issue_client("admin", ("system:masters",))
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    cert.verify_directly_issued_by(ca.cert)


def test_service_account_keys_are_a_matching_pair(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    public_path, private_path = write_service_account_keys(tmp_path)
    private = serialization.load_pem_private_key(private_path.read_bytes(), password=None)
    public = serialization.load_pem_public_key(public_path.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()
