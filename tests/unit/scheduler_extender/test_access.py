"""Beyond loopback, every route but the probes needs a token the API server accepts and RBAC."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler_extender.access import Caller, is_loopback
from scheduler_extender.app import create_app
from tests.unit.fluence.test_ledger import Clock
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_app import Env

REMOTE = ("10.1.2.3", 40000)
VIEWER = Caller("system:serviceaccount:monitoring:prometheus", groups=("system:serviceaccounts",))


class Reviewer:
    """Tokens and RBAC as a table; counts the API calls a real reviewer would make."""

    def __init__(self, rules: dict[str, set[tuple[str, str]]]) -> None:
        self.tokens = {"viewer-token": VIEWER, "nobody-token": Caller("nobody")}
        self.rules = rules
        self.calls = 0
        self.fail = False

    def authenticate(self, token: str) -> Caller | None:
        self.calls += 1
        if self.fail:
            raise ConnectionError("api server down")
        return self.tokens.get(token)

    def authorize(self, caller: Caller, path: str, verb: str) -> bool:
        self.calls += 1
        return (path, verb) in self.rules.get(caller.username, set())


def client(reviewer: Reviewer, peer: tuple[str, int] = REMOTE, **kw: Any) -> TestClient:
    env = Env([make_node("a")])
    app = create_app(env.scheduler, metrics=True, remote=reviewer, **kw)
    return TestClient(app, client=peer)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_probes_are_open_and_everything_else_needs_a_token() -> None:
    c = client(Reviewer({}))
    assert c.get("/healthz").status_code == 200
    assert c.get("/readyz").status_code == 200
    for method, path in [
        ("GET", "/state"),
        ("GET", "/explain?pod=default/x"),
        ("GET", "/metrics/"),
        ("POST", "/bind"),
        ("POST", "/filter"),
        ("POST", "/match"),
    ]:
        r = c.request(method, path, content=b"{}")
        assert r.status_code == 401, (method, path)
        assert "Bearer" in r.json()["Error"] and r.headers["www-authenticate"].startswith("Bearer")


def test_an_unknown_token_is_401_and_a_known_one_without_rbac_is_403() -> None:
    c = client(Reviewer({}))
    assert c.get("/state", headers=bearer("forged")).status_code == 401
    r = c.get("/state", headers=bearer("nobody-token"))
    assert r.status_code == 403
    assert "'nobody' may not get /state" in r.json()["Error"]


def test_rbac_grants_per_path_and_verb() -> None:
    reviewer = Reviewer({VIEWER.username: {("/state", "get"), ("/metrics/", "get")}})
    c = client(reviewer)
    assert c.get("/state", headers=bearer("viewer-token")).status_code == 200
    assert c.get("/metrics/", headers=bearer("viewer-token")).status_code == 200
    body = {"PodName": "x", "PodNamespace": "default", "PodUID": "u", "Node": "a"}
    assert c.post("/bind", json=body, headers=bearer("viewer-token")).status_code == 403


def test_the_pod_s_own_loopback_needs_no_token() -> None:
    """kube-scheduler beside the extender, and kubectl port-forward, arrive on loopback."""
    c = client(Reviewer({}), peer=("127.0.0.1", 5555))
    assert c.get("/state").status_code == 200
    pod = make_pod("p", cpu="1", raw=True)
    r = c.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["a"]})
    assert r.status_code == 200


def test_answers_are_cached_and_an_api_failure_refuses() -> None:
    reviewer = Reviewer({VIEWER.username: {("/state", "get")}})
    c = client(reviewer)
    for _ in range(20):
        assert c.get("/state", headers=bearer("viewer-token")).status_code == 200
    assert reviewer.calls == 2  # one TokenReview, one SubjectAccessReview
    reviewer.fail = True
    r = c.get("/state", headers=bearer("nobody-token"))
    assert r.status_code == 401 and "could not review" in r.json()["Error"]


def test_cached_answers_expire() -> None:
    from scheduler_extender.access import RemoteAccess

    reviewer = Reviewer({VIEWER.username: {("/state", "get")}})
    env = Env([make_node("a")])
    clock = Clock()
    app = RemoteAccess(create_app(env.scheduler, metrics=False), reviewer, clock=clock)
    c = TestClient(app, client=REMOTE)
    assert c.get("/state", headers=bearer("viewer-token")).status_code == 200
    del reviewer.tokens["viewer-token"]  # the token was revoked
    assert c.get("/state", headers=bearer("viewer-token")).status_code == 200
    clock.now += 61
    assert c.get("/state", headers=bearer("viewer-token")).status_code == 401


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("127.8.8.8", True), ("10.0.0.1", False)]
    + [("testclient", False), ("", False), (None, False)],
)
def test_loopback_is_an_address_not_a_name(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback
