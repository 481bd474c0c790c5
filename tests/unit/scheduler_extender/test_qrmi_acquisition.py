"""QRMI acquisitions by the queue: made once per group before its release, released when
every pod holding the token is done, never leaked by a kill, a refusal or a restart."""

from __future__ import annotations

import asyncio
import datetime
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from fluence import names, qrmi, resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import Pod
from scheduler_extender.binder import NullBinder
from scheduler_extender.gated_queue import GatedQueue
from scheduler_extender.qrmi_acquisition import (
    Acquisitions,
    QrmiCallFailed,
    QrmiLibrary,
    resource_env,
)
from scheduler_extender.scheduling import Scheduler
from tests.unit.fluence.test_pods import make_node
from tests.unit.scheduler_extender.test_gated_queue import (
    GANG,
    SEAL,
    Api,
    bind,
    finish,
    follow,
    gated,
)

QPU = names.resource_name("qpu")
IBM = (
    "  - name: ibm_a\n"
    "    type: qiskit-runtime-service\n"
    "    environment: {QRMI_IBM_QRS_ENDPOINT: 'http://qrs', QRMI_IBM_QRS_IAM_APIKEY: ''}\n"
)
FELIS = (
    "  - name: felis_b\n"
    "    type: alice-bob-felis\n"
    "    acquire: false\n"
    "    environment: {QRMI_AB_FELIS_BASE_ENDPOINT: 'http://felis'}\n"
)
CONFIG = resources.parse("resources:\n" + IBM)
"""One backend, which fluence acquires."""
CREDENTIALS = {"ibm_a_QRMI_IBM_QRS_IAM_APIKEY": "k3y"}
TOKEN = names.qrmi_token_annotation("ibm_a")


class Library:
    """QRMI as the queue calls it: counts acquisitions, each a new token, and releases."""

    def __init__(self) -> None:
        self.acquired: list[tuple[str, dict[str, str]]] = []
        self.released: list[tuple[str, str]] = []
        self.fail_acquire = ""
        self.fail_release = ""

    def acquire(self, resource: qrmi.QrmiResource, env: Mapping[str, str]) -> str:
        if self.fail_acquire:
            raise QrmiCallFailed(self.fail_acquire)
        self.acquired.append((resource.name, dict(env)))
        return f"session-{len(self.acquired)}"

    def release(self, resource: qrmi.QrmiResource, token: str, env: Mapping[str, str]) -> None:
        if self.fail_release:
            raise QrmiCallFailed(self.fail_release)
        self.released.append((resource.name, token))

    def live(self) -> set[str]:
        """Tokens acquired and not released: what a leak leaves behind."""
        made = {f"session-{i + 1}" for i in range(len(self.acquired))}
        return made - {t for _, t in self.released}


class Inline(Executor):
    """Runs each QRMI call at once, so a round sees its result (the extender's are threads)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - kept in the future, as a pool does
            done.set_exception(exc)
        return done


class Warnings:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, pod: Pod, reason: str, message: str) -> None:
        self.events.append((pod.key, reason, message))


def quantum(name: str, created: int = 0, **kw: Any) -> dict[str, Any]:
    doc = gated(name, cpu="1", created=created, **kw)
    doc["spec"]["containers"][0]["resources"]["requests"][QPU] = "1"
    doc["spec"]["containers"][0]["resources"]["limits"] = {QPU: "1"}
    return doc


def cluster(
    api: Api | None = None,
    library: Library | None = None,
    now: list[float] | None = None,
    secrets: dict[str, Mapping[str, str]] | None = None,
    config: resources.ResourcesConfig = CONFIG,
    executor: Executor | None = None,
) -> tuple[Api, GatedQueue, Ledger, Library, Warnings]:
    api = api if api is not None else Api()
    library = library if library is not None else Library()
    clock = now if now is not None else [0.0]
    found = {"fluence-qrmi": CREDENTIALS} if secrets is None else secrets
    nodes = [make_node(f"n{i}", cpu="4", extra={QPU: "10"}) for i in range(2)]
    graph = ClusterGraph(config, nodes)
    ledger = Ledger(graph, seal=SEAL, gang_timeout=60)
    warnings = Warnings()
    acquisitions = Acquisitions(
        library,
        lambda: {q.name: q for q in graph.config.qrmi},
        found.get,
        SEAL,
        warn=warnings,
        clock=lambda: clock[0],
        executor=executor or Inline(),
    )
    queue = GatedQueue(
        Scheduler(graph, ledger, api, NullBinder()),
        api,
        acquisitions=acquisitions,
        clock=lambda: clock[0],
    )
    follow(api, queue, ledger)
    return api, queue, ledger, library, warnings


def round_trip(queue: GatedQueue) -> list[str]:
    releases = queue.plan()
    asyncio.run(queue.write(releases))
    asyncio.run(queue.let_go())
    return [r.pod for r in releases]


def backend_of(api: Api, key: str) -> str:
    return str(api.docs[key]["metadata"]["annotations"].get(names.ANNOTATION_BACKEND, ""))


def gang_on_ibm(api: Api) -> None:
    """Two pods of one gang, both asking for a qpu: the group gets one backend."""
    for i in range(2):
        doc = quantum(f"q{i}", labels=GANG, size=2)
        doc["metadata"]["uid"] = f"uid-q{i}"
        api.put(doc)


def delete_gracefully(api: Api, ledger: Ledger, key: str) -> None:
    """``kubectl delete``: with a finalizer the pod stays, marked, until it is removed."""
    doc = api.docs[key]
    doc["metadata"]["deletionTimestamp"] = datetime.datetime.now(datetime.UTC).isoformat()
    ledger.observe(api.put(doc))


def finalizers(api: Api, key: str) -> list[str]:
    return list(api.docs[key]["metadata"].get("finalizers", []))


def test_a_gang_is_acquired_once_and_every_member_carries_the_token_and_finalizer() -> None:
    api = Api()
    gang_on_ibm(api)
    api, queue, ledger, library, _ = cluster(api)
    assert sorted(round_trip(queue)) == ["default/q0", "default/q1"]
    [(name, env)] = library.acquired
    assert name == "ibm_a"
    # What QRMI reads: the config's settings, the credential from the Secret, the job id.
    assert env["ibm_a_QRMI_IBM_QRS_ENDPOINT"] == "http://qrs"
    assert env["ibm_a_QRMI_IBM_QRS_IAM_APIKEY"] == "k3y"
    assert env[names.ENV_QRMI_JOB_ID] == "uid-q0"
    for key in ("default/q0", "default/q1"):
        assert api.docs[key]["metadata"]["annotations"][TOKEN] == "session-1"
        assert finalizers(api, key) == [names.FINALIZER_QRMI_RELEASE]
        assert backend_of(api, key) == "ibm_a"


def test_the_token_is_released_once_every_pod_holding_it_is_done() -> None:
    api = Api()
    gang_on_ibm(api)
    api, queue, ledger, library, _ = cluster(api)
    round_trip(queue)
    for key in ("default/q0", "default/q1"):
        bind(api, ledger, key)
    finish(api, ledger, "default/q0")
    round_trip(queue)
    assert library.released == []  # q1 still runs on the session
    assert finalizers(api, "default/q0") == [names.FINALIZER_QRMI_RELEASE]
    finish(api, ledger, "default/q1")
    round_trip(queue)
    assert library.released == [("ibm_a", "session-1")]
    assert finalizers(api, "default/q0") == finalizers(api, "default/q1") == []
    round_trip(queue)
    assert library.released == [("ibm_a", "session-1")]  # once


def test_a_pod_killed_mid_run_is_released_and_let_go() -> None:
    api = Api()
    doc = quantum("solo")
    api.put(doc)
    api, queue, ledger, library, _ = cluster(api)
    round_trip(queue)
    bind(api, ledger, "default/solo")
    delete_gracefully(api, ledger, "default/solo")
    round_trip(queue)
    assert library.live() == set()
    assert finalizers(api, "default/solo") == []


def test_a_new_leader_releases_what_the_last_one_acquired() -> None:
    api = Api()
    api.put(quantum("solo"))
    api, queue, ledger, library, _ = cluster(api)
    round_trip(queue)
    bind(api, ledger, "default/solo")
    finish(api, ledger, "default/solo")
    # The leader dies before it releases; a new one starts from the API server alone.
    api, queue, ledger, successor, _ = cluster(api)
    round_trip(queue)
    assert successor.released == [("ibm_a", "session-1")]
    assert finalizers(api, "default/solo") == []


def test_a_failed_acquire_keeps_the_group_gated_with_the_reason_and_places_it_later() -> None:
    api = Api()
    api.put(quantum("solo"))
    library = Library()
    library.fail_acquire = "HTTP 503 from the service"
    now = [0.0]
    api, queue, ledger, library, _ = cluster(api, library, now)
    assert round_trip(queue) == []
    [waiting] = queue.waiting
    assert "acquiring QRMI resource ibm_a failed" in waiting.reason
    assert "503" in waiting.reason
    assert ledger.get("default/solo") is None  # nothing held for a group that waits
    assert api.docs["default/solo"]["spec"]["schedulingGates"] == [{"name": names.QUEUE_GATE}]
    library.fail_acquire = ""
    assert round_trip(queue) == []  # not asked again before the back-off
    now[0] = 11.0
    assert round_trip(queue) == ["default/solo"]
    assert library.live() == {"session-1"}


def test_a_missing_credentials_secret_is_the_reason_a_group_waits() -> None:
    api = Api()
    api.put(quantum("solo"))
    api, queue, ledger, library, _ = cluster(api, secrets={})
    assert round_trip(queue) == []
    assert "Secret 'fluence-qrmi'" in queue.waiting[0].reason
    assert library.acquired == []


def test_an_acquisition_whose_release_was_refused_is_released_when_its_pods_go() -> None:
    api = Api()
    api.put(quantum("solo"))
    api, queue, ledger, library, _ = cluster(api)
    api.refuse.add("default/solo")
    assert round_trip(queue) == ["default/solo"]
    assert library.live() == {"session-1"}
    round_trip(queue)  # tried again with the same acquisition, not a second one
    assert len(library.acquired) == 1
    api.delete("default/solo")
    round_trip(queue)
    assert library.live() == set()


def test_a_release_the_service_refuses_is_retried_then_given_up_with_an_event() -> None:
    api = Api()
    api.put(quantum("solo"))
    now = [0.0]
    api, queue, ledger, library, warnings = cluster(api, now=now)
    round_trip(queue)
    bind(api, ledger, "default/solo")
    finish(api, ledger, "default/solo")
    library.fail_release = "HTTP 500"
    tries = 0
    while finalizers(api, "default/solo") and tries < 20:
        round_trip(queue)
        now[0] += 400.0
        tries += 1
    assert finalizers(api, "default/solo") == []  # never terminating for ever
    [(pod, reason, message)] = warnings.events
    assert (pod, reason) == ("default/solo", "QrmiReleaseFailed") and "HTTP 500" in message


def test_a_resource_acquired_by_the_program_itself_gets_no_token_and_no_finalizer() -> None:
    api = Api()
    api.put(quantum("prog"))
    api.put(gated("classical", cpu="1"))
    api, queue, ledger, library, _ = cluster(api, config=resources.parse("resources:\n" + FELIS))
    assert sorted(round_trip(queue)) == ["default/classical", "default/prog"]
    assert library.acquired == []
    for key in ("default/prog", "default/classical"):
        assert TOKEN not in api.docs[key]["metadata"]["annotations"]
        assert finalizers(api, key) == []


def test_resource_env_carries_the_jobs_deadline_and_user() -> None:
    [ibm] = CONFIG.qrmi
    api = Api()
    doc = quantum("solo")
    doc["spec"]["activeDeadlineSeconds"] = 600
    doc["spec"]["securityContext"] = {"runAsUser": 1000}
    job = api.put(doc)
    env = resource_env(ibm, {"ibm_a_QRMI_IBM_QRS_IAM_APIKEY": "k", "other": "x"}, job)
    assert env["ibm_a_QRMI_JOB_TIMEOUT_SECONDS"] == "600"
    assert env[names.ENV_QRMI_JOB_UID] == "1000"
    assert "other" not in env  # only the resource's own credentials


def test_the_library_call_says_what_is_missing() -> None:
    [ibm] = CONFIG.qrmi
    with pytest.raises(QrmiCallFailed, match="FLUENCE_QRMI_PYTHON"):
        QrmiLibrary("").acquire(ibm, {})
    with pytest.raises(QrmiCallFailed, match="FLUENCE_QRMI_PYTHON"):
        QrmiLibrary("/nonexistent/python").acquire(ibm, {})
    # This interpreter has no qrmi (it cannot live beside the Kubernetes client).
    with pytest.raises(QrmiCallFailed, match="No module named 'qrmi'"):
        QrmiLibrary(sys.executable).acquire(ibm, {})


def test_a_token_a_tenant_wrote_is_never_released() -> None:
    """A tenant copies another pod's token onto a pod of its own, with the finalizer, and
    ends it: fluence releases nothing for it (the token lacks fluence's seal, which binds
    it to the pod it was written on), says so, and lets that pod go."""
    api = Api()
    api.put(quantum("victim"))
    api, queue, ledger, library, warnings = cluster(api)
    round_trip(queue)
    bind(api, ledger, "default/victim")
    victim = api.docs["default/victim"]["metadata"]["annotations"]
    forged = quantum("mallory")
    forged["spec"]["schedulerName"] = "default-scheduler"
    forged["spec"]["schedulingGates"] = []
    forged["metadata"]["finalizers"] = [names.FINALIZER_QRMI_RELEASE]
    forged["metadata"]["annotations"] = {
        TOKEN: victim[TOKEN],
        # Even the victim's own seal: it is bound to the victim's name and UID.
        names.qrmi_token_seal_annotation("ibm_a"): victim[
            names.qrmi_token_seal_annotation("ibm_a")
        ],
    }
    forged["status"]["phase"] = "Succeeded"
    api.put(forged)
    round_trip(queue)
    assert library.released == []
    assert finalizers(api, "default/mallory") == []
    assert [(p, r) for p, r, _ in warnings.events] == [("default/mallory", "QrmiTokenRefused")]
    finish(api, ledger, "default/victim")
    round_trip(queue)
    assert library.released == [("ibm_a", "session-1")]


THREE = resources.parse(
    "resources:\n"
    + "".join(
        f"  - name: ibm_{x}\n"
        "    type: qiskit-runtime-service\n"
        "    environment: {QRMI_IBM_QRS_ENDPOINT: 'http://qrs'}\n"
        for x in "abc"
    )
)


def test_a_pod_asking_for_two_backends_gets_both_in_order_each_acquired_and_kept() -> None:
    api = Api()
    two = quantum("two", created=1)
    for part in ("requests", "limits"):
        two["spec"]["containers"][0]["resources"][part][QPU] = "2"
    api.put(two)
    api.put(quantum("one", created=2))
    api.put(quantum("more", created=3))
    api, queue, ledger, library, _ = cluster(api, config=THREE)
    assert round_trip(queue) == ["default/two", "default/one"]
    annotations = api.docs["default/two"]["metadata"]["annotations"]
    got = annotations[names.ANNOTATION_QRMI_RESOURCES].split(",")
    assert len(got) == 2 and len(set(got)) == 2
    assert (
        annotations[names.ANNOTATION_QRMI_TYPES] == "qiskit-runtime-service,qiskit-runtime-service"
    )
    assert annotations[names.ANNOTATION_BACKEND] == got[0]  # QRMI_BACKEND: the first
    assert [name for name, _ in library.acquired] == [*got, *{"ibm_a", "ibm_b", "ibm_c"} - set(got)]
    tokens = {annotations[names.qrmi_token_annotation(n)] for n in got}
    assert len(tokens) == 2
    # The third backend went to "one"; "more" waits: "two" holds two of three.
    assert [w.group for w in queue.waiting] == ["default/more"]
    bind(api, ledger, "default/two")
    bind(api, ledger, "default/one")
    # A restarted extender holds both of "two"'s backends again from its record.
    api, queue, ledger, successor, _ = cluster(api, config=THREE)
    assert round_trip(queue) == []
    finish(api, ledger, "default/two")
    assert round_trip(queue) == ["default/more"]
    assert sorted(t for _, t in successor.released) == sorted(tokens)


class Blocking(Library):
    """A service that does not answer until told to."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def acquire(self, resource: qrmi.QrmiResource, env: Mapping[str, str]) -> str:
        assert self.go.wait(30)
        return super().acquire(resource, env)


def test_a_slow_service_never_holds_up_the_queues_round() -> None:
    """QRMI is called away from the round: while the service does not answer, the quantum
    group waits (saying so) and the other groups are placed as usual; its answer wakes
    the queue, whose next round releases the group."""
    api = Api()
    api.put(quantum("slow", created=1))
    api.put(gated("classical", cpu="1", created=2))
    library = Blocking()
    with ThreadPoolExecutor(2) as pool:
        api, queue, ledger, library, _ = cluster(api, library, executor=pool)
        woken = threading.Event()
        queue.poke = woken.set  # type: ignore[method-assign]
        assert round_trip(queue) == ["default/classical"]
        [waiting] = queue.waiting
        assert waiting.reason == "acquiring QRMI resource ibm_a"
        library.go.set()
        assert woken.wait(10)
        assert round_trip(queue) == ["default/slow"]
    assert library.live() == {"session-1"}
