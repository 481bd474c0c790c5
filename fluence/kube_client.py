"""The one place a Kubernetes API client is built, for every binary and the kubectl plugin."""

from __future__ import annotations

from typing import Any


def api_client(
    kubeconfig: str | None, *, context: str | None = None, connections: int | None = None
) -> Any:
    """An ``ApiClient`` for the cluster.

    ``kubeconfig`` is a file path; ``""`` means the pod's in-cluster service
    account (how the binaries run), ``None`` the user's default kubeconfig
    (``$KUBECONFIG`` or ``~/.kube/config``, how the kubectl plugin runs).
    ``connections`` caps the connection pool, which must hold every watch
    stream a binary keeps open plus room for its other calls.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig == "":
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)
