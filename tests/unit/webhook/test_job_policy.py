"""A fluence Job's pods evicted by the queue do not count toward its backoffLimit.

Reviews go through the HTTP app as the API server sends them: the Job already
defaulted (``podReplacementPolicy: TerminatingOrFailed`` without a policy).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluence import names
from tests.support.admission import apply_patch, response_ops, review
from tests.unit.webhook.test_app import CONTRACT, client_for, post
from webhook.admission import Admission
from webhook.job_policy import DISRUPTION_RULE

CLIENT = client_for(Admission(lambda: CONTRACT))
IGNORE_EVICTED = {
    "action": "Ignore",
    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
}
FAIL_ON_42 = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}


def job(
    *,
    scheduler: str = names.SCHEDULER_NAME,
    restart: str = "Never",
    rules: list[dict[str, Any]] | None = None,
    replacement: str | None = "TerminatingOrFailed",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": 2,
        "completions": 2,
        "backoffLimit": 6,
        "template": {
            "spec": {
                "schedulerName": scheduler,
                "restartPolicy": restart,
                "containers": [{"name": "main", "image": "busybox"}],
            }
        },
    }
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": rules}
    if replacement is not None:
        spec["podReplacementPolicy"] = replacement
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": spec}


def job_review(obj: Any, operation: str = "CREATE") -> dict[str, Any]:
    body = review(obj, kind="Job", operation=operation)
    body["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    body["request"]["resource"] = {"group": "batch", "version": "v1", "resource": "jobs"}
    return body


def answer(obj: Any, client: Any = CLIENT) -> tuple[dict[str, Any], Any]:
    """The response and the Job with its patch applied."""
    r = post(job_review(obj), client)
    assert r.status_code == 200, r.text
    response, ops = response_ops(r.content)
    assert response["allowed"] is True
    return response, apply_patch(obj, ops)


def test_a_fluence_job_without_a_policy_gets_the_disruption_rule() -> None:
    response, out = answer(job())
    assert out["spec"]["podFailurePolicy"] == {"rules": [IGNORE_EVICTED]}
    # Kubernetes allows only Failed with a podFailurePolicy, and defaults it so itself.
    assert out["spec"]["podReplacementPolicy"] == "Failed"
    assert "warnings" not in response
    assert DISRUPTION_RULE == IGNORE_EVICTED


def test_the_users_rules_stay_first_and_ours_is_appended() -> None:
    mine: list[dict[str, Any]] = [
        FAIL_ON_42,
        {"action": "Count", "onPodConditions": [{"type": "Custom", "status": "True"}]},
    ]
    _, out = answer(job(rules=copy.deepcopy(mine), replacement="Failed"))
    assert out["spec"]["podFailurePolicy"]["rules"] == [*mine, IGNORE_EVICTED]
    assert out["spec"]["podReplacementPolicy"] == "Failed"


def test_a_policy_without_rules_gets_a_list_of_ours() -> None:
    policies: list[dict[str, Any]] = [{}, {"rules": None}, {"rules": []}]
    for policy in policies:
        obj = job()
        obj["spec"]["podFailurePolicy"] = policy
        _, out = answer(obj)
        assert out["spec"]["podFailurePolicy"]["rules"] == [IGNORE_EVICTED], policy


def test_a_user_rule_for_disruption_target_is_left_as_it_is() -> None:
    """The user decided what an eviction means (even FailJob); nothing is added after it."""
    for status in ("True", ""):
        for action in ("FailJob", "Count", "Ignore"):
            theirs = {
                "action": action,
                "onPodConditions": [
                    {"type": "Custom", "status": "False"},
                    {"type": "DisruptionTarget", "status": status},
                ],
            }
            response, out = answer(job(rules=[FAIL_ON_42, theirs], replacement="Failed"))
            assert out["spec"]["podFailurePolicy"]["rules"] == [FAIL_ON_42, theirs]
            assert "patch" not in response and "warnings" not in response


def test_a_disruption_target_false_pattern_does_not_cover_evictions() -> None:
    theirs = {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}],
    }
    _, out = answer(job(rules=[theirs], replacement="Failed"))
    assert out["spec"]["podFailurePolicy"]["rules"] == [theirs, IGNORE_EVICTED]


def test_restart_on_failure_is_warned_and_left_unchanged() -> None:
    obj = job(restart="OnFailure")
    response, out = answer(obj)
    assert out == obj and "patch" not in response
    (warning,) = response["warnings"]
    assert "restartPolicy OnFailure" in warning and "backoffLimit" in warning
    assert "restartPolicy Never" in warning  # what to do about it


def test_a_full_rules_list_is_warned_and_left_unchanged() -> None:
    full = [
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [i]}}
        for i in range(1, names.JOB_MAX_POD_FAILURE_RULES + 1)
    ]
    obj = job(rules=full, replacement="Failed")
    response, out = answer(obj)
    assert out == obj and "patch" not in response
    (warning,) = response["warnings"]
    assert f"{names.JOB_MAX_POD_FAILURE_RULES} rules" in warning and "backoffLimit" in warning
    # One rule fewer leaves room for ours, the last allowed.
    _, out = answer(job(rules=full[:-1], replacement="Failed"))
    rules = out["spec"]["podFailurePolicy"]["rules"]
    assert len(rules) == names.JOB_MAX_POD_FAILURE_RULES and rules[-1] == IGNORE_EVICTED


def test_jobs_of_other_schedulers_are_untouched() -> None:
    for scheduler in ("default-scheduler", ""):
        obj = job(scheduler=scheduler, restart="OnFailure")
        r = post(job_review(obj))
        assert r.json()["response"] == {"uid": "0f1e2d3c", "allowed": True}, scheduler


def test_a_malformed_job_is_allowed_unchanged_with_a_warning() -> None:
    bad_rules = job()
    bad_rules["spec"]["podFailurePolicy"] = {"rules": "all"}
    bad_codes = job(rules=[{"action": "Count", "onExitCodes": {"values": ["one"]}}])
    for obj in (None, [1], {"spec": 3}, {"spec": {"template": "x"}}, bad_rules, bad_codes):
        r = post(job_review(obj))
        assert r.status_code == 200, obj
        response = r.json()["response"]
        assert response["allowed"] is True and "patch" not in response, obj
        assert "left the Job unchanged" in response["warnings"][0], obj


def test_a_bug_admits_the_job_unchanged_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("webhook.admission.plan_job", broken)
    r = post(job_review(job()))
    assert r.status_code == 200
    response = r.json()["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "internal error; the Job was admitted unchanged" in response["warnings"][0]


def test_the_rule_is_added_once() -> None:
    for first in (job(), job(rules=[FAIL_ON_42]), job(replacement=None)):
        _, once = answer(first)
        again, twice = answer(once)
        assert twice == once and "patch" not in again and "warnings" not in again


def test_replacement_policy_is_left_when_it_is_failed_or_unset() -> None:
    _, out = answer(job(replacement=None))
    assert out["spec"]["podFailurePolicy"] == {"rules": [IGNORE_EVICTED]}
    assert "podReplacementPolicy" not in out["spec"]  # the API server defaults it to Failed
    _, out = answer(job(replacement="Failed"))
    assert out["spec"]["podFailurePolicy"] == {"rules": [IGNORE_EVICTED]}
    assert out["spec"]["podReplacementPolicy"] == "Failed"


def test_an_exit_code_rule_before_ours_that_stops_evictions_is_warned() -> None:
    """Rules are tried in order: a container stopped by an eviction exits 143 or 137."""
    catches = [
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [1, 137]}},
    ]
    response, out = answer(job(rules=copy.deepcopy(catches)))
    assert out["spec"]["podFailurePolicy"]["rules"] == [*catches, IGNORE_EVICTED]
    assert [w.split(" ", 1)[0] for w in response["warnings"]] == [
        "spec.podFailurePolicy.rules[0]",
        "spec.podFailurePolicy.rules[1]",
    ]
    assert "exit code 137 or 143" in response["warnings"][0]
    harmless = [
        FAIL_ON_42,
        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [0]}},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [137, 143]}},
    ]
    response, _ = answer(job(rules=harmless))
    assert "warnings" not in response


def test_a_job_update_is_not_mutated() -> None:
    response = post(job_review(job(), operation="UPDATE")).json()["response"]
    assert "patch" not in response
    assert "Job CREATE, got UPDATE Job" in response["warnings"][0]


def test_an_unauthenticated_webhook_adds_the_rule_too() -> None:
    """The answer is a function of the Job alone: a forger gets back only their own Job."""
    unauthenticated = client_for(Admission(lambda: CONTRACT, authenticated=False))
    _, out = answer(job(), unauthenticated)
    assert out["spec"]["podFailurePolicy"] == {"rules": [IGNORE_EVICTED]}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
loose_rules = st.fixed_dictionaries(
    {},
    optional={
        "action": st.sampled_from(["Ignore", "Count", "FailJob", "FailIndex"]) | json_values,
        "onExitCodes": st.fixed_dictionaries(
            {},
            optional={
                "operator": st.sampled_from(["In", "NotIn"]) | json_values,
                "values": st.lists(st.integers(-1, 300), max_size=3) | json_values,
            },
        ),
        "onPodConditions": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "type": st.sampled_from(["DisruptionTarget", "Custom"]) | json_values,
                    "status": st.sampled_from(["True", "False", ""]) | json_values,
                },
            ),
            max_size=2,
        )
        | json_values,
    },
)
loose_jobs = st.fixed_dictionaries(
    {
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "template": st.fixed_dictionaries(
                    {
                        "spec": st.fixed_dictionaries(
                            {},
                            optional={
                                "schedulerName": st.sampled_from([names.SCHEDULER_NAME, "x"])
                                | json_values,
                                "restartPolicy": st.sampled_from(["Never", "OnFailure", "Always"])
                                | json_values,
                            },
                        )
                    }
                )
                | json_values,
                "podFailurePolicy": st.fixed_dictionaries(
                    {}, optional={"rules": st.lists(loose_rules, max_size=22) | json_values}
                )
                | json_values,
                "podReplacementPolicy": st.sampled_from(["Failed", "TerminatingOrFailed", "x"])
                | json_values,
            },
        )
        | json_values
    }
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loose_jobs | json_values)
def test_fuzzed_jobs_are_allowed_and_patches_apply_once(obj: Any) -> None:
    r = post(job_review(obj))
    assert r.status_code == 200, r.text
    response, ops = response_ops(r.content)
    assert response["allowed"] is True
    assert not any("only mutates" in w for w in response.get("warnings", ()))
    if ops:
        patched = apply_patch(obj, ops)
        spec = patched["spec"]
        assert len(spec["podFailurePolicy"]["rules"]) <= names.JOB_MAX_POD_FAILURE_RULES
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        assert spec.get("podReplacementPolicy", "Failed") == "Failed"
        assert "patch" not in post(job_review(patched)).json()["response"]
