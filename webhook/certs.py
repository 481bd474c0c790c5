"""Serving certificates for clusters without cert-manager, rotated without a failed admission.

``fluence-webhook certs`` keeps a long-lived private CA (10 years by default)
and a short-lived serving certificate it issues for the webhook Service
(``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc``, ``<svc>.<ns>.svc.cluster.local``,
plus any ``--dns``/``--ip``). Run again (by hand, or by the chart's CronJob),
it changes only what is due:

- the serving certificate is re-issued from the same CA when it has less than
  ``--renew-days`` left or no longer names the Service, so ``caBundle`` stays
  byte for byte the same and the API server never meets a certificate it does
  not trust;
- the CA itself is replaced when it has less than ``--ca-renew-days`` left; the
  bundle then holds the new CA and the old one (until the old one expires), and
  ``caBundle`` is updated before the new serving certificate is stored, so
  either certificate verifies at every moment of the switch.

Where it keeps them:

- ``--secret NAME``: a ``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``,
  and ``ca.crt``, the bundle) that the webhook mounts, and an Opaque Secret
  ``NAME-ca`` with the CA's certificate and key, which the webhook never sees;
- ``--out DIR``: ``ca.crt``, ``tls.crt`` and ``tls.key`` in a directory, with
  the CA kept in ``--ca-dir`` (``DIR/ca`` by default) across runs;
- ``--webhook-config``: ``clientConfig.caBundle`` of every webhook in that
  MutatingWebhookConfiguration.

The server reloads the files when the Secret changes, so renewing needs no
restart. With cert-manager, skip all this: the chart's CA issuer chain and the
``cert-manager.io/inject-ca-from`` annotation do the same.

``--apiserver-client DIR`` makes the other direction: what the API server needs
to prove itself to the webhook (mutual TLS). It keeps a CA for that alone in
``DIR/client-ca`` and writes ``DIR/client-ca.crt`` (the bundle the webhook
trusts: ``--client-ca-configmap`` also stores it in that ConfigMap),
``DIR/admission-kubeconfig.yaml`` (a user named after the webhook's Service,
holding a client certificate from that CA) and ``DIR/admission-config.yaml``
(the AdmissionConfiguration for kube-apiserver's
``--admission-control-config-file``, pointing at ``--admission-kubeconfig-path``,
where the kubeconfig is copied on the control-plane hosts).

Example::

    fluence-webhook certs --service fluence-webhook --namespace kube-system \\
        --secret fluence-webhook-tls --webhook-config fluence-webhook
    fluence-webhook certs --service fluence-webhook --namespace kube-system \\
        --apiserver-client ./apiserver --client-ca-configmap fluence-webhook-client-ca
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from fluence import names as k8s_names
from fluence.pki import CertificateAuthority

log = logging.getLogger(__name__)

CA_COMMON_NAME = "fluence-webhook-ca"
CLIENT_CA_COMMON_NAME = "fluence-webhook-client-ca"
CLIENT_COMMON_NAME = "kube-apiserver-fluence-webhook-client"
ADMISSION_KUBECONFIG_PATH = "/etc/kubernetes/fluence/admission-kubeconfig.yaml"
BACKDATE = dt.timedelta(hours=1)
"""Validity starts an hour back, so that clocks a little behind ours accept a new certificate."""


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes of the trusted CA bundle and a serving certificate with its key."""

    ca_pem: bytes
    """Every CA certificate to trust (the current one first): what caBundle holds."""
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Authority:
    """The current CA (certificate and key) and older CA certificates still trusted."""

    cert_pem: bytes
    key_pem: bytes
    previous_pem: bytes = b""

    def ca(self) -> CertificateAuthority:
        return CertificateAuthority.from_pem(self.cert_pem, self.key_pem, backdate=BACKDATE)

    def bundle_pem(self) -> bytes:
        """The current CA, then the previous ones that have not expired."""
        kept = [c for c in _certs(self.previous_pem) if _left(c) > dt.timedelta(0)]
        return self.cert_pem + b"".join(_pem(c) for c in kept)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach ``service`` in ``namespace``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


def _pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _left(cert: x509.Certificate) -> dt.timedelta:
    return cert.not_valid_after_utc - _now()


def new_authority(
    *, days: int = 3650, previous: Authority | None = None, common_name: str = CA_COMMON_NAME
) -> Authority:
    """A fresh CA; ``previous`` (the CA it replaces) stays trusted until it expires."""
    ca = CertificateAuthority(common_name, validity=dt.timedelta(days=days), backdate=BACKDATE)
    older = previous.bundle_pem() if previous is not None else b""
    return Authority(ca.cert_pem, ca.key_pem, older)


def renew_authority(
    authority: Authority | None,
    *,
    days: int,
    renew_days: int,
    common_name: str = CA_COMMON_NAME,
) -> Authority:
    """``authority`` while it has more than ``renew_days`` left, else its successor."""
    if authority is not None:
        try:
            current = x509.load_pem_x509_certificate(authority.cert_pem)
            authority.ca()
        except ValueError:
            log.warning("the stored CA is unreadable; making a new one")
            return new_authority(days=days, common_name=common_name)
        if _left(current) > dt.timedelta(days=renew_days):
            return authority
        log.info("the CA is due for renewal; the old one stays trusted until it expires")
    return new_authority(days=days, previous=authority, common_name=common_name)


def issue(authority: Authority, names: Sequence[str], *, days: int) -> CertBundle:
    """A serving certificate for ``names`` (DNS names and IP addresses) from the CA."""
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    leaf = authority.ca().issue_serving(list(names), validity=dt.timedelta(days=days))
    return CertBundle(authority.bundle_pem(), leaf.cert_pem, leaf.key_pem)


def generate(
    dns_names: Sequence[str], ip_addresses: Sequence[str] = (), *, days: int = 365
) -> CertBundle:
    """A new CA (outliving the leaf by a day) and a serving certificate, valid ``days`` days."""
    authority = new_authority(days=days + 1)
    return issue(authority, [*dns_names, *ip_addresses], days=days)


def covers(
    bundle: CertBundle,
    dns_names: Sequence[str],
    renew_days: int,
    authority: Authority | None = None,
) -> bool:
    """True when the serving certificate names every DNS name, lives ``renew_days`` more,
    and (given ``authority``) was issued by its current CA with the current bundle."""
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = set(san.get_values_for_type(x509.DNSName))
    if not set(dns_names) <= have or _left(cert) <= dt.timedelta(days=renew_days):
        return False
    if authority is None:
        return True
    try:
        issuer = x509.load_pem_x509_certificate(authority.cert_pem)
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return bundle.ca_pem == authority.bundle_pem()


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_files(bundle: CertBundle, directory: Path) -> None:
    """Write ``ca.crt``, ``tls.key`` then ``tls.crt``, each replaced atomically.

    The key goes first: a server polling the files sees a mismatched pair for a
    moment at most, fails that reload and keeps its old certificate until both
    are in place.
    """
    directory.mkdir(parents=True, exist_ok=True)
    _write_atomic(directory / "ca.crt", bundle.ca_pem, 0o644)
    _write_atomic(directory / "tls.key", bundle.key_pem, 0o600)
    _write_atomic(directory / "tls.crt", bundle.cert_pem, 0o644)


def read_files(directory: Path) -> CertBundle | None:
    try:
        return CertBundle(
            (directory / "ca.crt").read_bytes(),
            (directory / "tls.crt").read_bytes(),
            (directory / "tls.key").read_bytes(),
        )
    except OSError:
        return None


def read_authority_dir(directory: Path) -> Authority | None:
    try:
        return Authority(
            (directory / "ca.crt").read_bytes(),
            (directory / "ca.key").read_bytes(),
            (directory / "previous.crt").read_bytes()
            if (directory / "previous.crt").exists()
            else b"",
        )
    except OSError:
        return None


def write_authority_dir(authority: Authority, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_atomic(directory / "ca.key", authority.key_pem, 0o600)
    _write_atomic(directory / "ca.crt", authority.cert_pem, 0o644)
    _write_atomic(directory / "previous.crt", authority.previous_pem, 0o644)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(data: dict[str, str], key: str) -> bytes:
    try:
        return base64.b64decode(data.get(key, ""), validate=True)
    except ValueError:
        return b""


class SecretStore:
    """The two Secrets: the webhook's TLS Secret and the CA Secret beside it."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.ca_name = f"{name}-ca"

    def _read(self, name: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core.read_namespaced_secret(name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _write(self, existing: Any, name: str, kind: str, data: dict[str, bytes]) -> None:
        from kubernetes import client

        version = existing.metadata.resource_version if existing and existing.metadata else None
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name, namespace=self.namespace, resource_version=version
            ),
            type=kind,
            data={k: _b64(v) for k, v in data.items()},
        )
        if existing is None:
            self.core.create_namespaced_secret(self.namespace, body)
        else:
            self.core.replace_namespaced_secret(name, self.namespace, body)

    def load(self) -> tuple[Authority | None, CertBundle | None, Any, Any]:
        """What the Secrets hold; a Secret made empty at install (the chart's) holds nothing."""
        ca_secret, tls_secret = self._read(self.ca_name), self._read(self.name)
        authority = bundle = None
        if ca_secret is not None and _unb64(ca_secret.data or {}, "ca.crt"):
            authority = Authority(
                _unb64(ca_secret.data, "ca.crt"),
                _unb64(ca_secret.data, "ca.key"),
                _unb64(ca_secret.data, "previous.crt"),
            )
        if tls_secret is not None and _unb64(tls_secret.data or {}, "tls.crt"):
            bundle = CertBundle(
                _unb64(tls_secret.data, "ca.crt"),
                _unb64(tls_secret.data, "tls.crt"),
                _unb64(tls_secret.data, "tls.key"),
            )
        return authority, bundle, ca_secret, tls_secret

    def store_authority(self, authority: Authority, existing: Any) -> None:
        data = {"ca.crt": authority.cert_pem, "ca.key": authority.key_pem}
        data["previous.crt"] = authority.previous_pem
        self._write(existing, self.ca_name, "Opaque", data)

    def store_bundle(self, bundle: CertBundle, existing: Any) -> None:
        data = {"tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem, "ca.crt": bundle.ca_pem}
        self._write(existing, self.name, "kubernetes.io/tls", data)


def admission_kubeconfig(
    user: str,
    *,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    cert_pem: bytes = b"",
    key_pem: bytes = b"",
) -> dict[str, Any]:
    """The kubeconfig the API server reads its webhook client credentials from.

    The API server picks the ``users`` entry named after the webhook it calls:
    ``<service>.<namespace>.svc`` (with or without ``:<port>``), ``host:port`` for a
    URL, or ``*`` for every webhook. Files by path, or the PEM embedded.
    """
    if cert_file is not None and key_file is not None:
        credentials = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    else:
        credentials = {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)}
    return {"apiVersion": "v1", "kind": "Config", "users": [{"name": user, "user": credentials}]}


def admission_configuration(kubeconfig: Path | str) -> dict[str, Any]:
    """kube-apiserver's ``--admission-control-config-file``: mutating webhooks are called
    with the credentials of ``kubeconfig`` (an absolute path on the API server's host)."""
    return {
        "apiVersion": k8s_names.ADMISSION_CONFIG_API,
        "kind": k8s_names.ADMISSION_CONFIG_KIND,
        "plugins": [
            {
                "name": k8s_names.MUTATING_ADMISSION_PLUGIN,
                "configuration": {
                    "apiVersion": k8s_names.ADMISSION_CONFIG_API,
                    "kind": k8s_names.WEBHOOK_ADMISSION_KIND,
                    "kubeConfigFile": str(kubeconfig),
                },
            }
        ],
    }


def store_client_ca(api_client: Any, namespace: str, name: str, bundle: bytes) -> None:
    """Create or replace the ConfigMap the webhook mounts its client CA from."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        data={k8s_names.WEBHOOK_CLIENT_CA_KEY: bundle.decode("ascii")},
    )
    try:
        core.replace_namespaced_config_map(name, namespace, body)
    except ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_config_map(namespace, body)


def run_apiserver_client(args: argparse.Namespace) -> int:
    """``--apiserver-client DIR``: the API server's webhook client credentials (module docstring).

    The CA is kept across runs (renewed like the serving CA, the old one trusted until
    it expires); the client certificate is issued anew each run.
    """
    if not Path(args.admission_kubeconfig_path).is_absolute():
        log.error("certs: --admission-kubeconfig-path must be an absolute path")
        return 2
    out: Path = args.apiserver_client
    ca_dir = out / "client-ca"
    authority = renew_authority(
        read_authority_dir(ca_dir),
        days=args.ca_days,
        renew_days=args.ca_renew_days,
        common_name=CLIENT_CA_COMMON_NAME,
    )
    write_authority_dir(authority, ca_dir)
    leaf = authority.ca().issue_client(
        CLIENT_COMMON_NAME, validity=dt.timedelta(days=args.client_days)
    )
    user = f"{args.service}.{args.namespace}.svc"
    bundle = authority.bundle_pem()
    _write_atomic(out / "client-ca.crt", bundle, 0o644)
    kubeconfig = admission_kubeconfig(user, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)
    _write_atomic(out / "admission-kubeconfig.yaml", yaml.safe_dump(kubeconfig).encode(), 0o600)
    config = admission_configuration(args.admission_kubeconfig_path)
    _write_atomic(out / "admission-config.yaml", yaml.safe_dump(config).encode(), 0o644)
    if args.client_ca_configmap:
        from fluence.kube_client import api_client as kube_api_client

        store_client_ca(
            kube_api_client(args.kubeconfig), args.namespace, args.client_ca_configmap, bundle
        )
    log.info(
        "API server client certificate",
        extra={
            "dir": str(out),
            "user": user,
            "configmap": args.client_ca_configmap,
            "kubeconfig_path": args.admission_kubeconfig_path,
        },
    )
    return 0


@dataclass(frozen=True)
class Plan:
    """What one run decided: the CA and serving certificate to use, and what changed."""

    authority: Authority
    bundle: CertBundle
    new_authority: bool
    new_leaf: bool


def plan(
    authority: Authority | None,
    bundle: CertBundle | None,
    names: Sequence[str],
    dns_names: Sequence[str],
    *,
    days: int,
    renew_days: int,
    ca_days: int,
    ca_renew_days: int,
) -> Plan:
    """Keep what is current, renew what is due (see the module docstring)."""
    current = renew_authority(authority, days=ca_days, renew_days=ca_renew_days)
    changed_ca = current is not authority
    if bundle is not None and not changed_ca and covers(bundle, dns_names, renew_days, current):
        return Plan(current, bundle, False, False)
    return Plan(current, issue(current, names, days=days), changed_ca, True)


def patch_ca_bundle(api_client: Any, webhook_config: str, ca_pem: bytes) -> int:
    """Set ``caBundle`` of every webhook in the MutatingWebhookConfiguration; returns how many."""
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(api_client)
    current = admission.read_mutating_webhook_configuration(webhook_config)
    count = len(current.webhooks or ())
    ops = [
        {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": _b64(ca_pem)}
        for i in range(count)
    ]
    if ops:
        admission.patch_mutating_webhook_configuration(webhook_config, ops)
    return count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service", default="fluence-webhook", help="webhook Service name")
    parser.add_argument("--namespace", default="kube-system", help="namespace of the Service")
    parser.add_argument("--dns", action="append", default=[], help="extra DNS SAN (repeatable)")
    parser.add_argument("--ip", action="append", default=[], help="extra IP SAN (repeatable)")
    parser.add_argument("--days", type=int, default=90, help="validity of a serving certificate")
    parser.add_argument(
        "--renew-days",
        type=int,
        default=30,
        help="renew the serving certificate this close to expiry",
    )
    parser.add_argument("--ca-days", type=int, default=3650, help="validity of a new CA")
    parser.add_argument(
        "--ca-renew-days", type=int, default=365, help="replace the CA this close to its expiry"
    )
    parser.add_argument("--out", type=Path, help="directory to write ca.crt, tls.crt, tls.key")
    parser.add_argument("--ca-dir", type=Path, help="where --out keeps the CA (default OUT/ca)")
    parser.add_argument(
        "--secret", help="kubernetes.io/tls Secret in --namespace (the CA goes to SECRET-ca)"
    )
    parser.add_argument("--webhook-config", help="MutatingWebhookConfiguration to give the CA")
    parser.add_argument(
        "--kubeconfig",
        default="",
        help="kubeconfig (default: in-cluster in a pod, else $KUBECONFIG)",
    )
    parser.add_argument(
        "--apiserver-client",
        type=Path,
        metavar="DIR",
        help="instead: the client CA, client certificate, admission kubeconfig and "
        "AdmissionConfiguration for the API server to call the webhook with (mutual TLS)",
    )
    parser.add_argument(
        "--client-days", type=int, default=365, help="validity of the API server's certificate"
    )
    parser.add_argument(
        "--admission-kubeconfig-path",
        default=ADMISSION_KUBECONFIG_PATH,
        help="where the API server's hosts keep admission-kubeconfig.yaml (absolute)",
    )
    parser.add_argument(
        "--client-ca-configmap",
        help=f"with --apiserver-client: store the client CA in this ConfigMap of --namespace "
        f"(the manifests mount {k8s_names.WEBHOOK_CLIENT_CA_CONFIGMAP})",
    )


def run(args: argparse.Namespace) -> int:
    """The ``certs`` command; returns the exit status."""
    if args.apiserver_client:
        return run_apiserver_client(args)
    dns_names = service_dns_names(args.service, args.namespace) + list(args.dns)
    names_ = [*dns_names, *args.ip]
    if not (args.out or args.secret or args.webhook_config):
        log.error(
            "certs: nothing to do; pass --out DIR, --secret NAME and/or --webhook-config "
            "(or --apiserver-client DIR)"
        )
        return 2
    api_client = None
    if args.secret or args.webhook_config:
        from fluence.kube_client import api_client as kube_api_client

        api_client = kube_api_client(args.kubeconfig)
    store = SecretStore(api_client, args.namespace, args.secret) if args.secret else None
    ca_dir: Path | None = args.ca_dir or (args.out / "ca" if args.out else None)
    if store is not None:
        authority, bundle, ca_secret, tls_secret = store.load()
    else:
        authority = read_authority_dir(ca_dir) if ca_dir else None
        bundle = read_files(args.out) if args.out else None
        ca_secret = tls_secret = None
    decided = plan(
        authority,
        bundle,
        names_,
        dns_names,
        days=args.days,
        renew_days=args.renew_days,
        ca_days=args.ca_days,
        ca_renew_days=args.ca_renew_days,
    )
    # The CA first, then caBundle, then the serving certificate: a new leaf is never
    # served before the API server trusts its CA.
    if decided.new_authority or authority is None:
        if store is not None:
            store.store_authority(decided.authority, ca_secret)
        elif ca_dir is not None:
            write_authority_dir(decided.authority, ca_dir)
    if args.webhook_config:
        n = patch_ca_bundle(api_client, args.webhook_config, decided.bundle.ca_pem)
        log.info("caBundle set", extra={"config": args.webhook_config, "webhooks": n})
    if decided.new_leaf:
        if store is not None:
            store.store_bundle(decided.bundle, tls_secret)
        if args.out:
            write_files(decided.bundle, args.out)
    log.info(
        "certificates",
        extra={
            "new_ca": decided.new_authority,
            "new_serving_certificate": decided.new_leaf,
            "secret": args.secret,
            "dir": str(args.out) if args.out else None,
        },
    )
    return 0
