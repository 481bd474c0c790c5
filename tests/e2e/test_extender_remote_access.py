"""The extender listening beyond loopback, as the chart's extender Service makes it.

A real ``fluence-extender`` binds every address; requests come in over the
machine's own non-loopback address with tokens of real ServiceAccounts, which
the real API server reviews. RBAC comes from the chart's
``fluence-extender-viewer`` ClusterRole.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from testbed import ControlPlane, KubeApiError
from tests.e2e.test_extender_e2e import Extender
from tests.support.helm import template

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "fluence"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def outside_address() -> str:
    """An IPv4 address of this machine that is not loopback (the pod IP's stand-in).

    The address the kernel would send from towards a private network; connecting a
    UDP socket sends nothing.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
            address: str = probe.getsockname()[0]
        except OSError as exc:
            raise AssertionError(f"this machine has no route off loopback: {exc}") from exc
    assert not ipaddress.ip_address(address).is_loopback, address
    return address


def viewer_role() -> dict[str, Any]:
    docs = yaml.safe_load_all(template(CHART, "--set", "extender.service.enabled=true"))
    for d in docs:
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "fluence-extender-viewer":
            role: dict[str, Any] = d
            return role
    raise AssertionError("the chart renders no fluence-extender-viewer ClusterRole")


def token_of(control_plane: ControlPlane, namespace: str, name: str) -> str:
    control_plane.rest.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    answer = control_plane.rest.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token: str = answer["status"]["token"]
    return token


@pytest.fixture(scope="module")
def exposed(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Extender]:
    extender = Extender(tmp_path_factory.mktemp("exposed"), control_plane.kubeconfig)
    extender.env["FLUENCE_BIND"] = f"0.0.0.0:{extender.port}"
    extender.start()
    try:
        yield extender
    finally:
        extender.kill()


def test_beyond_loopback_only_a_reviewed_token_with_rbac_gets_in(
    control_plane: ControlPlane, exposed: Extender, namespace: str
) -> None:
    role = viewer_role()
    role["metadata"] = {"name": f"fluence-extender-viewer-{uuid.uuid4().hex[:6]}"}
    control_plane.rest.create(f"{RBAC}/clusterroles", role)
    viewer = token_of(control_plane, namespace, "dashboards")
    nobody = token_of(control_plane, namespace, "nobody")
    control_plane.rest.create(
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role["metadata"]["name"]},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [{"kind": "ServiceAccount", "name": "dashboards", "namespace": namespace}],
        },
    )
    try:
        outside = httpx.Client(base_url=f"http://{outside_address()}:{exposed.port}", timeout=10)

        def call(method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return outside.request(method, path, headers=headers, **kw)

        assert call("GET", "/healthz").status_code == 200
        assert call("GET", "/readyz").status_code == 200
        assert call("GET", "/state").status_code == 401
        assert call("GET", "/state", "not-a-token").status_code == 401
        refused = call("GET", "/state", nobody)
        assert refused.status_code == 403
        assert f"system:serviceaccount:{namespace}:nobody" in refused.json()["Error"]
        assert call("GET", "/state", viewer).status_code == 200
        assert call("GET", "/metrics/", viewer).status_code == 200
        bind = {"PodName": "x", "PodNamespace": namespace, "PodUID": "u", "Node": "n"}
        assert call("POST", "/bind", viewer, json=bind).status_code == 403
        assert call("POST", "/filter", nobody, json={}).status_code == 403
        # The pod's own loopback (kube-scheduler, a port-forward) needs no token.
        assert httpx.get(f"{exposed.url}/state", timeout=10).status_code == 200
    finally:
        for kind in ("clusterrolebindings", "clusterroles"):
            with contextlib.suppress(KubeApiError):
                control_plane.rest.delete(f"{RBAC}/{kind}/{role['metadata']['name']}")
