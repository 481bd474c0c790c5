"""The Binding client against a real kube-apiserver: success, conflict, UID precondition, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from scheduler_extender.binder import ApiBinder
from scheduler_extender.scheduling import BindConflict, BindError, BindOutcomeUnknown

# The API server binds to any node name; no Node object is made, so the session's
# other tests see the same nodes as before.
NODE = "binder-test-node"


def make_pod(kube: ApiClient, namespace: str, name: str) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
    }
    pod = client.CoreV1Api(kube).create_namespaced_pod(namespace, body)
    return str(pod.metadata.uid)


def read_pod(kube: ApiClient, namespace: str, name: str) -> Any:
    return client.CoreV1Api(kube).read_namespaced_pod(name, namespace)


def test_bind_sets_node_and_annotations_and_a_second_bind_is_a_conflict(
    kube: ApiClient, namespace: str
) -> None:
    uid = make_pod(kube, namespace, "p")
    binder = ApiBinder(kube.configuration, connections=2)

    async def scenario() -> tuple[str | None, str | None]:
        try:
            await binder.bind(namespace, "p", uid, NODE, {"example.com/placed": "yes"})
            with pytest.raises(BindConflict):
                await binder.bind(namespace, "p", uid, NODE, {})
            return await binder.node_of(namespace, "p"), await binder.node_of(namespace, "gone")
        finally:
            await binder.close()

    bound_to, missing = asyncio.run(scenario())
    pod = read_pod(kube, namespace, "p")
    assert pod.spec.node_name == NODE and bound_to == NODE
    assert pod.metadata.annotations["example.com/placed"] == "yes"
    assert missing is None


def test_a_stale_uid_or_a_missing_pod_is_a_bind_error_that_says_why(
    kube: ApiClient, namespace: str
) -> None:
    make_pod(kube, namespace, "q")
    binder = ApiBinder(kube.configuration)

    async def scenario() -> list[str]:
        errors: list[str] = []
        try:
            for name, uid in (("q", "00000000-0000-0000-0000-000000000000"), ("absent", "")):
                try:
                    await binder.bind(namespace, name, uid, NODE, {})
                except (BindError, BindConflict) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            await binder.close()
        return errors

    stale, absent = asyncio.run(scenario())
    assert stale.startswith("BindConflict") and "UID in precondition" in stale, stale
    assert absent.startswith("BindError: HTTP 404") and "absent" in absent, absent
    assert read_pod(kube, namespace, "q").spec.node_name is None


def test_an_unreachable_api_server_is_a_bind_error() -> None:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    binder = ApiBinder(config, timeout=2.0)

    async def scenario() -> str:
        try:
            await binder.bind("ns", "p", "", "n", {})
        except BindError as exc:
            return str(exc)
        finally:
            await binder.close()
        return ""

    assert "could not be reached" in asyncio.run(scenario())


def test_a_binding_sent_but_never_answered_has_an_unknown_outcome() -> None:
    """The connection is made and the request sent, then nothing: it may have been bound."""

    async def scenario() -> BaseException | None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(65536)  # take the request, never answer
            await asyncio.sleep(10)
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = client.Configuration()
        config.host = f"http://127.0.0.1:{port}"
        binder = ApiBinder(config, timeout=1.0)
        try:
            await binder.bind("ns", "p", "", "n", {})
        except BindError as exc:
            return exc
        finally:
            await binder.close()
            server.close()
        return None

    error = asyncio.run(scenario())
    assert isinstance(error, BindOutcomeUnknown), error
