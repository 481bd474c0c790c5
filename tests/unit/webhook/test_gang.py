"""Gang wiring: which PodGroup, what size, when it is created and when the pod is linked."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from fluence import names
from fluence.json_patch import PatchBuilder
from tests.support.admission import container, pod
from webhook.gang import (
    GangRequest,
    GangWiring,
    Owner,
    plan_gang,
    podgroup_body,
    resolve_min_count,
)
from webhook.review import Pod, UserInfo

JOB_OWNER = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "name": "train",
    "uid": "u",
    "controller": True,
}


def as_pod(obj: dict[str, Any]) -> Pod:
    return msgspec.convert(obj, Pod)


class FakeCluster:
    """Records calls; answers like an API server would."""

    def __init__(
        self,
        *,
        served: bool = True,
        jobs: dict[str, int] | None = None,
        fail: bool = False,
        allowed: frozenset[str] | None = None,
    ) -> None:
        self.served = served
        self.version = "v1beta1"
        self.jobs = jobs or {}
        self.fail = fail
        self.allowed = allowed
        """Usernames a SubjectAccessReview allows to create PodGroups; None: everyone."""
        self.created: list[dict[str, Any]] = []
        self.job_reads: list[tuple[str, str]] = []
        self.reviews: list[tuple[UserInfo, str]] = []

    def may_create_podgroups(self, user: UserInfo, namespace: str) -> bool:
        self.reviews.append((user, namespace))
        return self.allowed is None or user.username in self.allowed

    def read_podgroup(self, namespace: str, name: str, version: str) -> dict[str, Any] | None:
        return next(
            (
                b
                for b in self.created
                if (b["metadata"]["namespace"], b["metadata"]["name"]) == (namespace, name)
            ),
            None,
        )

    def served_podgroup_version(self) -> str | None:
        return self.version if self.served else None

    def job_size(self, namespace: str, name: str) -> int | None:
        self.job_reads.append((namespace, name))
        return self.jobs.get(name)

    def create_podgroup(self, body: dict[str, Any]) -> bool:
        if self.fail:
            raise RuntimeError("forbidden")
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        exists = any(
            (b["metadata"]["namespace"], b["metadata"]["name"]) == key for b in self.created
        )
        if not exists:
            self.created.append(body)
        return not exists


def test_plan_uses_the_request_namespace_and_the_size_annotation() -> None:
    p = pod(
        container(),
        labels={names.LABEL_GROUP: "g1"},
        annotations={names.ANNOTATION_GROUP_SIZE: "4"},
        owners=[JOB_OWNER],
    )
    request, warnings = plan_gang(as_pod(p), "team-a", UserInfo(username="alice"))
    assert request == GangRequest(
        "g1",
        "team-a",
        4,
        "train",
        Owner("batch/v1", "Job", "train", "u"),
        UserInfo(username="alice"),
    )
    assert request.workload == "Job/train/u"
    assert warnings == []


def test_plan_skips_pods_without_label_or_already_linked() -> None:
    assert plan_gang(as_pod(pod(container())), "ns") == (None, [])
    linked = pod(container(), labels={names.LABEL_GROUP: "g1"})
    linked["spec"]["schedulingGroup"] = {"podGroupName": "other"}
    assert plan_gang(as_pod(linked), "ns") == (None, [])


def test_plan_rejects_names_a_podgroup_cannot_have() -> None:
    request, warnings = plan_gang(as_pod(pod(container(), labels={names.LABEL_GROUP: "My_G"})), "n")
    assert request is None
    assert "not a valid PodGroup name" in warnings[0]


@pytest.mark.parametrize("raw", ["0", "-2", "two", "", "٣", "1_0", " 4", "+4"])
def test_bad_size_annotation_is_ignored_with_a_warning(raw: str) -> None:
    p = pod(
        container(), labels={names.LABEL_GROUP: "g"}, annotations={names.ANNOTATION_GROUP_SIZE: raw}
    )
    request, warnings = plan_gang(as_pod(p), "ns")
    assert request is not None and request.size_annotation is None
    assert len(warnings) == 1


def test_min_count_annotation_then_job_then_one() -> None:
    jobs = {"train": 3}
    lookup = FakeCluster(jobs=jobs).job_size
    assert resolve_min_count(GangRequest("g", "ns", 5, "train"), lookup) == 5
    assert resolve_min_count(GangRequest("g", "ns", None, "train"), lookup) == 3
    assert resolve_min_count(GangRequest("g", "ns", None, "gone"), lookup) == 1
    assert resolve_min_count(GangRequest("g", "ns", None, None), lookup) == 1


def test_only_batch_jobs_count_as_owner() -> None:
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u"}
    request, _ = plan_gang(
        as_pod(pod(container(), labels={names.LABEL_GROUP: "g"}, owners=[rs])), "n"
    )
    assert request is not None and request.job is None


def test_podgroup_body_is_marked_as_ours_and_for_whom() -> None:
    body = podgroup_body(GangRequest("g", "ns", None, None, user=UserInfo(username="bob")), 0)
    assert body["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert body["metadata"]["annotations"] == {
        names.ANNOTATION_CREATED_BY: "fluence-webhook",
        names.ANNOTATION_CREATED_FOR: "user/bob",
    }
    assert body["metadata"]["labels"] == {names.LABEL_GROUP: "g"}
    assert "ownerReferences" not in body["metadata"]
    # All or nothing in preemption too: v1beta1 would default to single.
    assert body["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 1}},
        "disruptionMode": {"all": {}},
    }
    # v1alpha2 keeps only "Pod" while its alpha gate is off; fluence keeps such gangs whole.
    older = podgroup_body(GangRequest("g", "ns", None, None), 2, version="v1alpha2")
    assert older["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}


def test_the_podgroup_takes_the_pods_priority_class() -> None:
    """kube-scheduler (1.37) places a group only when every pod has the group's priority."""
    p = pod(container(), labels={names.LABEL_GROUP: "g1"}, owners=[JOB_OWNER])
    p["spec"]["priorityClassName"] = "urgent"
    request, _ = plan_gang(as_pod(p), "ns")
    assert request is not None and request.priority_class == "urgent"
    for version in ("v1beta1", "v1alpha2"):
        assert podgroup_body(request, 2, version)["spec"]["priorityClassName"] == "urgent"
    plain, _ = plan_gang(as_pod(pod(container(), labels={names.LABEL_GROUP: "g1"})), "ns")
    assert plain is not None and "priorityClassName" not in podgroup_body(plain, 2)["spec"]


def test_podgroup_is_owned_by_the_pods_controller_for_garbage_collection() -> None:
    owner = Owner("batch/v1", "Job", "train", "1234")
    body = podgroup_body(GangRequest("g", "ns", None, "train", owner), 3)
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "1234"}
    ]
    assert body["metadata"]["annotations"][names.ANNOTATION_CREATED_FOR] == "Job/train/1234"


def test_only_a_controlling_owner_with_a_uid_owns_the_podgroup() -> None:
    not_controller = {**JOB_OWNER, "controller": False}
    request, _ = plan_gang(
        as_pod(pod(container(), labels={names.LABEL_GROUP: "g"}, owners=[not_controller])), "n"
    )
    assert request is not None and request.owner is None and request.job == "train"
    no_uid = {**JOB_OWNER, "uid": ""}
    request, _ = plan_gang(
        as_pod(pod(container(), labels={names.LABEL_GROUP: "g"}, owners=[no_uid])), "n"
    )
    assert request is not None and request.owner is None


async def wire(wiring: GangWiring, request: GangRequest, dry_run: bool = False) -> tuple[Any, Any]:
    patch, warnings = PatchBuilder(), list[str]()
    await wiring.wire(request, dry_run=dry_run, patch=patch, warnings=warnings)
    return patch.ops, warnings


LINK = [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "g"}}]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_members_arriving_together_cost_one_create_call() -> None:
    calls: list[str] = []
    cluster = FakeCluster()
    create = cluster.create_podgroup

    def counting(body: dict[str, Any]) -> bool:
        calls.append(body["metadata"]["name"])
        return create(body)

    cluster.create_podgroup = counting  # type: ignore[method-assign]
    clock = Clock()
    wiring = GangWiring(cluster, ensured_ttl=10, clock=clock)
    await wiring.refresh()
    for _ in range(4):
        assert await wire(wiring, GangRequest("g", "ns", 4, None)) == (LINK, [])
    assert calls == ["g"]
    clock.now += 11  # remembered no longer: ask the API server again
    assert await wire(wiring, GangRequest("g", "ns", 4, None)) == (LINK, [])
    assert calls == ["g", "g"]
    await wire(wiring, GangRequest("g", "other-ns", 4, None))
    assert calls == ["g", "g", "g"]


async def test_served_api_creates_once_and_links_every_member() -> None:
    cluster = FakeCluster(jobs={"train": 2})
    wiring = GangWiring(cluster, ensured_ttl=0)
    assert await wiring.refresh()
    request = GangRequest("g", "ns", None, "train")
    assert await wire(wiring, request) == (LINK, [])
    assert await wire(wiring, request) == (LINK, [])  # AlreadyExists is fine
    assert len(cluster.created) == 1
    assert cluster.created[0]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2


async def test_dry_run_links_but_creates_nothing() -> None:
    cluster = FakeCluster()
    wiring = GangWiring(cluster)
    await wiring.refresh()
    assert await wire(wiring, GangRequest("g", "ns", 2, None), dry_run=True) == (LINK, [])
    assert cluster.created == []


async def test_unserved_api_or_no_cluster_does_nothing() -> None:
    cluster = FakeCluster(served=False)
    wiring = GangWiring(cluster)
    assert not await wiring.refresh()
    assert await wire(wiring, GangRequest("g", "ns", 2, None)) == ([], [])
    assert cluster.created == []
    assert await wire(GangWiring(None), GangRequest("g", "ns", 2, None)) == ([], [])


async def test_failed_creation_leaves_the_pod_unlinked_with_a_warning() -> None:
    wiring = GangWiring(FakeCluster(fail=True))
    await wiring.refresh()
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 2, None))
    assert ops == []
    assert "could not create PodGroup 'g'" in warnings[0]


async def test_discovery_errors_keep_the_last_answer() -> None:
    cluster = FakeCluster()
    wiring = GangWiring(cluster)
    assert await wiring.refresh()

    def broken() -> str | None:
        raise ConnectionError("api server down")

    cluster.served_podgroup_version = broken  # type: ignore[method-assign]
    assert await wiring.refresh()
    assert wiring.served


async def test_slow_api_calls_stay_within_the_review_budget_and_admit_without_the_link() -> None:
    """Two 2-second calls used to take 4 s of a 5 s admission timeout, or more."""
    cluster = FakeCluster()

    def slow_size(namespace: str, name: str) -> int | None:
        time.sleep(2.0)
        return 4

    def slow_create(body: dict[str, Any]) -> bool:
        time.sleep(2.0)
        return True

    cluster.job_size = slow_size  # type: ignore[method-assign]
    cluster.create_podgroup = slow_create  # type: ignore[method-assign]
    wiring = GangWiring(cluster, budget_seconds=0.5)
    await wiring.refresh()
    started = time.monotonic()
    ops, warnings = await wire(wiring, GangRequest("g", "ns", None, "train"))
    assert time.monotonic() - started < 1.0
    assert ops == [] and len(warnings) == 1 and "did not answer within 0.5s" in warnings[0]


ALICE = UserInfo(username="alice", uid="a-1", groups=["team-a", "system:authenticated"])
MALLORY = UserInfo(username="mallory", groups=["system:authenticated"])
JOB_CONTROLLER = UserInfo(username="system:serviceaccount:kube-system:job-controller")
TRAIN = Owner("batch/v1", "Job", "train", "uid-train")


def wiring_for(cluster: FakeCluster, **kw: Any) -> GangWiring:
    trusted = frozenset({JOB_CONTROLLER.username})
    return GangWiring(cluster, trusted_controllers=trusted, **kw)


async def test_a_requester_who_may_not_create_podgroups_gets_none_through_the_webhook() -> None:
    cluster = FakeCluster(allowed=frozenset({"alice"}))
    wiring = wiring_for(cluster)
    await wiring.refresh()
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 64, None, user=MALLORY))
    assert ops == [] and cluster.created == []
    assert "'mallory' may not create PodGroups in 'ns'" in warnings[0]
    assert cluster.reviews == [(MALLORY, "ns")]  # the requester's own identity was checked
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 2, None, user=ALICE))
    assert (ops, warnings) == (LINK, [])
    assert cluster.created[0]["metadata"]["annotations"][names.ANNOTATION_CREATED_FOR] == (
        "user/alice"
    )


async def test_a_trusted_controller_creates_for_the_owner_without_a_review() -> None:
    cluster = FakeCluster(allowed=frozenset(), jobs={"train": 3})
    wiring = wiring_for(cluster)
    await wiring.refresh()
    request = GangRequest("g", "ns", None, "train", TRAIN, JOB_CONTROLLER)
    assert await wire(wiring, request) == (LINK, [])
    assert cluster.reviews == []
    meta = cluster.created[0]["metadata"]
    assert meta["ownerReferences"][0]["uid"] == "uid-train"
    assert meta["annotations"][names.ANNOTATION_CREATED_FOR] == "Job/train/uid-train"
    # The same controller without an owner is just another requester.
    ops, warnings = await wire(wiring, GangRequest("h", "ns", 2, None, user=JOB_CONTROLLER))
    assert ops == [] and "may not create PodGroups" in warnings[0]


async def test_a_podgroup_made_for_another_workload_is_never_adopted() -> None:
    cluster = FakeCluster(jobs={"train": 2})
    wiring = wiring_for(cluster, ensured_ttl=0)
    await wiring.refresh()
    assert await wire(wiring, GangRequest("g", "ns", None, "train", TRAIN, JOB_CONTROLLER)) == (
        LINK,
        [],
    )
    # Another tenant in the namespace, allowed to create PodGroups, names the same gang.
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 64, None, user=MALLORY))
    assert ops == []
    assert (
        "was not created by the fluence webhook for this workload (user/mallory)" in (warnings[0])
    )
    # A second Job reusing the name does not join the first Job's gang either.
    other = Owner("batch/v1", "Job", "train2", "uid-2")
    ops, _ = await wire(wiring, GangRequest("g", "ns", None, None, other, JOB_CONTROLLER))
    assert ops == []
    # The first Job's later members are linked, and the PodGroup kept its size.
    request = GangRequest("g", "ns", None, "train", TRAIN, JOB_CONTROLLER)
    assert await wire(wiring, request) == (LINK, [])
    assert len(cluster.created) == 1
    assert cluster.created[0]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2


async def test_a_podgroup_the_webhook_did_not_create_is_not_adopted() -> None:
    cluster = FakeCluster()
    cluster.created.append(
        {"metadata": {"namespace": "ns", "name": "g", "annotations": {}}, "spec": {}}
    )
    wiring = wiring_for(cluster)
    await wiring.refresh()
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 2, None, user=ALICE))
    assert ops == [] and "already exists" in warnings[0]
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 2, None, user=ALICE), dry_run=True)
    assert ops == [] and "already exists" in warnings[0]


async def test_a_remembered_link_is_not_reused_for_another_requester() -> None:
    cluster = FakeCluster(allowed=frozenset({"alice"}))
    wiring = wiring_for(cluster, ensured_ttl=60)
    await wiring.refresh()
    assert await wire(wiring, GangRequest("g", "ns", 2, None, user=ALICE)) == (LINK, [])
    ops, _ = await wire(wiring, GangRequest("g", "ns", 2, None, user=MALLORY))
    assert ops == []


async def test_a_failed_review_admits_without_a_link() -> None:
    cluster = FakeCluster()

    def broken(user: UserInfo, namespace: str) -> bool:
        raise ConnectionError("api server down")

    cluster.may_create_podgroups = broken  # type: ignore[method-assign]
    wiring = wiring_for(cluster)
    await wiring.refresh()
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 2, None, user=ALICE))
    assert ops == [] and cluster.created == []
    assert "could not check whether 'alice' may create PodGroups" in warnings[0]


async def test_podgroups_are_created_in_the_version_the_api_server_serves() -> None:
    cluster = FakeCluster()
    cluster.version = "v1alpha2"  # a Kubernetes 1.36 cluster
    wiring = GangWiring(cluster)
    assert await wiring.refresh() and wiring.version == "v1alpha2"
    assert await wire(wiring, GangRequest("g", "ns", 2, None)) == (LINK, [])
    assert cluster.created[0]["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    cluster.version = "v1beta1"  # upgraded to 1.37
    await wiring.refresh()
    ops, _ = await wire(wiring, GangRequest("h", "ns", 2, None))
    assert ops[0]["value"] == {"podGroupName": "h"}
    assert cluster.created[1]["apiVersion"] == "scheduling.k8s.io/v1beta1"


async def test_a_pod_of_another_priority_is_not_linked_to_the_group() -> None:
    cluster = FakeCluster()
    wiring = wiring_for(cluster, ensured_ttl=60)
    await wiring.refresh()
    urgent = GangRequest("g", "ns", 2, None, user=ALICE, priority_class="urgent")
    assert await wire(wiring, urgent) == (LINK, [])
    assert cluster.created[0]["spec"]["priorityClassName"] == "urgent"
    # The same user's next member, of another priority, would hold the whole group back.
    ops, warnings = await wire(wiring, GangRequest("g", "ns", 2, None, user=ALICE))
    assert ops == [] and len(cluster.created) == 1
    assert "has priority class 'urgent' and this pod 'none'" in warnings[0]
    ops, warnings = await wire(
        wiring, GangRequest("g", "ns", 2, None, user=ALICE, priority_class="low"), dry_run=True
    )
    assert ops == [] and "'low'" in warnings[0]
    # Members of the group's priority are still linked.
    assert await wire(wiring, urgent) == (LINK, [])


async def test_on_1_36_a_pod_of_another_priority_is_still_linked() -> None:
    """1.36 drops the PodGroup's priority class (without WorkloadAwarePreemption) and its
    kube-scheduler compares no priorities: a stored group without one is no mismatch."""
    cluster = FakeCluster()
    cluster.version = "v1alpha2"
    wiring = wiring_for(cluster, ensured_ttl=0)
    await wiring.refresh()
    urgent = GangRequest("g", "ns", 2, None, user=ALICE, priority_class="urgent")
    assert await wire(wiring, urgent) == (LINK, [])
    cluster.created[0]["spec"].pop("priorityClassName")  # as the 1.36 API server stores it
    assert await wire(wiring, urgent) == (LINK, [])
