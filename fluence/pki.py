"""A small certificate authority: serving and client certificates, and key pairs.

The webhook uses it for its self-signed setup (``fluence-webhook certs``); the local
control plane for the apiserver's serving certificate, the admin client certificate,
the service-account key pair, serving certificates for local webhooks whose CA
goes into a caBundle, and the client certificate the apiserver presents to webhooks
(from a CA of its own, which is all a webhook trusts). Everything is ECDSA P-256,
which is quick to generate and accepted by Go and Python TLS alike.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# Certificates start slightly in the past so that small clock differences between
# processes never make a fresh certificate "not yet valid".
BACKDATE = datetime.timedelta(minutes=5)
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Digital signature, plus certificate and CRL signing for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """PKCS#8 PEM of a private key, unencrypted (the files live in a private work dir)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _san(hosts: tuple[str, ...] | list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


@dataclass(frozen=True)
class IssuedCert:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.crt`` and ``<stem>.key`` (mode 0600) and return their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path = directory / f"{stem}.crt"
        key_path = directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(
        self,
        common_name: str = "fluence-test-ca",
        *,
        validity: datetime.timedelta = VALIDITY,
        backdate: datetime.timedelta = BACKDATE,
    ) -> None:
        self._key = _new_key()
        self._validity = validity
        self._backdate = backdate
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - backdate)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @classmethod
    def from_pem(
        cls,
        cert_pem: bytes,
        key_pem_bytes: bytes,
        *,
        validity: datetime.timedelta = VALIDITY,
        backdate: datetime.timedelta = BACKDATE,
    ) -> CertificateAuthority:
        """An existing CA (its certificate and key), to issue more leaves from it.

        ValueError when the PEM is not a CA certificate with its ECDSA key.
        """
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem_bytes, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key is not an ECDSA key")
        if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
            raise ValueError("the CA key does not belong to the CA certificate")
        try:
            constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.ca:
            raise ValueError("the certificate is not a CA certificate")
        ca = cls.__new__(cls)
        ca._key = key
        ca._cert = cert
        ca._validity = validity
        ca._backdate = backdate
        return ca

    @property
    def cert(self) -> x509.Certificate:
        return self._cert

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self._key)

    def write(self, directory: Path, stem: str = "ca") -> tuple[Path, Path]:
        """Write the CA certificate and key; returns ``(cert_path, key_path)``."""
        return IssuedCert(self.cert_pem, self.key_pem).write(directory, stem)

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        hosts: tuple[str, ...] | list[str] = (),
        validity: datetime.timedelta | None = None,
    ) -> IssuedCert:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - self._backdate)
            .not_valid_after(now + (validity or self._validity))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return IssuedCert(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))

    def issue_serving(
        self,
        hosts: tuple[str, ...] | list[str] = DEFAULT_HOSTS,
        common_name: str | None = None,
        *,
        validity: datetime.timedelta | None = None,
    ) -> IssuedCert:
        """A TLS server certificate valid for ``hosts`` (IP addresses or DNS names)."""
        if not hosts:
            raise ValueError("a serving certificate needs at least one host (IP or DNS name)")
        return self._issue(
            _name(common_name or hosts[0]), ExtendedKeyUsageOID.SERVER_AUTH, hosts, validity
        )

    def issue_client(
        self,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        validity: datetime.timedelta | None = None,
    ) -> IssuedCert:
        """A TLS client certificate; Kubernetes reads CN as the user and O as groups."""
        return self._issue(
            _name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH, validity=validity
        )


@dataclass(frozen=True)
class ClientFiles:
    """A client certificate and key on disk, and the CA a server must trust to accept it."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def issue_client_cert(
    directory: Path | str,
    common_name: str,
    *,
    ca: CertificateAuthority | None = None,
    stem: str = "client",
) -> ClientFiles:
    """Write ``<stem>-ca.crt``, ``<stem>.crt`` and ``<stem>.key`` for a TLS client.

    Uses a fresh CA unless one is given (the CA's key is not written). A server
    verifying clients against ``ca_file`` accepts this certificate and no other CA's.
    """
    authority = ca if ca is not None else CertificateAuthority(f"{common_name}-ca")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_file = directory / f"{stem}-ca.crt"
    ca_file.write_bytes(authority.cert_pem)
    cert_file, key_file = authority.issue_client(common_name).write(directory, stem)
    return ClientFiles(ca_file, cert_file, key_file)


def write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """Key pair the apiserver signs and verifies service-account tokens with.

    Returns ``(public_key_path, private_key_path)``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key()
    public = directory / "sa.pub"
    private = directory / "sa.key"
    public.write_bytes(public_key_pem(key))
    private.touch(mode=0o600)
    private.write_bytes(key_pem(key))
    return public, private


def issue_serving_cert(
    directory: Path | str,
    hosts: tuple[str, ...] | list[str] = DEFAULT_HOSTS,
    *,
    ca: CertificateAuthority | None = None,
    stem: str = "tls",
) -> tuple[Path, Path, bytes]:
    """Write a serving certificate for a local server (e.g. a webhook).

    Uses a fresh CA unless one is given. Returns ``(cert_path, key_path, ca_pem)``;
    ``ca_pem`` is what a client (or a webhook's caBundle) must trust.
    """
    authority = ca if ca is not None else CertificateAuthority()
    cert_path, key_path = authority.issue_serving(hosts).write(Path(directory), stem)
    return cert_path, key_path, authority.cert_pem
