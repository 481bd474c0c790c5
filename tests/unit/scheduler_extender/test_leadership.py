"""One extender runs the queue: the holder of the Lease, taken over only once it lapses."""

from __future__ import annotations

import copy

import pytest
from kubernetes.client import V1Lease, V1LeaseSpec
from kubernetes.client.exceptions import ApiException

from fluence import names
from scheduler_extender.leadership import LeaseElector


class Leases:
    """coordination.k8s.io Leases with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.lease: V1Lease | None = None
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503)

    def read_namespaced_lease(self, name: str, namespace: str) -> V1Lease:
        self._check()
        if self.lease is None:
            raise ApiException(status=404)
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: V1Lease) -> V1Lease:
        self._check()
        if self.lease is not None:
            raise ApiException(status=409)
        self.version += 1
        body.metadata.resource_version = str(self.version)  # type: ignore[union-attr]
        self.lease = copy.deepcopy(body)
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: V1Lease) -> V1Lease:
        self._check()
        assert self.lease is not None
        if _version(body) != _version(self.lease):
            raise ApiException(status=409)
        self.version += 1
        body.metadata.resource_version = str(self.version)  # type: ignore[union-attr]
        self.lease = copy.deepcopy(body)
        return body


def _version(lease: V1Lease) -> str:
    return (lease.metadata.resource_version if lease.metadata else None) or ""


def spec(leases: Leases) -> V1LeaseSpec:
    assert leases.lease is not None and leases.lease.spec is not None
    return leases.lease.spec


def elector(leases: Leases, name: str, now: list[float]) -> LeaseElector:
    e = LeaseElector(None, "kube-system", "fluence-queue", name, duration=15, clock=lambda: now[0])
    e.leases = leases  # type: ignore[assignment]
    return e


Two = tuple[Leases, LeaseElector, LeaseElector, list[float]]


@pytest.fixture
def two() -> Two:
    leases, now = Leases(), [1000.0]
    return leases, elector(leases, "a", now), elector(leases, "b", now), now


def test_the_first_takes_the_lease_and_the_second_follows(two: Two) -> None:
    leases, a, b, now = two
    assert a.step() and not b.step()
    assert spec(leases).holder_identity == "a"
    for _ in range(10):
        now[0] += 5
        assert a.step() and not b.step()


def test_a_silent_leader_is_replaced_after_the_lease_lapses(two: Two) -> None:
    leases, a, b, now = two
    assert a.step() and not b.step()
    now[0] += 14
    assert not b.step()  # not yet: b has seen the same record for 14 s only
    assert not a.leader  # a, not renewed for 2/3 of the lease, has stopped leading
    now[0] += 2
    assert b.step()
    assert spec(leases).holder_identity == "b" and spec(leases).lease_transitions == 1
    assert not a.step()


def test_a_resigned_lease_is_taken_at_once(two: Two) -> None:
    _, a, b, _ = two
    assert a.step()
    a.resign()
    assert b.step()


def test_a_leader_that_cannot_renew_stops_before_anyone_may_start(two: Two) -> None:
    leases, a, _, now = two
    assert a.step()
    leases.down = True
    now[0] += 5
    assert a.step()  # still within 2/3 of the lease since the last renewal
    now[0] += 6
    assert not a.step()


def test_the_leader_carries_the_queues_state_and_a_successor_reads_it(two: Two) -> None:
    leases, a, b, now = two
    assert a.step()
    a.carry('{"ns/g":[2,5020.0]}')
    assert a.step()
    assert leases.lease is not None and leases.lease.metadata is not None
    assert leases.lease.metadata.annotations == {
        names.ANNOTATION_GANG_TIMEOUTS: '{"ns/g":[2,5020.0]}'
    }
    assert not b.step() and b.carried == '{"ns/g":[2,5020.0]}'
    now[0] += 16  # a stops renewing; b takes over and the state stays for it
    assert b.step() and b.carried == '{"ns/g":[2,5020.0]}'
    assert leases.lease.metadata.annotations == {
        names.ANNOTATION_GANG_TIMEOUTS: '{"ns/g":[2,5020.0]}'
    }
    b.carry('{"ns/g":[3,5100.0]}')
    assert b.step()
    assert (
        leases.lease.metadata.annotations[names.ANNOTATION_GANG_TIMEOUTS] == '{"ns/g":[3,5100.0]}'
    )
