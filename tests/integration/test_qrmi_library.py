"""The extender's QRMI calls through the real ``qrmi`` library, against a stand-in for a
session service (:mod:`tests.support.qiskit_runtime_standin`): acquire opens exactly one
session with the administrator's key, release closes it, and failures say why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluence import qrmi, resources
from scheduler_extender.qrmi_acquisition import QrmiCallFailed, QrmiLibrary, resource_env
from tests.support.qiskit_runtime_standin import QiskitRuntime, QiskitRuntimeStandIn
from tests.support.qrmi_python import qrmi_python

API_KEY = "admin-key-not-real"


@pytest.fixture(scope="module")
def library() -> QrmiLibrary:
    return QrmiLibrary(qrmi_python(), timeout=60)


@pytest.fixture
def service() -> Iterator[tuple[QiskitRuntime, str]]:
    runtime = QiskitRuntime(API_KEY)
    with QiskitRuntimeStandIn(runtime) as standin:
        yield runtime, standin.url


def ibm(url: str) -> qrmi.QrmiResource:
    [resource] = resources.parse(
        "resources:\n"
        "  - name: ibm_kyiv\n"
        "    type: qiskit-runtime-service\n"
        "    environment:\n"
        f"      QRMI_IBM_QRS_ENDPOINT: '{url}'\n"
        f"      QRMI_IBM_QRS_IAM_ENDPOINT: '{url}'\n"
        "      QRMI_IBM_QRS_SERVICE_CRN: 'crn:v1:test'\n"
        "      QRMI_IBM_QRS_IAM_APIKEY: ''\n"
    ).qrmi
    return resource


def test_acquire_opens_one_session_and_release_closes_it(
    library: QrmiLibrary, service: tuple[QiskitRuntime, str]
) -> None:
    runtime, url = service
    resource = ibm(url)
    env = resource_env(resource, {"ibm_kyiv_QRMI_IBM_QRS_IAM_APIKEY": API_KEY}, None)
    token = library.acquire(resource, env)
    [session] = runtime.open_sessions()
    assert session.id == token and session.backend == "ibm_kyiv"
    library.release(resource, token, env)
    assert runtime.open_sessions() == []
    assert runtime.sessions[token].open is False


def test_a_wrong_key_fails_with_the_services_answer_and_opens_nothing(
    library: QrmiLibrary, service: tuple[QiskitRuntime, str]
) -> None:
    runtime, url = service
    resource = ibm(url)
    env = resource_env(resource, {"ibm_kyiv_QRMI_IBM_QRS_IAM_APIKEY": "wrong"}, None)
    with pytest.raises(QrmiCallFailed, match="QRMI acquire of ibm_kyiv failed") as failed:
        library.acquire(resource, env)
    assert "wrong" not in str(failed.value)  # a credential never reaches a message
    assert runtime.open_sessions() == []


def test_an_unreachable_service_fails_within_the_timeout(library: QrmiLibrary) -> None:
    resource = ibm("http://127.0.0.1:9")
    env = resource_env(resource, {"ibm_kyiv_QRMI_IBM_QRS_IAM_APIKEY": API_KEY}, None)
    with pytest.raises(QrmiCallFailed, match="failed"):
        library.acquire(resource, env)
