"""Pods on the real node reach the API as in a cluster: the ``kubernetes`` Service, routed
by kube-proxy, with the pod's own ServiceAccount token.

What the shipped Deployments need before they can run on the real node; a control plane
of its own (``pod_network=True``) serves them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed import ControlPlane, images
from testbed.binaries import kubernetes_version
from testbed.node import RealNode, pod_logs
from tests.e2e.test_extender_e2e import wait_for
from tests.support.real_node import require_real_node

IN_CLUSTER = (
    "from kubernetes import client, config; config.load_incluster_config(); "
    "print(client.VersionApi().get_code().git_version)"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ControlPlane, RealNode]]:
    require_real_node()
    with ControlPlane(pod_network=True) as cp, RealNode(cp, "real-node") as node:
        node.load_image(images.ensure_fluence_image())
        yield cp, node


def test_a_pod_calls_the_api_through_the_kubernetes_service_with_its_token(
    cluster: tuple[ControlPlane, RealNode],
) -> None:
    cp, node = cluster
    cp.create_namespace("net")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "in-cluster"},
        "spec": {
            "nodeName": node.name,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": f"fluence:{images.fluence_version()}",
                    "command": ["python", "-c", IN_CLUSTER],
                }
            ],
        },
    }
    created = cp.rest.create("/api/v1/namespaces/net/pods", body)
    # The ServiceAccount admission gave it the default account's token.
    mounts = created["spec"]["containers"][0].get("volumeMounts", [])
    assert any(m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount" for m in mounts)

    def phase() -> str:
        got = cp.rest.get("/api/v1/namespaces/net/pods/in-cluster")
        return str(got.get("status", {}).get("phase"))

    wait_for(lambda: phase() in ("Succeeded", "Failed"), 120, "the pod to finish", phase)
    printed = pod_logs(cp, "net", "in-cluster").strip()
    assert phase() == "Succeeded", printed
    assert printed == kubernetes_version()
