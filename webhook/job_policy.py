"""Evictions by fluence's queue do not count toward a Job's ``backoffLimit``.

When a released group does not all start within the gang timeout, the queue evicts it
through the Eviction API and the Job controller makes the pods again. The Eviction API
marks each pod ``DisruptionTarget=True`` before deleting it; without a podFailurePolicy
the Job controller counts every such pod as a failure, so a Job requeued a few times
fails although none of its pods did. At the Job's creation the webhook appends one rule,
``Ignore`` on ``DisruptionTarget=True``, after the user's own: rules are tried in order
and the first that matches decides, so the user's rules keep their meaning.

Kubernetes' own constraints decide when nothing is added (``pkg/apis/batch/validation``):
a podFailurePolicy needs ``restartPolicy: Never`` and holds at most 20 rules, and with
one ``podReplacementPolicy`` may only be ``Failed``. The API server has already defaulted
that field to ``TerminatingOrFailed`` (its default without a policy) when the webhook sees
the Job, so the rule comes with ``Failed``, the default Kubernetes gives a Job that has a
policy: an evicted pod is made again once it has ended, not while it still terminates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fluence import names
from fluence.json_patch import PatchBuilder
from webhook.review import Job, PodFailurePolicyRule

DISRUPTION_RULE: dict[str, Any] = {
    "action": names.JOB_ACTION_IGNORE,
    "onPodConditions": [
        {"type": names.CONDITION_DISRUPTION_TARGET, "status": names.CONDITION_TRUE}
    ],
}
"""The rule appended to ``spec.podFailurePolicy.rules``."""

KILLED_EXIT_CODES = (137, 143)
"""Exit codes of a container stopped by SIGKILL or SIGTERM, as an eviction stops it."""

ON_FAILURE = (
    "the Job's pods use restartPolicy OnFailure, so fluence adds no podFailurePolicy (it "
    "needs Never): each pod the queue evicts to retry its group counts toward backoffLimit; "
    "use restartPolicy Never to have those ignored"
)


@dataclass
class JobMutation:
    """The patch and warnings for one Job."""

    patch: PatchBuilder = field(default_factory=PatchBuilder)
    warnings: list[str] = field(default_factory=list)


def handles_disruption(rule: PodFailurePolicyRule) -> bool:
    """The rule matches a pod marked ``DisruptionTarget=True`` (an empty status defaults to
    True), whatever its action: the user has decided what an eviction means."""
    return any(
        p.type == names.CONDITION_DISRUPTION_TARGET and p.status in ("", names.CONDITION_TRUE)
        for p in rule.on_pod_conditions or ()
    )


def catches_killed(rule: PodFailurePolicyRule) -> bool:
    """The rule counts or fails on an exit code an evicted pod's containers end with."""
    codes = rule.on_exit_codes
    if codes is None or rule.action == names.JOB_ACTION_IGNORE:
        return False
    values = set(codes.values or ())
    if codes.operator == "In":
        return bool(values.intersection(KILLED_EXIT_CODES))
    if codes.operator == "NotIn":
        return not values.issuperset(KILLED_EXIT_CODES)
    return False


def plan_job(job: Job) -> JobMutation:
    """What to change in a Job at its creation; nothing for Jobs of other schedulers."""
    result = JobMutation()
    spec = job.spec
    pod = spec.template.spec
    if pod.scheduler_name != names.SCHEDULER_NAME:
        return result
    policy = spec.pod_failure_policy
    rules = (policy.rules if policy is not None else None) or []
    if any(handles_disruption(r) for r in rules):
        return result
    if pod.restart_policy == names.JOB_RESTART_ON_FAILURE:
        result.warnings.append(ON_FAILURE)
        return result
    if pod.restart_policy != names.JOB_RESTART_NEVER:
        return result  # Always or unset: the API server refuses the Job anyway
    if len(rules) >= names.JOB_MAX_POD_FAILURE_RULES:
        result.warnings.append(
            f"spec.podFailurePolicy already has {len(rules)} rules, Kubernetes' maximum, and "
            "none for DisruptionTarget: pods the queue evicts to retry their group count "
            "toward backoffLimit; merge two rules to make room, or add one for DisruptionTarget"
        )
        return result
    replacement = spec.pod_replacement_policy
    if replacement not in (None, names.JOB_REPLACE_FAILED, names.JOB_REPLACE_TERMINATING_OR_FAILED):
        return result  # not a value the API server accepts: it refuses the Job anyway
    for i, rule in enumerate(rules):
        if catches_killed(rule):
            result.warnings.append(
                f"spec.podFailurePolicy.rules[{i}] ({rule.action} on exit codes) comes before "
                "fluence's DisruptionTarget rule and matches a container stopped by an "
                "eviction (exit code 137 or 143): such evictions by the queue are not ignored"
            )
    if policy is None:
        result.patch.add("/spec/podFailurePolicy", {"rules": [DISRUPTION_RULE]})
    else:
        result.patch.append(
            "/spec/podFailurePolicy/rules", policy.rules is not None, DISRUPTION_RULE
        )
    if replacement == names.JOB_REPLACE_TERMINATING_OR_FAILED:
        result.patch.add("/spec/podReplacementPolicy", names.JOB_REPLACE_FAILED)
    return result
