"""Certificates for clusters without cert-manager, and the recommended registration."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from fluence import names
from webhook.certs import covers, generate, service_dns_names, write_files
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
