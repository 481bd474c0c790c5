"""Serving certificates for clusters without cert-manager.

``fluence-webhook certs`` makes a private CA and a serving certificate for the
webhook Service (``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc``,
``<svc>.<ns>.svc.cluster.local``, plus any ``--dns``/``--ip``) and can

- write ``ca.crt``, ``tls.crt`` and ``tls.key`` into a directory (``--out``);
- store them in a ``kubernetes.io/tls`` Secret (``--secret``, with ``ca.crt``
  beside the pair), reusing the Secret's certificate while it still covers the
  names and has more than ``--renew-days`` left, so re-running is harmless;
- put the CA into ``clientConfig.caBundle`` of every webhook in a
  MutatingWebhookConfiguration (``--webhook-config``).

Run it as a Job (or init container) before the webhook Deployment mounts the
Secret; the server reloads the files when the Secret changes, so re-running it
to renew needs no restart. With cert-manager, skip all this: the manifest's
``cert-manager.io/inject-ca-from`` annotation keeps ``caBundle`` in sync.

Example::

    fluence-webhook certs --service fluence-webhook --namespace kube-system \\
        --secret fluence-webhook-tls --webhook-config fluence-webhook
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

from cryptography import x509

from fluence.pki import CertificateAuthority

log = logging.getLogger(__name__)

CA_COMMON_NAME = "fluence-webhook-ca"


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes of a CA certificate and a serving certificate with its key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


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


def generate(
    dns_names: Sequence[str], ip_addresses: Sequence[str] = (), *, days: int = 365
) -> CertBundle:
    """A new CA and a serving certificate for the names, valid ``days`` days.

    Validity starts an hour back so that clocks a little behind ours accept it.
    """
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    validity = dt.timedelta(days=days)
    ca = CertificateAuthority(
        CA_COMMON_NAME, validity=validity + dt.timedelta(days=1), backdate=dt.timedelta(hours=1)
    )
    leaf = ca.issue_serving([*dns_names, *ip_addresses], validity=validity)
    return CertBundle(ca_pem=ca.cert_pem, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)


def covers(bundle: CertBundle, dns_names: Sequence[str], renew_days: int) -> bool:
    """True when the serving certificate names every DNS name and lives ``renew_days`` more."""
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = set(san.get_values_for_type(x509.DNSName))
    return set(dns_names) <= have and cert.not_valid_after_utc - _now() > dt.timedelta(
        days=renew_days
    )


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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def ensure_secret(
    api_client: Any,
    namespace: str,
    name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    *,
    days: int,
    renew_days: int,
) -> CertBundle:
    """The bundle stored in the Secret, generated (and stored) when missing or due for renewal."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    existing = None
    try:
        existing = core.read_namespaced_secret(name, namespace)
    except ApiException as e:
        if e.status != 404:
            raise
    if existing is not None and existing.data:
        data = existing.data
        try:
            bundle = CertBundle(
                ca_pem=base64.b64decode(data.get("ca.crt", "")),
                cert_pem=base64.b64decode(data.get("tls.crt", "")),
                key_pem=base64.b64decode(data.get("tls.key", "")),
            )
        except ValueError:
            bundle = None
        if bundle is not None and bundle.ca_pem and covers(bundle, dns_names, renew_days):
            log.info("serving certificate in the Secret is current", extra={"secret": name})
            return bundle
    bundle = generate(dns_names, ip_addresses, days=days)
    version = existing.metadata.resource_version if existing and existing.metadata else None
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, resource_version=version),
        type="kubernetes.io/tls",
        data={
            "ca.crt": _b64(bundle.ca_pem),
            "tls.crt": _b64(bundle.cert_pem),
            "tls.key": _b64(bundle.key_pem),
        },
    )
    if existing is None:
        core.create_namespaced_secret(namespace, body)
    else:
        core.replace_namespaced_secret(name, namespace, body)
    log.info("serving certificate stored", extra={"secret": name, "namespace": namespace})
    return bundle


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
    parser.add_argument("--days", type=int, default=365, help="validity of new certificates")
    parser.add_argument(
        "--renew-days", type=int, default=30, help="renew a stored certificate this close to expiry"
    )
    parser.add_argument("--out", type=Path, help="directory to write ca.crt, tls.crt, tls.key")
    parser.add_argument("--secret", help="kubernetes.io/tls Secret in --namespace to keep them in")
    parser.add_argument("--webhook-config", help="MutatingWebhookConfiguration to give the CA")
    parser.add_argument("--kubeconfig", default="", help="kubeconfig; empty means in-cluster")


def run(args: argparse.Namespace) -> int:
    """The ``certs`` command; returns the exit status."""
    names_ = service_dns_names(args.service, args.namespace) + list(args.dns)
    if not (args.out or args.secret or args.webhook_config):
        log.error("certs: nothing to do; pass --out DIR, --secret NAME and/or --webhook-config")
        return 2
    api_client = None
    if args.secret or args.webhook_config:
        from fluence.kube_client import api_client as kube_api_client

        api_client = kube_api_client(args.kubeconfig)
    if args.secret:
        bundle = ensure_secret(
            api_client,
            args.namespace,
            args.secret,
            names_,
            args.ip,
            days=args.days,
            renew_days=args.renew_days,
        )
    else:
        bundle = generate(names_, args.ip, days=args.days)
    if args.out:
        write_files(bundle, args.out)
        log.info("certificates written", extra={"dir": str(args.out)})
    if args.webhook_config:
        n = patch_ca_bundle(api_client, args.webhook_config, bundle.ca_pem)
        log.info("caBundle set", extra={"config": args.webhook_config, "webhooks": n})
    return 0
