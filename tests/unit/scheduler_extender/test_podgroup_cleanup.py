"""PodGroups the webhook made for bare pods go once no pod has named them for a while."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from kubernetes.client.exceptions import ApiException

from fluence import names
from fluence.pods import Pod, PodGroup, decode_pod
from scheduler_extender.podgroup_cleanup import PodGroupCleanup
from tests.unit.fluence.test_pods import make_pod


def podgroup(
    name: str, *, uid: str = "u1", made_for: str = "user/alice", owned: bool = False
) -> Any:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": uid,
        "annotations": {
            names.ANNOTATION_CREATED_BY: names.CREATED_BY_WEBHOOK,
            names.ANNOTATION_CREATED_FOR: made_for,
        },
    }
    if owned:
        meta["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "j1", "controller": True}]
    return msgspec.convert({"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": meta}, PodGroup)


def member(name: str, group: str) -> Pod:
    return decode_pod(json.dumps(make_pod(name, ns="ns", group=group, raw=True)))


def test_only_bare_pods_podgroups_without_pods_for_the_grace_are_deleted() -> None:
    now = [0.0]
    groups = [
        podgroup("bare"),
        podgroup("busy"),
        podgroup("job", made_for="Job/j/j1", owned=True),
        podgroup("mine", made_for=""),
    ]
    pods = [member("b0", "busy")]
    deleted: list[str] = []

    def delete(group: PodGroup) -> None:
        deleted.append(group.key)
        groups.remove(group)

    cleanup = PodGroupCleanup(lambda: groups, lambda: pods, delete, grace=60, clock=lambda: now[0])
    assert cleanup.step() == []
    now[0] += 59
    assert cleanup.step() == []
    now[0] += 2
    assert cleanup.step() == ["ns/bare"] and deleted == ["ns/bare"]
    pods.clear()  # the busy group's pod goes: its grace starts now
    now[0] += 30
    assert cleanup.step() == []
    now[0] += 60
    assert cleanup.step() == ["ns/busy"]


def test_a_pod_naming_the_group_again_restarts_the_grace() -> None:
    now = [0.0]
    groups = [podgroup("g")]
    pods: list[Pod] = []
    cleanup = PodGroupCleanup(lambda: groups, lambda: pods, lambda g: None, clock=lambda: now[0])
    cleanup.step()
    now[0] += 50
    pods.append(member("p", "g"))
    cleanup.step()
    pods.clear()
    now[0] += 50
    assert cleanup.step() == []


def test_a_podgroup_made_again_under_the_name_gets_its_own_grace() -> None:
    now = [0.0]
    groups = [podgroup("g", uid="old")]
    cleanup = PodGroupCleanup(lambda: groups, lambda: [], lambda g: None, clock=lambda: now[0])
    cleanup.step()
    now[0] += 50
    groups[0] = podgroup("g", uid="new")
    cleanup.step()
    now[0] += 50
    assert cleanup.step() == []


def test_a_refused_delete_is_not_counted() -> None:
    def refuse(group: PodGroup) -> None:
        raise ApiException(status=409)

    now = [0.0]
    cleanup = PodGroupCleanup(lambda: [podgroup("g")], lambda: [], refuse, clock=lambda: now[0])
    cleanup.step()
    now[0] += 61
    assert cleanup.step() == []
