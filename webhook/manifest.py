"""The MutatingWebhookConfiguration fluence recommends, rendered for a Service or a URL.

``webhook_configuration()`` returns the object (the e2e tests register it with
a ``url`` client config); ``render_yaml()`` returns the same object as YAML
with the reasoning behind each policy choice written next to it. Two entries
share one endpoint: pods first, then batch/v1 Jobs (their podFailurePolicy).
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import yaml

from fluence import names

# CEL: the webhook is only called for fluence pods, and for pods that ask for a fluxion
# resource under another scheduler (to warn them). Everything else never waits on it.
_P = names.RESOURCE_PREFIX
_REQUESTS_FLUXION = (
    "object.spec.containers.exists(c, has(c.resources) && ("
    f"(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('{_P}'))) || "
    f"(has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('{_P}')))))"
)
MATCH_EXPRESSION = (
    f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{names.SCHEDULER_NAME}')"
    f" || {_REQUESTS_FLUXION}"
)

# CEL: only Jobs whose pods are fluence's (the API server has defaulted schedulerName).
JOB_MATCH_EXPRESSION = (
    "has(object.spec.template.spec.schedulerName) && "
    f"object.spec.template.spec.schedulerName == '{names.SCHEDULER_NAME}'"
)

COMMENTS = {
    "failurePolicy": (
        "Fail: a fluence pod admitted without the webhook would run without QRMI_BACKEND /\n"
        "FLUXION_* and without its PodGroup link, and nothing could add them later (env and\n"
        "spec.schedulingGroup are immutable). Failing makes an outage visible and controllers\n"
        "retry the create. matchConditions keep every other pod independent of the webhook,\n"
        "and the handler itself admits (with a warning) instead of failing on its own bugs."
    ),
    "sideEffects": "NoneOnDryRun: PodGroups are created on real requests only, never on dry-run.",
    "reinvocationPolicy": (
        "IfNeeded: if a later webhook adds a container, run again; the mutation is\n"
        "idempotent (its own output yields an empty patch)."
    ),
    "timeoutSeconds": (
        "5: answers take about a millisecond; PodGroup creation is one API call. A pod create\n"
        "waits on this, so a hung webhook should fail fast."
    ),
    "matchConditions": "Only fluence pods, and pods asking for fluxion resources (warned).",
}

JOB_COMMENTS = {
    "failurePolicy": (
        "Ignore: a Job admitted without the rule still runs; only the pods the queue evicts\n"
        "to retry their group then count toward its backoffLimit. Fail would refuse every\n"
        "fluence Job while the webhook is down, for that one rule; its pods still go through\n"
        "the pods entry above, whose failurePolicy is Fail."
    ),
    "sideEffects": "None: the answer is a function of the Job alone (no API call).",
    "reinvocationPolicy": (
        "IfNeeded: the rule is appended once; on its own output the webhook adds nothing."
    ),
    "timeoutSeconds": "5: no API call; a Job create waits on this.",
    "matchConditions": "Only Jobs whose pod template names the fluence scheduler.",
}


def webhook_configuration(
    *,
    namespace: str = "kube-system",
    service: str = "fluence-webhook",
    port: int = 443,
    url: str | None = None,
    ca_bundle: bytes | None = None,
    certificate: str | None = "fluence-webhook",
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
) -> dict[str, Any]:
    """The configuration object; ``url`` replaces the Service, ``ca_bundle`` is PEM bytes.

    ``failure_policy`` is the pods entry's; the Jobs entry's is always Ignore.

    ``certificate`` names the cert-manager Certificate whose CA cainjector copies
    into ``caBundle``; pass None (and ``ca_bundle``) when cert-manager is not used.
    """
    client_config: dict[str, Any]
    if url:
        client_config = {"url": url}
    else:
        client_config = {
            "service": {
                "namespace": namespace,
                "name": service,
                "path": names.WEBHOOK_PATH,
                "port": port,
            }
        }
    if ca_bundle:
        client_config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    metadata: dict[str, Any] = {"name": names.WEBHOOK_CONFIG_NAME}
    if certificate and not ca_bundle:
        metadata["annotations"] = {names.CERT_MANAGER_INJECT_CA_FROM: f"{namespace}/{certificate}"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            {
                "name": names.WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "matchPolicy": "Equivalent",
                "matchConditions": [{"name": "fluence-pods", "expression": MATCH_EXPRESSION}],
                "failurePolicy": failure_policy,
                "sideEffects": "NoneOnDryRun",
                "reinvocationPolicy": "IfNeeded",
                "timeoutSeconds": timeout_seconds,
            },
            {
                "name": names.WEBHOOK_JOBS_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": copy.deepcopy(client_config),
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "resources": ["jobs"],
                        "scope": "Namespaced",
                    }
                ],
                "matchPolicy": "Equivalent",
                "matchConditions": [{"name": "fluence-jobs", "expression": JOB_MATCH_EXPRESSION}],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "reinvocationPolicy": "IfNeeded",
                "timeoutSeconds": timeout_seconds,
            },
        ],
    }


def render_yaml(**kwargs: Any) -> str:
    """YAML of :func:`webhook_configuration` with a comment above each policy field."""
    text = yaml.safe_dump(webhook_configuration(**kwargs), sort_keys=False, width=100)
    out: list[str] = []
    comments = COMMENTS
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped == f"- name: {names.WEBHOOK_JOBS_NAME}":
            comments = JOB_COMMENTS
        key = stripped.split(":", 1)[0]
        if key in comments and stripped.startswith(key + ":"):
            indent = line[: len(line) - len(stripped)]
            out.extend(f"{indent}# {c}" for c in comments[key].splitlines())
        out.append(line)
    return "\n".join(out) + "\n"
