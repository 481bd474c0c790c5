"""The Jobs entry of the webhook's registration, the same in the code and the plain manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fluence import names
from webhook.manifest import JOB_MATCH_EXPRESSION, render_yaml, webhook_configuration

PLAIN = Path(__file__).resolve().parents[3] / "deploy" / "fluence.yaml"


def entries(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in config["webhooks"]}


def test_jobs_of_the_fluence_scheduler_are_sent_on_create_and_admitted_if_it_is_down() -> None:
    config = webhook_configuration()
    pods, jobs = config["webhooks"]
    assert pods["name"] == names.WEBHOOK_NAME and jobs["name"] == names.WEBHOOK_JOBS_NAME
    assert jobs["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "resources": ["jobs"],
            "scope": "Namespaced",
        }
    ]
    assert jobs["matchConditions"] == [{"name": "fluence-jobs", "expression": JOB_MATCH_EXPRESSION}]
    assert "object.spec.template.spec.schedulerName == 'fluence'" in JOB_MATCH_EXPRESSION
    assert (jobs["failurePolicy"], jobs["sideEffects"]) == ("Ignore", "None")
    assert jobs["clientConfig"] == pods["clientConfig"]
    assert pods["failurePolicy"] == "Fail"


def test_a_url_configuration_sends_jobs_to_the_same_url() -> None:
    config = webhook_configuration(url="https://127.0.0.1:9443/mutate", ca_bundle=b"PEM")
    want = {"url": "https://127.0.0.1:9443/mutate", "caBundle": "UEVN"}
    assert [w["clientConfig"] for w in config["webhooks"]] == [want, want]


def test_each_entry_carries_its_own_reasons() -> None:
    rendered = render_yaml()
    assert yaml.safe_load(rendered) == webhook_configuration()
    lines = rendered.splitlines()
    before = {
        line.strip(): lines[i - 1].strip()
        for i, line in enumerate(lines)
        if line.strip().startswith("failurePolicy:")
    }
    assert before["failurePolicy: Fail"].startswith("# and the handler itself admits")
    assert before["failurePolicy: Ignore"].startswith("# the pods entry above")
    assert rendered.count("# Ignore: a Job admitted without the rule still runs") == 1


def test_the_plain_manifest_registers_jobs_as_the_code_does() -> None:
    (plain,) = [
        d
        for d in yaml.safe_load_all(PLAIN.read_text())
        if isinstance(d, dict) and d.get("kind") == "MutatingWebhookConfiguration"
    ]
    ours = entries(webhook_configuration())[names.WEBHOOK_JOBS_NAME]
    theirs = dict(entries(plain)[names.WEBHOOK_JOBS_NAME])
    # The manifests keep the control plane's namespace out, as their pods entry does.
    assert (
        theirs.pop("namespaceSelector") == entries(plain)[names.WEBHOOK_NAME]["namespaceSelector"]
    )
    assert theirs == ours
