"""``examples/qrmi`` as shipped, on the real node: a stock QRMI program on the backend
fluence chose.

The image is built from ``examples/qrmi/Containerfile`` (``qrmi`` from the package
index) over the Debian base the testbed makes; the backends are
``examples/qrmi/qrmi_config.json``, its Felis endpoint pointed at a stand-in for the
remote Alice & Bob service (:mod:`tests.support.felis_standin`, on this machine,
reached by the pod at the node's address); the API key is a Secret made with the
command ``examples/qrmi/job.yaml``'s comment gives; the Job is ``job.yaml``, kept to
the real node. Everything on our side of the wire is real: the webhook, the
scheduler, the kubelet, ``qrmi`` and its Felis client.

The queue acquires each QRMI resource before a release through ``qrmi`` itself (an
environment of its own, :mod:`tests.support.qrmi_python`), with an administrator's
Secret in ``kube-system``; a ``qiskit-runtime-service`` resource added to the config,
pointed at a stand-in for that session service
(:mod:`tests.support.qiskit_runtime_standin`), shows each session opened for a pod
and closed when the pod is killed.

The machine must allow containers (see ``tests/e2e/test_real_node.py``); elsewhere
these tests skip with the reason, and fail under CI.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fluence import names
from testbed import ControlPlane, images
from testbed.node import DEVICE_PLUGIN_DIR, RealNode, pod_logs
from testbed.rest import KubeApiError
from tests.e2e.test_extender_e2e import Extender, wait_for
from tests.e2e.test_real_node import QPU, allocatable, registrations
from tests.e2e.test_webhook_admission import CONFIGS, register, wait_effective
from tests.integration.test_webhook_process import WebhookProcess
from tests.support.deviceplugin_process import DevicePluginProcess
from tests.support.extender import fluence_scheduler
from tests.support.felis_standin import Felis, FelisStandIn
from tests.support.qiskit_runtime_standin import QiskitRuntime, QiskitRuntimeStandIn
from tests.support.qrmi_python import qrmi_python
from tests.support.real_node import require_real_node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qrmi"
NODE = "qrmi-node"
BACKEND = "ab_emu_1q_lescanne_2020"
"""The config's one ``alice-bob-felis`` resource."""
FELIS_TARGET = "EMU:1Q:LESCANNE_2020"
"""The Felis target QRMI derives from that name (``device_to_target``)."""
ENDPOINT_KEY = "QRMI_AB_FELIS_BASE_ENDPOINT"
API_KEY = base64.b64encode(b"fluence-e2e:not-a-real-password").decode()
"""What the job.yaml comment asks for: base64 of ``user:password``."""
JOB_TIMEOUT_S = 180.0
SESSIONS = "ibm_kyiv"
"""The ``qiskit-runtime-service`` resource the tests add: acquiring it opens a session."""
SESSIONS_KEY = "qrs-key-not-real"
ADMIN_NAMESPACE = "kube-system"
"""Where the extender reads the credentials it acquires with (its credentials namespace)."""


# Fixtures: the stand-in, the config pointing at it, the node, fluence ----------------


@pytest.fixture(scope="module")
def real_node(control_plane: ControlPlane) -> Iterator[RealNode]:
    require_real_node()
    with RealNode(control_plane, NODE) as node:
        yield node


@pytest.fixture(scope="module")
def standin(real_node: RealNode) -> Iterator[FelisStandIn]:
    """The Felis stand-in, listening on the node's address: where the pod reaches the host."""
    with FelisStandIn(Felis(API_KEY, frozenset({FELIS_TARGET})), real_node.address) as standin:
        yield standin


@pytest.fixture(scope="module")
def runtime(real_node: RealNode) -> Iterator[QiskitRuntimeStandIn]:
    """The session service's stand-in, on the node's address like the Felis one."""
    with QiskitRuntimeStandIn(QiskitRuntime(SESSIONS_KEY), real_node.address) as standin:
        yield standin


@pytest.fixture(scope="module")
def qrmi_config(
    standin: FelisStandIn, runtime: QiskitRuntimeStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """``examples/qrmi/qrmi_config.json`` with the Felis endpoint replaced by the stand-in's,
    and a session resource on the other stand-in."""
    config = json.loads((EXAMPLE / "qrmi_config.json").read_text())
    [entry] = [r for r in config["resources"] if r["type"] == "alice-bob-felis"]
    assert entry["name"] == BACKEND and ENDPOINT_KEY in entry["environment"]
    entry["environment"][ENDPOINT_KEY] = standin.url
    config["resources"].append(
        {
            "name": SESSIONS,
            "type": "qiskit-runtime-service",
            "environment": {
                "QRMI_IBM_QRS_ENDPOINT": runtime.url,
                "QRMI_IBM_QRS_IAM_ENDPOINT": runtime.url,
                "QRMI_IBM_QRS_SERVICE_CRN": "crn:v1:fluence-e2e",
                "QRMI_IBM_QRS_IAM_APIKEY": "",
            },
        }
    )
    path = tmp_path_factory.mktemp("qrmi") / "qrmi_config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


@pytest.fixture(scope="module")
def example_image(real_node: RealNode) -> str:
    """The example's image, built (or taken from the cache) and imported into the node."""
    real_node.load_image(images.ensure_qrmi_example_image())
    assert real_node.has_image(images.QRMI_EXAMPLE_IMAGE)
    return images.QRMI_EXAMPLE_IMAGE


@pytest.fixture(scope="module")
def device_plugin(
    real_node: RealNode, qrmi_config: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevicePluginProcess]:
    """fluence-deviceplugin serving the QRMI config's qpu to the real kubelet."""
    log_path = tmp_path_factory.mktemp("deviceplugin") / "deviceplugin.log"
    with DevicePluginProcess(DEVICE_PLUGIN_DIR, qrmi_config, log_path=log_path) as plugin:
        wait_for(
            lambda: registrations(plugin, QPU) >= 1 and allocatable(real_node, QPU) > 0,
            60,
            "the kubelet to report the device plugin's qpu devices",
            plugin.logs,
        )
        yield plugin


@pytest.fixture(scope="module")
def fluence(
    control_plane: ControlPlane,
    real_node: RealNode,
    qrmi_config: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Extender]:
    """The webhook and the extender reading the QRMI config, and a kube-scheduler; the
    administrator's Secret the extender acquires with."""
    workdir = tmp_path_factory.mktemp("qrmi-fluence")
    name = f"fluence-webhook-qrmi-{uuid.uuid4().hex[:6]}"
    python = qrmi_python()
    control_plane.kubectl(
        "create",
        "secret",
        "generic",
        names.QRMI_SECRET,
        "-n",
        ADMIN_NAMESPACE,
        f"--from-literal={BACKEND}_QRMI_AB_FELIS_API_KEY={API_KEY}",
        f"--from-literal={SESSIONS}_QRMI_IBM_QRS_IAM_APIKEY={SESSIONS_KEY}",
    )
    with WebhookProcess(
        workdir,
        resources=qrmi_config,
        kubeconfig=control_plane.kubeconfig,
        client=control_plane.webhook_client,
    ) as webhook:
        register(control_plane, webhook, name)
        try:
            wait_effective(control_plane)
            extender = Extender(workdir, control_plane.kubeconfig)
            extender.env["FLUENCE_RESOURCES"] = str(qrmi_config)
            extender.env["FLUENCE_QRMI_PYTHON"] = python
            extender.env["FLUENCE_QRMI_CREDENTIALS_NAMESPACE"] = ADMIN_NAMESPACE
            with fluence_scheduler(control_plane, extender):
                yield extender
        finally:
            control_plane.rest.delete(f"{CONFIGS}/{name}")
            control_plane.kubectl("delete", "secret", names.QRMI_SECRET, "-n", ADMIN_NAMESPACE)


@pytest.fixture
def felis(standin: FelisStandIn) -> Felis:
    """The stand-in's service, without the jobs and calls of earlier tests."""
    standin.felis.clear()
    return standin.felis


# The example's pieces ------------------------------------------------------------------


def create_secret_as_documented(control_plane: ControlPlane, namespace: str) -> None:
    """Run the ``kubectl create secret`` command of job.yaml's comment, with our key."""
    comment = " ".join(
        line.lstrip("#").strip().removesuffix("\\")
        for line in (EXAMPLE / "job.yaml").read_text().splitlines()
        if line.startswith("#")
    )
    found = re.search(r"kubectl (create secret generic .*?<base64 of user:password>)", comment)
    assert found, "job.yaml's comment no longer shows how to create the API key's Secret"
    command = found.group(1).replace("<base64 of user:password>", API_KEY)
    control_plane.kubectl(*shlex.split(command), "-n", namespace)


def example_job(name: str, image: str) -> dict[str, Any]:
    """``examples/qrmi/job.yaml`` as shipped, named ``name`` and kept to the real node."""
    body: dict[str, Any] = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    container = body["spec"]["template"]["spec"]["containers"][0]
    assert image == f"docker.io/library/{container['image']}"
    body["metadata"]["name"] = name
    body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return body


def submit(control_plane: ControlPlane, namespace: str, body: dict[str, Any]) -> None:
    control_plane.rest.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", body)


def job_pod(control_plane: ControlPlane, namespace: str, job: str) -> dict[str, Any] | None:
    listed = control_plane.rest.get(
        f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"job-name={job}"
    )
    items: list[dict[str, Any]] = listed["items"]
    return items[0] if items else None


def wait_complete(control_plane: ControlPlane, namespace: str, job: str) -> dict[str, Any]:
    """Until the Job reports Complete (a Failed one stops the wait with its pod's log)."""

    def conditions() -> dict[str, str]:
        got = control_plane.rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")
        return {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}

    def complete() -> bool:
        found = conditions()
        if found.get("Failed") == "True":
            raise AssertionError(f"job {job} failed: {describe(control_plane, namespace, job)}")
        return found.get("Complete") == "True"

    wait_for(
        complete,
        JOB_TIMEOUT_S,
        f"job {job} to complete",
        lambda: describe(control_plane, namespace, job),
    )
    pod = job_pod(control_plane, namespace, job)
    assert pod is not None
    return pod


def describe(control_plane: ControlPlane, namespace: str, job: str) -> str:
    pod = job_pod(control_plane, namespace, job)
    if pod is None:
        return "no pod yet"
    status = pod.get("status", {})
    text = f"pod {pod['metadata']['name']}: {status.get('phase')} {status.get('conditions')}"
    if status.get("containerStatuses"):
        text += f" {status['containerStatuses']}"
        text += f"\nlog: {pod_logs(control_plane, namespace, pod['metadata']['name'])}"
    return text


def env_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["spec"]["containers"][0].get("env", [])}


def finalizers_of(control_plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> list[str]:
    got = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    return list(got["metadata"].get("finalizers", []))


def jobs_started(felis: Felis) -> list[str]:
    """The Felis jobs created, in order (the id is in the input upload that follows)."""
    return [c.path.split("/")[3] for c in felis.calls() if c.path.endswith("/input")]


# Tests ---------------------------------------------------------------------------------


def test_the_stock_qrmi_program_runs_on_the_backend_fluence_chose(
    control_plane: ControlPlane,
    example_image: str,
    device_plugin: DevicePluginProcess,
    fluence: Extender,
    standin: FelisStandIn,
    felis: Felis,
    namespace: str,
) -> None:
    create_secret_as_documented(control_plane, namespace)
    submit(control_plane, namespace, example_job("qrmi-felis", example_image))
    pod = wait_complete(control_plane, namespace, "qrmi-felis")

    # fluence chose the one Felis backend and wrote it where QRMI's variables come from.
    annotations = pod["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_BACKEND] == BACKEND
    assert annotations[names.ANNOTATION_QRMI_RESOURCES] == BACKEND
    assert annotations[names.ANNOTATION_QRMI_TYPES] == "alice-bob-felis"
    assert pod["spec"]["nodeName"] == NODE
    env = env_of(pod)
    for variable, annotation in (
        (names.ENV_QRMI_JOB_QPU_RESOURCES, names.ANNOTATION_QRMI_RESOURCES),
        (names.ENV_QRMI_JOB_QPU_TYPES, names.ANNOTATION_QRMI_TYPES),
    ):
        field = env[variable]["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == names.annotation_fieldpath(annotation)
    assert env[f"{BACKEND}_{ENDPOINT_KEY}"]["value"] == standin.url
    # The Job's deadline is the pod's, and QRMI's job timeout, as on Slurm the time limit.
    deadline = example_job("any", example_image)["spec"]["activeDeadlineSeconds"]
    assert pod["spec"]["activeDeadlineSeconds"] == deadline
    assert env[f"{BACKEND}_QRMI_JOB_TIMEOUT_SECONDS"]["value"] == str(deadline)
    assert env[f"{BACKEND}_QRMI_AB_FELIS_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": names.QRMI_SECRET,
        "key": f"{BACKEND}_QRMI_AB_FELIS_API_KEY",
    }
    # fluence acquired the backend before the release (for Felis QRMI's acquire is local)
    # and let the pod go once it was done: the token stays, the finalizer does not.
    token = annotations[names.qrmi_token_annotation(BACKEND)]
    assert token
    token_field = env[f"{BACKEND}_QRMI_JOB_ACQUISITION_TOKEN"]["valueFrom"]["fieldRef"]
    assert token_field["fieldPath"] == names.annotation_fieldpath(
        names.qrmi_token_annotation(BACKEND)
    )
    wait_for(
        lambda: names.FINALIZER_QRMI_RELEASE not in finalizers_of(control_plane, namespace, pod),
        30,
        "fluence to release the acquisition and take its finalizer off",
    )

    # The program read those variables as the kubelet resolved them, and went through
    # acquire, task, completion, result and release in that order.
    log = pod_logs(control_plane, namespace, pod["metadata"]["name"]).splitlines()
    assert log[0] == f"QPU resources of this job: [('{BACKEND}', 'alice-bob-felis')]"
    [task] = jobs_started(felis)
    steps = [
        f"{BACKEND}: acquired (",
        f"{BACKEND}: task {task} started",
        f"{BACKEND}: task {task} ended TaskStatus.Completed",
        "0,50",
        f"{BACKEND}: released",
    ]
    at = [next(i for i, line in enumerate(log) if line.startswith(step)) for step in steps]
    assert at == sorted(at), log

    # The service saw the task from the program, every call with the key of the Secret.
    calls = felis.calls()
    assert [(c.method, c.path) for c in calls] == [
        ("POST", "/v1/jobs/"),
        ("POST", f"/v1/jobs/{task}/input"),
        ("GET", f"/v1/jobs/{task}"),
        ("GET", f"/v1/jobs/{task}"),
        ("GET", f"/v1/jobs/{task}/output"),
        ("GET", f"/v1/jobs/{task}"),
    ]
    assert {c.api_key for c in calls} == {API_KEY}
    job = felis.jobs[task]
    assert job.target == FELIS_TARGET
    assert job.input == (EXAMPLE / "measure_one.qir").read_text()
    assert job.input_params == {"nbShots": 50, "averageNbPhotons": 4}
    assert [e for e, _ in job.events] == ["CREATED", "INPUT_READY", "EXECUTING", "SUCCEEDED"]


def test_a_second_job_for_the_only_felis_backend_waits_until_the_first_is_done(
    control_plane: ControlPlane,
    example_image: str,
    device_plugin: DevicePluginProcess,
    fluence: Extender,
    felis: Felis,
    namespace: str,
) -> None:
    """The backend is exclusive: while the first program's task runs on it, a second Job
    asking for the same QRMI type is not placed; it runs there once the first is done."""
    create_secret_as_documented(control_plane, namespace)
    felis.hold()
    submit(control_plane, namespace, example_job("first", example_image))
    wait_for(
        lambda: "EXECUTING" in felis.job_states().values(),
        JOB_TIMEOUT_S,
        "the first program's task to run",
        lambda: describe(control_plane, namespace, "first"),
    )
    submit(control_plane, namespace, example_job("second", example_image))

    def queued() -> str:
        """Why fluence's queue keeps the second pod waiting (its condition), once it says."""
        pod = job_pod(control_plane, namespace, "second")
        for c in (pod or {}).get("status", {}).get("conditions", []):
            if c["type"] == names.CONDITION_QUEUED and c["status"] == "True":
                return str(c["message"])
        return ""

    reason = wait_for(
        queued, 60, "fluence's queue to keep the second pod waiting", lambda: str(fluence.state())
    )
    first_pod = job_pod(control_plane, namespace, "first")
    second_pod = job_pod(control_plane, namespace, "second")
    assert first_pod is not None and second_pod is not None
    assert "does not fit now" in reason and not second_pod["spec"].get("nodeName"), reason
    holder = fluence.state()["backends"][BACKEND]
    assert holder["pod"] == f"{namespace}/{first_pod['metadata']['name']}", holder
    assert len(felis.job_states()) == 1

    felis.resume()
    first = wait_complete(control_plane, namespace, "first")
    second = wait_complete(control_plane, namespace, "second")
    for pod in (first, second):
        assert pod["metadata"]["annotations"][names.ANNOTATION_BACKEND] == BACKEND
    # The second task was started only after the first program had released the backend.
    tasks = jobs_started(felis)
    assert len(tasks) == 2
    calls = [(c.method, c.path) for c in felis.calls()]
    last_of_first = max(i for i, (_, path) in enumerate(calls) if tasks[0] in path)
    creates = [i for i, call in enumerate(calls) if call == ("POST", "/v1/jobs/")]
    assert len(creates) == 2 and last_of_first < creates[1], calls
    ended = first["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    [scheduled] = [
        c["lastTransitionTime"]
        for c in second["status"]["conditions"]
        if c["type"] == "PodScheduled" and c["status"] == "True"
    ]
    assert scheduled >= ended


# Acquisitions of a session service ------------------------------------------------------

SHOW_TOKEN = (
    "import os, time\n"
    f"print('token', os.environ['{SESSIONS}_QRMI_JOB_ACQUISITION_TOKEN'], flush=True)\n"
    "time.sleep(600)\n"
)
"""What the pod runs: shows the acquisition it was given, then works until it is killed."""


def session_pod(name: str) -> dict[str, Any]:
    """A bare pod of the example image asking for a qpu of the session resource."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {f"{names.ANNOTATION_REQUIRE_PREFIX}backend": SESSIONS},
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": "fluence-qrmi-example:0.1.0",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", SHOW_TOKEN],
                    "resources": {"requests": {"cpu": "100m", QPU: "1"}, "limits": {QPU: "1"}},
                }
            ],
        },
    }


def pod_of(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        got: dict[str, Any] = control_plane.rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise
    return got


def kill_and_wait_gone(control_plane: ControlPlane, namespace: str, name: str) -> None:
    """``kubectl delete pod``: the pod object stays until fluence has released its session."""
    control_plane.rest.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    wait_for(
        lambda: pod_of(control_plane, namespace, name) is None,
        60,
        f"pod {name} to be gone (fluence releases, then removes its finalizer)",
        lambda: str(pod_of(control_plane, namespace, name)),
    )


def test_a_session_acquired_for_a_pod_is_released_when_the_pod_is_killed_mid_run(
    control_plane: ControlPlane,
    example_image: str,
    device_plugin: DevicePluginProcess,
    fluence: Extender,
    runtime: QiskitRuntimeStandIn,
    namespace: str,
) -> None:
    control_plane.kubectl(
        "create",
        "secret",
        "generic",
        names.QRMI_SECRET,
        "-n",
        namespace,
        f"--from-literal={SESSIONS}_QRMI_IBM_QRS_IAM_APIKEY={SESSIONS_KEY}",
    )
    control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", session_pod("worker"))

    def token_shown() -> str:
        pod = pod_of(control_plane, namespace, "worker") or {}
        if pod.get("status", {}).get("phase") != "Running":
            return ""
        found = re.search(r"^token (\S+)$", pod_logs(control_plane, namespace, "worker"), re.M)
        return found.group(1) if found else ""

    token = wait_for(
        token_shown,
        JOB_TIMEOUT_S,
        "the pod to run and show its acquisition",
        lambda: str(pod_of(control_plane, namespace, "worker")),
    )
    # One session, opened by fluence for this backend before the pod was released, and
    # the one the pod holds; the pod keeps a finalizer while it does.
    [session] = runtime.service.open_sessions()
    assert (session.id, session.backend) == (token, SESSIONS)
    pod = pod_of(control_plane, namespace, "worker")
    assert pod is not None
    assert pod["metadata"]["annotations"][names.qrmi_token_annotation(SESSIONS)] == token
    assert names.FINALIZER_QRMI_RELEASE in pod["metadata"]["finalizers"]

    kill_and_wait_gone(control_plane, namespace, "worker")
    assert runtime.service.open_sessions() == []
    assert runtime.service.sessions[token].open is False


def test_a_pod_without_its_credentials_secret_waits_with_the_kubelets_event_not_a_crash_loop(
    control_plane: ControlPlane,
    example_image: str,
    device_plugin: DevicePluginProcess,
    fluence: Extender,
    runtime: QiskitRuntimeStandIn,
    namespace: str,
) -> None:
    """No Secret in the pod's namespace: the kubelet does not start the container and says
    which Secret is missing; the program never runs, so it never fails and restarts. The
    acquisition made for the pod is released when the pod is deleted."""
    control_plane.rest.create(f"/api/v1/namespaces/{namespace}/pods", session_pod("no-secret"))

    def config_error() -> str:
        pod = pod_of(control_plane, namespace, "no-secret") or {}
        for status in pod.get("status", {}).get("containerStatuses", []):
            waiting = status.get("state", {}).get("waiting", {})
            if waiting.get("reason") == "CreateContainerConfigError":
                return str(waiting.get("message", ""))
        return ""

    message = wait_for(
        config_error,
        JOB_TIMEOUT_S,
        "the kubelet to refuse the container's config",
        lambda: str(pod_of(control_plane, namespace, "no-secret")),
    )
    assert f'secret "{names.QRMI_SECRET}" not found' in message, message

    def event() -> str:
        listed = control_plane.rest.get(
            f"/api/v1/namespaces/{namespace}/events",
            fieldSelector="involvedObject.name=no-secret",
        )
        missing = f'secret "{names.QRMI_SECRET}" not found'
        found = [e for e in listed["items"] if missing in e["message"]]
        return f"{found[0]['type']} {found[0]['reason']}" if found else ""

    assert wait_for(event, 60, "the kubelet's Event naming the Secret") == "Warning Failed"
    pod = pod_of(control_plane, namespace, "no-secret")
    assert pod is not None
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert len(runtime.service.open_sessions()) == 1

    kill_and_wait_gone(control_plane, namespace, "no-secret")
    assert runtime.service.open_sessions() == []
