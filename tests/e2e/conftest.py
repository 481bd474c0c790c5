"""Fixtures for end-to-end tests against a real local control plane.

Every test under tests/e2e is marked ``e2e``. One control plane (etcd +
kube-apiserver) serves the whole session; each test gets its own namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from testbed import ControlPlane
from testbed.cluster import selected_release

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the session; stopped at the end even after failures.

    With kube-scheduler's topology-aware placement on, as a cluster that uses PodGroup
    ``schedulingConstraints.topology`` runs (fluence must agree with the placements
    kube-scheduler tries, one domain at a time), and CompositePodGroups served where
    the release has them.
    """
    gates, apiserver_args = selected_release().with_alpha()
    cp = ControlPlane(feature_gates=gates, apiserver_args=apiserver_args)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace, deleted (pods force-deleted) after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.delete_namespace(name)


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[ApiClient]:
    """A `kubernetes` ApiClient with admin rights; ``CoreV1Api(kube)`` etc. build on it."""
    client = control_plane.api_client()
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]
