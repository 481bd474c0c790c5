"""Certificates for clusters without cert-manager, and the recommended registration."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID

from fluence import names
from fluence.pki import CertificateAuthority
from webhook.certs import (
    Authority,
    CertBundle,
    Plan,
    SecretStore,
    covers,
    generate,
    new_authority,
    plan,
    service_dns_names,
    write_files,
)
from webhook.manifest import MATCH_EXPRESSION, render_yaml, webhook_configuration


def test_serving_cert_is_signed_by_the_ca_for_the_service_names() -> None:
    dns = service_dns_names("fluence-webhook", "kube-system")
    assert dns[-1] == "fluence-webhook.kube-system.svc.cluster.local"
    bundle = generate(dns, ["127.0.0.1"], days=30)
    ca = x509.load_pem_x509_certificate(bundle.ca_pem)
    leaf = x509.load_pem_x509_certificate(bundle.cert_pem)
    leaf.verify_directly_issued_by(ca)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == dns
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert leaf.not_valid_before_utc < dt.datetime.now(dt.UTC)
    assert covers(bundle, dns, renew_days=20)
    assert not covers(bundle, dns, renew_days=40)
    assert not covers(bundle, [*dns, "other.example"], renew_days=1)


def test_files_are_written_with_a_private_key(tmp_path: Path) -> None:
    bundle = generate(["a.example"])
    write_files(bundle, tmp_path / "tls")
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == bundle.cert_pem
    assert (tmp_path / "tls" / "ca.crt").read_bytes() == bundle.ca_pem
    key = tmp_path / "tls" / "tls.key"
    assert key.read_bytes() == bundle.key_pem
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_recommended_configuration() -> None:
    config = webhook_configuration()
    hook = config["webhooks"][0]
    assert config["metadata"]["annotations"] == {
        names.CERT_MANAGER_INJECT_CA_FROM: "kube-system/fluence-webhook"
    }
    assert hook["clientConfig"]["service"]["path"] == "/mutate"
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert hook["matchConditions"][0]["expression"] == MATCH_EXPRESSION
    rendered = render_yaml()
    assert yaml.safe_load(rendered) == config
    assert "# Fail: a fluence pod admitted without the webhook" in rendered


def test_url_configuration_carries_the_ca_and_no_cert_manager_annotation() -> None:
    config = webhook_configuration(url="https://127.0.0.1:9443/mutate", ca_bundle=b"PEM")
    hook = config["webhooks"][0]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate", "caBundle": "UEVN"}
    assert "annotations" not in config["metadata"]


DNS = service_dns_names("fluence-webhook", "kube-system")


def decide(authority: Authority | None, bundle: CertBundle | None, **kw: int) -> Plan:
    settings = {"days": 90, "renew_days": 30, "ca_days": 3650, "ca_renew_days": 365, **kw}
    return plan(authority, bundle, DNS, DNS, **settings)


def ca_subjects(pem: bytes) -> list[bytes]:
    return [c.fingerprint(hashes.SHA256()) for c in x509.load_pem_x509_certificates(pem)]


def test_a_current_certificate_is_kept_and_a_due_one_renewed_from_the_same_ca() -> None:
    first = decide(None, None)
    assert first.new_authority and first.new_leaf
    again = decide(first.authority, first.bundle)
    assert (again.new_authority, again.new_leaf) == (False, False)
    assert again.bundle == first.bundle
    renewed = decide(first.authority, first.bundle, renew_days=100)  # due: 90 < 100 days left
    assert renewed.new_leaf and not renewed.new_authority
    assert renewed.bundle.cert_pem != first.bundle.cert_pem
    assert renewed.bundle.ca_pem == first.bundle.ca_pem  # caBundle byte for byte the same
    leaf = x509.load_pem_x509_certificate(renewed.bundle.cert_pem)
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(first.authority.cert_pem))


def test_a_replaced_ca_stays_trusted_beside_its_successor() -> None:
    first = decide(None, None)
    rotated = decide(first.authority, first.bundle, ca_renew_days=4000)  # 3650 < 4000 left
    assert rotated.new_authority and rotated.new_leaf
    old_ca, new_ca = first.authority.cert_pem, rotated.authority.cert_pem
    assert old_ca != new_ca
    assert ca_subjects(rotated.bundle.ca_pem) == ca_subjects(new_ca + old_ca)
    # Both the certificate still served and its successor verify against the new bundle.
    trusted = x509.load_pem_x509_certificates(rotated.bundle.ca_pem)
    for pem, issuer in ((first.bundle.cert_pem, trusted[1]), (rotated.bundle.cert_pem, trusted[0])):
        x509.load_pem_x509_certificate(pem).verify_directly_issued_by(issuer)
    # The next renewal keeps both until the old CA expires.
    later = decide(rotated.authority, rotated.bundle, renew_days=100)
    assert ca_subjects(later.bundle.ca_pem) == ca_subjects(new_ca + old_ca)


def test_an_expired_previous_ca_leaves_the_bundle() -> None:
    current = new_authority(days=1)
    ending = CertificateAuthority(
        "ending", validity=dt.timedelta(seconds=1), backdate=dt.timedelta(days=2)
    )
    assert current.bundle_pem() == current.cert_pem
    with_previous = Authority(current.cert_pem, current.key_pem, ending.cert_pem)
    assert with_previous.bundle_pem() == current.cert_pem + ending.cert_pem
    time.sleep(1.1)  # the previous CA has expired now
    assert with_previous.bundle_pem() == current.cert_pem


def test_a_forged_or_foreign_ca_is_refused() -> None:
    a, b = new_authority(), new_authority()
    with pytest.raises(ValueError, match="does not belong"):
        Authority(a.cert_pem, b.key_pem).ca()
    leaf = CertificateAuthority("x").issue_serving(["x.example"])
    with pytest.raises(ValueError):
        Authority(leaf.cert_pem, leaf.key_pem).ca()


class FakeCore:
    """The two CoreV1Api calls SecretStore makes, over a dict of Secrets."""

    def __init__(self) -> None:
        self.secrets: dict[str, Any] = {}

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        if name not in self.secrets:
            raise ApiException(status=404)
        return self.secrets[name]

    def create_namespaced_secret(self, namespace: str, body: Any) -> None:
        body.metadata.resource_version = "1"
        self.secrets[body.metadata.name] = body

    def replace_namespaced_secret(self, name: str, namespace: str, body: Any) -> None:
        assert body.metadata.resource_version == self.secrets[name].metadata.resource_version
        body.metadata.resource_version = str(int(body.metadata.resource_version) + 1)
        self.secrets[name] = body


def test_the_ca_key_is_kept_apart_from_what_the_webhook_mounts() -> None:
    store = SecretStore(None, "kube-system", "fluence-webhook-tls")
    core = FakeCore()
    store.core = core  # type: ignore[assignment]
    decided = decide(None, None)
    store.store_authority(decided.authority, None)
    store.store_bundle(decided.bundle, None)
    tls = core.secrets["fluence-webhook-tls"]
    assert tls.type == "kubernetes.io/tls" and set(tls.data) == {"tls.crt", "tls.key", "ca.crt"}
    assert core.secrets["fluence-webhook-tls-ca"].type == "Opaque"
    authority, bundle, ca_secret, tls_secret = store.load()
    assert authority == decided.authority and bundle == decided.bundle
    renewed = decide(authority, bundle, renew_days=100)
    store.store_bundle(renewed.bundle, tls_secret)  # an update, with its resourceVersion
    assert store.load()[1] == renewed.bundle


def test_secrets_made_empty_at_install_hold_nothing_and_are_filled_by_update() -> None:
    """The chart creates both Secrets empty, so the job needs no right to create any."""
    from kubernetes import client

    store = SecretStore(None, "kube-system", "fluence-webhook-tls")
    core = FakeCore()
    store.core = core  # type: ignore[assignment]
    core.create_namespaced_secret(
        "kube-system",
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="fluence-webhook-tls"),
            type="kubernetes.io/tls",
            data={"tls.crt": "", "tls.key": ""},
        ),
    )
    core.create_namespaced_secret(
        "kube-system", client.V1Secret(metadata=client.V1ObjectMeta(name="fluence-webhook-tls-ca"))
    )
    authority, bundle, ca_secret, tls_secret = store.load()
    assert authority is None and bundle is None and ca_secret is not None
    decided = decide(authority, bundle)
    core.create_namespaced_secret = None  # type: ignore[method-assign,assignment]
    store.store_authority(decided.authority, ca_secret)
    store.store_bundle(decided.bundle, tls_secret)
    assert store.load()[:2] == (decided.authority, decided.bundle)


def test_apiserver_client_files_fit_together(tmp_path: Path) -> None:
    """The AdmissionConfiguration names the kubeconfig, whose user (the webhook's Service)
    holds a client certificate from the CA the webhook is given; a second run keeps the CA."""
    import argparse
    import base64

    from webhook.certs import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--namespace", "ops", "--apiserver-client", str(tmp_path)]
    assert run(parser.parse_args(argv)) == 0
    config = yaml.safe_load((tmp_path / "admission-config.yaml").read_text())
    assert config["kind"] == "AdmissionConfiguration"
    (plugin,) = config["plugins"]
    assert plugin["name"] == "MutatingAdmissionWebhook"
    kubeconfig_path = plugin["configuration"]["kubeConfigFile"]
    assert plugin["configuration"]["kind"] == "WebhookAdmissionConfiguration"
    assert kubeconfig_path == "/etc/kubernetes/fluence/admission-kubeconfig.yaml"
    kubeconfig = yaml.safe_load((tmp_path / "admission-kubeconfig.yaml").read_text())
    (user,) = kubeconfig["users"]
    assert user["name"] == "fluence-webhook.ops.svc"
    assert stat.S_IMODE((tmp_path / "admission-kubeconfig.yaml").stat().st_mode) == 0o600
    leaf = x509.load_pem_x509_certificate(base64.b64decode(user["user"]["client-certificate-data"]))
    ca_pem = (tmp_path / "client-ca.crt").read_bytes()
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert run(parser.parse_args(argv)) == 0
    assert (tmp_path / "client-ca.crt").read_bytes() == ca_pem
    assert run(parser.parse_args([*argv, "--admission-kubeconfig-path", "relative"])) == 2
