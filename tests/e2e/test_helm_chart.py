"""deploy/helm/fluence renders (helm template) to objects a real apiserver accepts.

Default values and cert-manager off are each rendered and every document is
created with a server-side dry run (``dryRun=All``), as test_manifests.py does
for the plain manifests; the rendered objects are compared with those manifests.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ControlPlane, KubeApiError
from testbed.workloads import Discovery
from tests.e2e.test_manifests import ensure_namespace, served_cert_manager
from tests.support.helm import template

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "fluence"
PLAIN = [REPO / "deploy" / "fluence.yaml", REPO / "deploy" / "fluence-resources.yaml"]
VARIANTS = {
    "defaults": (),
    "cert-manager-off": ("--set", "certManager.enabled=false"),
    "extender-service": ("--set", "extender.service.enabled=true", "--set", "matchPolicy=low"),
}

__all__ = ["served_cert_manager"]


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind")]


def ids(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def container(docs: list[dict[str, Any]], deployment: str, name: str) -> dict[str, Any]:
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet") and d["metadata"]["name"] == deployment:
            for c in d["spec"]["template"]["spec"]["containers"]:
                if c["name"] == name:
                    out: dict[str, Any] = c
                    return out
    raise AssertionError(f"no container {name} in {deployment}")


def pod_spec(docs: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    (d,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == deployment]
    spec: dict[str, Any] = d["spec"]["template"]["spec"]
    return spec


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c.get("env", [])}


RECORD_KEY = ("Secret", "fluence-record-key")
JOBS_WEBHOOK = "jobs.fluence.flux-framework.org"
CHART_ONLY = {RECORD_KEY, ("NetworkPolicy", "fluence-webhook")}
"""The record key is random: the plain manifests say how to create it, the chart makes it.
The webhook's NetworkPolicy needs the control plane's addresses, a value of the chart."""


def test_defaults_render_the_objects_of_the_plain_manifests() -> None:
    plain = [d for p in PLAIN for d in documents(p.read_text())]
    rendered = documents(template(CHART))
    assert ids(rendered) == ids(plain) | CHART_ONLY
    (key,) = [d for d in rendered if (d["kind"], d["metadata"]["name"]) == RECORD_KEY]
    assert len(base64.b64decode(key["data"]["key"])) >= 32
    for d in rendered:
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"):
            assert d["metadata"]["namespace"] == "kube-system", d["metadata"]
    config = next(d for d in rendered if d["metadata"]["name"] == "fluence-resources")
    plain_config = next(d for d in plain if d["metadata"]["name"] == "fluence-resources")
    assert yaml.safe_load(config["data"]["resources.yaml"]) == yaml.safe_load(
        plain_config["data"]["resources.yaml"]
    )
    extender = env_of(container(rendered, "fluence-scheduler", "extender"))
    assert extender["FLUENCE_BIND"] == "127.0.0.1:8888"
    assert extender["FLUENCE_MATCH_POLICY"] == "first"
    scheduler = scheduler_config(rendered)
    assert scheduler == scheduler_config(plain)
    # A gang is tried again soon after its reservation comes due (docs/performance.md).
    assert (scheduler["podInitialBackoffSeconds"], scheduler["podMaxBackoffSeconds"]) == (1, 1)


def scheduler_config(docs: list[dict[str, Any]]) -> Any:
    (config,) = [d for d in docs if d["metadata"]["name"] == "fluence-scheduler-config"]
    return yaml.safe_load(config["data"]["scheduler-config.yaml"])


def probes(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {}
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                    if kind in c:
                        found[f"{d['metadata']['name']}/{c['name']}/{kind}"] = c[kind]
    return found


def test_every_probe_allows_a_busy_node_more_than_the_default_second() -> None:
    """A webhook or extender probe timing out at 1 s on a loaded node takes it out of
    service (every fluence pod create then fails) or restarts it."""
    plain = probes([d for path in PLAIN for d in documents(path.read_text())])
    chart = probes(documents(template(CHART)))
    assert plain and plain.keys() == chart.keys()
    for where, found in (("plain", plain), ("chart", chart)):
        short = {k: p.get("timeoutSeconds", 1) for k, p in found.items()}
        assert all(t >= 5 for t in short.values()), (where, short)


def test_values_change_what_they_name() -> None:
    off = documents(template(CHART, *VARIANTS["cert-manager-off"]))
    kinds = {d["kind"] for d in off}
    assert "Certificate" not in kinds and "Issuer" not in kinds
    hook = next(d for d in off if d["kind"] == "MutatingWebhookConfiguration")
    assert "cert-manager.io/inject-ca-from" not in (hook["metadata"].get("annotations") or {})
    webhook = container(off, "fluence-webhook", "webhook")
    assert env_of(webhook)["FLUENCE_TLS_CERT"] == "/etc/fluence/tls/tls.crt"
    # Without cert-manager a CronJob renews the certificate, under its own narrow account.
    (cron,) = [d for d in off if d["kind"] == "CronJob"]
    job_spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job_spec["serviceAccountName"] == "fluence-webhook-certs"
    assert job_spec["containers"][0]["command"][:2] == ["fluence-webhook", "certs"]
    role = next(
        d for d in off if d["kind"] == "Role" and d["metadata"]["name"] == cron["metadata"]["name"]
    )
    (named,) = role["rules"]  # no create: the chart makes both Secrets, empty
    assert named["resourceNames"] == ["fluence-webhook-tls", "fluence-webhook-tls-ca"]
    assert named["verbs"] == ["get", "update"]
    made = {d["metadata"]["name"]: d for d in off if d["kind"] == "Secret"}
    assert made["fluence-webhook-tls"]["type"] == "kubernetes.io/tls"
    assert made["fluence-webhook-tls"]["data"] == {"tls.crt": "", "tls.key": ""}
    assert "data" not in made["fluence-webhook-tls-ca"]
    # The webhook waits for ca.crt, which only a filled-in Secret has.
    (tls,) = [v for v in pod_spec(off, "fluence-webhook")["volumes"] if v["name"] == "tls"]
    assert {i["key"] for i in tls["secret"]["items"]} == {"tls.crt", "tls.key", "ca.crt"}
    no_cron = documents(
        template(
            CHART, *VARIANTS["cert-manager-off"], "--set", "webhook.certsCronJob.enabled=false"
        )
    )
    assert "CronJob" not in {d["kind"] for d in no_cron}
    # With cert-manager: a long-lived CA issues the serving certificate (stable caBundle).
    on = documents(template(CHART))
    assert "CronJob" not in {d["kind"] for d in on}
    certificates = {d["metadata"]["name"]: d["spec"] for d in on if d["kind"] == "Certificate"}
    assert certificates["fluence-webhook-ca"]["isCA"] is True
    assert certificates["fluence-webhook"]["issuerRef"] == {"kind": "Issuer", "name": "fluence-ca"}
    issuers = {d["metadata"]["name"]: d["spec"] for d in on if d["kind"] == "Issuer"}
    assert issuers["fluence-ca"] == {"ca": {"secretName": "fluence-webhook-ca"}}
    exposed = documents(template(CHART, *VARIANTS["extender-service"]))
    assert ("Service", "fluence-extender") in ids(exposed)
    extender = env_of(container(exposed, "fluence-scheduler", "extender"))
    assert extender["FLUENCE_BIND"] == "0.0.0.0:8888" and extender["FLUENCE_MATCH_POLICY"] == "low"
    custom = documents(
        template(
            CHART,
            "--set",
            "scheduler.replicas=3",
            "--set-string",
            "resourcesConfig=resources: []\n",
            "--set",
            "image.tag=9.9.9",
            "--set",
            "scheduler.podMaxBackoffSeconds=4",
            "--set",
            "extender.spread=balanced",
        )
    )
    assert scheduler_config(custom)["podMaxBackoffSeconds"] == 4
    assert (
        env_of(container(custom, "fluence-scheduler", "extender"))["FLUENCE_SPREAD"] == "balanced"
    )
    deploy = next(
        d
        for d in custom
        if d["metadata"]["name"] == "fluence-scheduler" and d["kind"] == "Deployment"
    )
    assert deploy["spec"]["replicas"] == 3
    assert container(custom, "fluence-scheduler", "extender")["image"] == "fluence:9.9.9"
    config = next(d for d in custom if d["metadata"]["name"] == "fluence-resources")
    assert yaml.safe_load(config["data"]["resources.yaml"]) == {"resources": []}


def webhook_entries(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (config,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    return {w["name"]: w for w in config["webhooks"]}


def test_the_jobs_webhook_entry_is_the_plain_manifests() -> None:
    """Jobs of the fluence scheduler get their podFailurePolicy rule the same way installed
    either way (the chart's timeout is a value, set here to the plain manifest's)."""
    plain = webhook_entries([d for p in PLAIN for d in documents(p.read_text())])
    chart = webhook_entries(documents(template(CHART, "--set", "webhook.timeoutSeconds=5")))
    assert list(chart) == list(plain) == ["pods.fluence.flux-framework.org", JOBS_WEBHOOK]
    assert chart[JOBS_WEBHOOK] == plain[JOBS_WEBHOOK]
    assert chart[JOBS_WEBHOOK]["failurePolicy"] == "Ignore"


def test_without_extender_calls_the_queue_alone_places_and_needs_the_webhook() -> None:
    calls = scheduler_config(documents(template(CHART)))
    assert [e["urlPrefix"] for e in calls["extenders"]] == ["http://127.0.0.1:8888"]
    assert calls["percentageOfNodesToScore"] == 100
    assert calls["clientConnection"] == {"qps": 500, "burst": 1000}
    queue_only = documents(template(CHART, "--set", "scheduler.extenderCalls=false"))
    config = scheduler_config(queue_only)
    # Released pods are pinned to one node: kube-scheduler scores as it would by itself.
    assert "extenders" not in config and "percentageOfNodesToScore" not in config
    assert config["profiles"] == [{"schedulerName": "fluence"}]
    # The extender still runs: it leads the queue and follows what kube-scheduler binds.
    assert env_of(container(queue_only, "fluence-scheduler", "extender"))["FLUENCE_BIND"]
    with pytest.raises(AssertionError, match="needs webhook.enabled"):
        template(CHART, "--set", "scheduler.extenderCalls=false", "--set", "webhook.enabled=false")


def test_the_webhook_asks_for_the_apiservers_certificate_and_is_probed_in_plain_http() -> None:
    """Both ways in mount the client CA (optional: without it, no PodGroups, no Job reads)
    and probe the plain port; the chart fences the webhook port to the control plane."""
    plain = [d for p in PLAIN for d in documents(p.read_text())]
    rendered = documents(template(CHART))
    for docs in (plain, rendered):
        webhook = container(docs, "fluence-webhook", "webhook")
        env = env_of(webhook)
        assert env["FLUENCE_CLIENT_CA"] == "/etc/fluence/client-ca/ca.crt"
        assert env["FLUENCE_PROBE_BIND"] == "0.0.0.0:8080"
        ports = {p["name"]: p["containerPort"] for p in webhook["ports"]}
        assert ports == {"https": 8443, "probes": 8080}
        for probe in ("readinessProbe", "livenessProbe"):
            assert webhook[probe]["httpGet"]["port"] == "probes"
            assert "scheme" not in webhook[probe]["httpGet"]  # HTTP
        volumes = {v["name"]: v for v in pod_spec(docs, "fluence-webhook")["volumes"]}
        assert volumes["client-ca"]["configMap"] == {
            "name": "fluence-webhook-client-ca",
            "optional": True,
        }
        mounts = {m["name"]: m["mountPath"] for m in webhook["volumeMounts"]}
        assert mounts["client-ca"] == "/etc/fluence/client-ca"
        # The extender's record key is required: without it, no shared seal.
        scheduler = pod_spec(docs, "fluence-scheduler")
        (key,) = [v for v in scheduler["volumes"] if v["name"] == "record-key"]
        assert key["secret"] == {"secretName": "fluence-record-key"}
    (policy,) = [d for d in rendered if d["kind"] == "NetworkPolicy"]
    webhook_port, probe_port = policy["spec"]["ingress"]
    assert webhook_port["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert [f["ipBlock"]["cidr"] for f in webhook_port["from"]] == ["0.0.0.0/0", "::/0"]
    assert probe_port == {"ports": [{"protocol": "TCP", "port": 8080}]}
    narrowed = documents(
        template(CHART, "--set", "webhook.networkPolicy.apiServerCIDRs={10.0.0.0/28}")
    )
    (policy,) = [d for d in narrowed if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}}]
    off = documents(template(CHART, "--set", "webhook.networkPolicy.enabled=false"))
    assert "NetworkPolicy" not in {d["kind"] for d in off}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_server_side_dry_run_accepts_every_rendered_object(
    control_plane: ControlPlane, served_cert_manager: None, variant: str
) -> None:
    rendered = documents(template(CHART, *VARIANTS[variant]))
    discovery = Discovery(control_plane.rest)
    failures: list[str] = []
    for doc in rendered:
        api_version, kind = doc["apiVersion"], doc["kind"]
        label = f"{kind}/{doc['metadata']['name']}"
        resource = discovery.resource(api_version, kind)
        if resource is None:
            failures.append(f"{label}: {api_version} {kind} is not served by the apiserver")
            continue
        plural, namespaced = resource
        namespace = None
        if namespaced:
            namespace = doc["metadata"].get("namespace") or "default"
            ensure_namespace(control_plane, namespace)
        try:
            control_plane.rest.create(
                discovery.collection_path(api_version, plural, namespace),
                doc,
                dryRun="All",
                fieldValidation="Strict",
            )
        except KubeApiError as exc:
            failures.append(f"{label}: {exc}")
    assert not failures, "server-side dry run rejected:\n" + "\n".join(failures)
