"""The one place a Kubernetes API client is built, for every binary and the kubectl plugin."""

from __future__ import annotations

import os
from typing import Any


def api_client(
    kubeconfig: str | None, *, context: str | None = None, connections: int | None = None
) -> Any:
    """An ``ApiClient`` for the cluster.

    ``kubeconfig`` is a file path; ``None`` means the user's default kubeconfig
    (``$KUBECONFIG`` or ``~/.kube/config``, how the kubectl plugin runs); ``""``
    means the pod's in-cluster service account when run in a pod (how the binaries
    run), else the default kubeconfig, as kubectl would (how an operator runs
    ``fluence-webhook certs`` from a workstation).
    ``connections`` caps the connection pool, which must hold every watch
    stream a binary keeps open plus room for its other calls.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig == "" and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig or os.environ.get("KUBECONFIG") or None,
            context=context,
            client_configuration=configuration,
        )
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)
