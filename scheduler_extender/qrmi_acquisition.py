"""Acquire a placed group's QRMI resource before its release; release it when its pods are done.

QRMI's Slurm plugin acquires each quantum resource of a job before the job
starts, hands the job the token in ``<name>_QRMI_JOB_ACQUISITION_TOKEN`` and
releases it when the job ends. The queue does the same for a group: just before
its release it acquires the group's backend once, through the ``qrmi`` library
itself (:mod:`fluence.qrmi_runner`, run under the interpreter that has it), with
the resource's settings from the config and its credentials from the same
Secret in the extender's namespace. The release patch writes the token in the
annotation ``fluence.flux-framework.org/qrmi-token.<name>`` (which the webhook
maps to the variable) and adds the finalizer ``fluence.flux-framework.org/qrmi-release``.

A token is released once every pod carrying it is done (succeeded, failed or
being deleted); then the finalizer comes off. All of that is read from the pods,
so a restarted or new leader finds what is left to release. A release the service
refuses is tried again with back-off; after ``RELEASE_TRIES`` the finalizer is
removed anyway with a warning Event (the acquisition is left to the service's own
expiry), so no pod stays terminating for ever. An acquisition whose release patch
was never written is released when its group leaves the queue; a leader killed
between acquiring and writing leaves that one acquisition to the service's expiry.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fluence import names, qrmi, telemetry
from fluence.json_patch import PatchOp
from fluence.pods import Pod
from fluence.reflectors import DELETED
from fluence.scheduling.record import RecordSeal

log = logging.getLogger(__name__)
_meter = telemetry.meter("fluence.qrmi")
_acquired = _meter.create_counter(
    "fluence_qrmi_acquisitions",
    description="QRMI acquisitions made for groups before their release, by outcome",
)
_released = _meter.create_counter(
    "fluence_qrmi_releases",
    description="QRMI acquisitions released once their pods were done, by outcome",
)

RUNNER = Path(__file__).resolve().parents[1] / "fluence" / "qrmi_runner.py"
DEFAULT_TIMEOUT = 60.0
"""Seconds one acquire or release may take before it counts as failed."""
RETRY_AFTER = 10.0
"""Seconds before a failed acquire or release is tried again; doubles for releases."""
RELEASE_TRIES = 6
CALLERS = 4
"""QRMI calls under way at once (each a process)."""
PASSED_THROUGH = (
    "PATH",
    "LANG",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "RUST_LOG",
)
"""Of the extender's own environment, what the library may need to reach a service."""


class QrmiCallFailed(RuntimeError):
    """QRMI (or the means to call it) failed; the message never holds a credential."""


class Library(Protocol):
    def acquire(self, resource: qrmi.QrmiResource, env: Mapping[str, str]) -> str: ...

    def release(self, resource: qrmi.QrmiResource, token: str, env: Mapping[str, str]) -> None: ...


class QrmiLibrary:
    """QRMI called through :mod:`fluence.qrmi_runner` under ``python``, one process a call."""

    def __init__(self, python: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.python = python
        self.timeout = timeout

    def acquire(self, resource: qrmi.QrmiResource, env: Mapping[str, str]) -> str:
        token = self._call("acquire", resource, env).get("token", "")
        if not token:
            raise QrmiCallFailed(f"acquiring {resource.name} gave no token")
        return token

    def release(self, resource: qrmi.QrmiResource, token: str, env: Mapping[str, str]) -> None:
        variable = resource.variable(names.QRMI_JOB_ACQUISITION_TOKEN_KEY)
        self._call("release", resource, {**env, variable: token})

    def _call(self, op: str, resource: qrmi.QrmiResource, env: Mapping[str, str]) -> dict[str, str]:
        if not self.python:
            raise QrmiCallFailed(
                "no interpreter with the qrmi library is configured (FLUENCE_QRMI_PYTHON)"
            )
        own = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        # -I: not the runner's own directory on the path, where fluence/qrmi.py would
        # shadow the library.
        args = [self.python, "-I", str(RUNNER), op, resource.name, resource.type]
        try:
            done = subprocess.run(
                args, env={**own, **env}, capture_output=True, text=True, timeout=self.timeout
            )
        except FileNotFoundError as exc:
            raise QrmiCallFailed(
                f"no interpreter {self.python!r} to call QRMI with (FLUENCE_QRMI_PYTHON)"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            why = f"QRMI {op} of {resource.name} took over {self.timeout:.0f}s"
            raise QrmiCallFailed(why) from exc
        lines = done.stdout.strip().splitlines()
        try:
            out = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            out = {}
        if done.returncode != 0 or not isinstance(out, dict) or "error" in out:
            why = str(out.get("error") or "") if isinstance(out, dict) else ""
            why = why or (done.stderr.strip().splitlines() or ["no output"])[-1][:400]
            raise QrmiCallFailed(f"QRMI {op} of {resource.name} failed: {why}")
        return out


def default_python() -> str:
    """``FLUENCE_QRMI_PYTHON``'s default: the image's QRMI environment, else nothing."""
    image = Path("/opt/qrmi/bin/python")
    return str(image) if image.exists() else ""


def resource_env(
    resource: qrmi.QrmiResource, credentials: Mapping[str, str], job: Pod | None
) -> dict[str, str]:
    """What QRMI reads for ``resource``: its settings, its credentials, the job's variables.

    The job's are those the webhook gives the pod (the pod's UID as ``QRMI_JOB_ID``,
    its ``runAsUser`` as ``QRMI_JOB_UID``, its deadline as the job timeout), taken from
    the group's first member.
    """
    env = {resource.variable(k): v for k, v in resource.settings}
    for key in resource.secrets:
        variable = resource.variable(key)
        if variable in credentials:
            env[variable] = credentials[variable]
    if job is not None:
        env[names.ENV_QRMI_JOB_ID] = job.metadata.uid
        context = job.spec.security_context
        if context is not None and context.run_as_user is not None:
            env[names.ENV_QRMI_JOB_UID] = str(context.run_as_user)
        if job.spec.active_deadline_seconds:
            timeout = resource.variable(names.QRMI_JOB_TIMEOUT_KEY)
            env[timeout] = str(job.spec.active_deadline_seconds)
    return env


class AcquireFailed(RuntimeError):
    """The group's resource could not be acquired: the group waits, with this reason."""


@dataclass
class _Release:
    """A token whose pods are all done: its release, tried with back-off."""

    tries: int = 0
    next_at: float = 0.0


@dataclass
class _Pending:
    """An acquisition made for a group whose release patch is not written yet."""

    resource: str
    token: str
    job: Pod | None = field(default=None, repr=False)


class Acquisitions:
    """The queue's acquisitions: made before a release, released when their pods are done."""

    def __init__(
        self,
        library: Library,
        definitions: Callable[[], Mapping[str, qrmi.QrmiResource]],
        credentials: Callable[[str], Mapping[str, str] | None],
        seal: RecordSeal,
        *,
        warn: Callable[[Pod, str, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_after: float = RETRY_AFTER,
        release_tries: int = RELEASE_TRIES,
        executor: Executor | None = None,
    ) -> None:
        self.library = library
        self.definitions = definitions
        self.credentials = credentials
        self.seal = seal
        self.warn = warn
        self.clock = clock
        self.retry_after = retry_after
        self.release_tries = release_tries
        self._calls = executor or ThreadPoolExecutor(CALLERS, thread_name_prefix="qrmi")
        """Where QRMI is called: never on the queue's round, which a slow service would stall."""
        self.wake: Callable[[], object] = lambda: None
        """Called when a call ends, so the queue goes on with its result at once."""
        self._acquiring: dict[tuple[str, str], Future[str]] = {}
        self._releasing: dict[tuple[str, str], Future[None]] = {}
        self._lock = threading.Lock()
        self._holding: dict[str, Pod] = {}
        """Pods that carry our finalizer, by key."""
        self._pending: dict[tuple[str, str], _Pending] = {}
        """(group, resource) -> its acquisition not yet written on any pod."""
        self._failed: dict[str, tuple[float, str]] = {}
        """Group key -> (when, why) its last acquire failed."""
        self._releases: dict[tuple[str, str], _Release] = {}
        """(resource, token) -> its release's tries so far."""
        self._released_tokens: set[tuple[str, str]] = set()
        """Released, their pods' finalizers not all off yet."""
        self._refused: set[str] = set()
        """Pods (key/uid) told that a token they carry is not one fluence sealed."""

    # ---- following the pods -----------------------------------------------------------

    def on_pod(self, kind: str, pod: Pod) -> None:
        with self._lock:
            if kind != DELETED and names.FINALIZER_QRMI_RELEASE in pod.metadata.finalizers:
                self._holding[pod.key] = pod
            else:
                self._holding.pop(pod.key, None)

    # ---- before a release ---------------------------------------------------------------

    def needs(self, backends: Iterable[tuple[str, Mapping[str, str]]]) -> list[qrmi.QrmiResource]:
        """The definitions of the ``backends`` (name, attributes) fluence acquires, in order."""
        definitions = self.definitions()
        out = []
        for name, attributes in backends:
            definition = definitions.get(name)
            if attributes.get(names.ATTR_QRMI_TYPE) and definition and definition.acquire:
                out.append(definition)
        return out

    def acquire_all(
        self, group: str, resources: Sequence[qrmi.QrmiResource], members: Sequence[Pod]
    ) -> list[tuple[str, str]]:
        """(resource, token) for each of ``resources``, in order; AcquireFailed: why not.

        Acquisitions made for the group earlier, of resources it no longer got (placed
        elsewhere since), are released first.
        """
        wanted = {r.name for r in resources}
        for key in [k for k in self._pending if k[0] == group and k[1] not in wanted]:
            self._release_pending(key)
        return [(r.name, self._acquire(group, r, members)) for r in resources]

    def _acquire(self, group: str, resource: qrmi.QrmiResource, members: Sequence[Pod]) -> str:
        """The token of ``group``'s acquisition of ``resource``: one a live member already
        carries, one made earlier and not written yet, or a new one."""
        for m in members:
            if _done(m) or names.FINALIZER_QRMI_RELEASE not in m.metadata.finalizers:
                continue
            for name, token in self.tokens(m):
                if name == resource.name:
                    return token  # a member already running holds it: one acquisition a group
        key = (group, resource.name)
        pending = self._pending.get(key)
        if pending is not None:
            return pending.token
        failed = self._failed.get(group)
        if failed is not None and self.clock() - failed[0] < self.retry_after:
            raise AcquireFailed(failed[1])
        job = min(members, key=lambda m: m.key, default=None)
        call = self._acquiring.get(key)
        if call is None:
            call = self._call(self._acquiring, key, self._acquire_now, resource, job)
        if not call.done():
            raise AcquireFailed(f"acquiring QRMI resource {resource.name}")
        del self._acquiring[key]
        try:
            token = call.result()
        except Exception as exc:  # noqa: BLE001 - any failure of the call (Secret, QRMI)
            why = f"acquiring QRMI resource {resource.name} failed: {exc}"
            self._failed[group] = (self.clock(), why)
            _acquired.add(1, {"outcome": "failed"})
            log.warning("qrmi acquire failed", extra={"group": group, "error": str(exc)})
            raise AcquireFailed(why) from exc
        self._failed.pop(group, None)
        self._pending[key] = _Pending(resource.name, token, job)
        _acquired.add(1, {"outcome": "acquired"})
        log.info("qrmi resource acquired", extra={"group": group, "resource": resource.name})
        return token

    def _call(
        self, calls: dict[Any, Any], key: Any, fn: Callable[..., Any], *args: Any
    ) -> Future[Any]:
        """Start ``fn(*args)`` away from the round; the queue is woken when it ends."""
        call = self._calls.submit(fn, *args)
        calls[key] = call
        call.add_done_callback(lambda _: self.wake())
        return call

    def _acquire_now(self, resource: qrmi.QrmiResource, job: Pod | None) -> str:
        return self.library.acquire(
            resource, resource_env(resource, self._credentials(resource), job)
        )

    def _release_now(self, resource: qrmi.QrmiResource, token: str, job: Pod | None) -> None:
        self.library.release(
            resource, token, resource_env(resource, self._credentials(resource), job)
        )

    def annotations(self, pod: Pod, resource: str, token: str) -> dict[str, str]:
        """What ``pod``'s release writes for the acquisition: the token and its seal."""
        return {
            names.qrmi_token_annotation(resource): token,
            names.qrmi_token_seal_annotation(resource): self._sign(pod, resource, token),
        }

    def tokens(self, pod: Pod) -> list[tuple[str, str]]:
        """(resource, token) of each acquisition ``pod`` carries under fluence's seal."""
        return [
            (name, token)
            for name, token in _tokens(pod)
            if self.seal.verify(
                pod.key,
                pod.metadata.uid,
                _sealed(name, token),
                pod.metadata.annotations.get(names.qrmi_token_seal_annotation(name), ""),
            )
        ]

    def _sign(self, pod: Pod, resource: str, token: str) -> str:
        return self.seal.sign(pod.key, pod.metadata.uid, _sealed(resource, token))

    def written(self, group: str) -> None:
        """A member of ``group`` carries its tokens now: releasing them is the pods' business."""
        for key in [k for k in self._pending if k[0] == group]:
            del self._pending[key]

    def keep_only(self, groups: Iterable[str]) -> None:
        """Release the unwritten acquisitions of groups no longer waiting to be released."""
        live = set(groups)
        for key in [k for k in self._acquiring if k[0] not in live]:
            call = self._acquiring[key]
            if call.done():  # made for a group that has gone meanwhile
                del self._acquiring[key]
                if call.exception() is None:
                    self._pending[key] = _Pending(key[1], call.result())
        for key in [k for k in self._pending if k[0] not in live]:
            self._release_pending(key)
        for group in [g for g in self._failed if g not in live]:
            del self._failed[group]

    def _release_pending(self, key: tuple[str, str]) -> None:
        pending = self._pending.pop(key)
        definition = self.definitions().get(pending.resource)
        if definition is None:
            return
        self._calls.submit(self._release_unused, key[0], definition, pending)

    def _release_unused(self, group: str, definition: qrmi.QrmiResource, pending: _Pending) -> None:
        """Release an acquisition never handed to a pod (in the background)."""
        try:
            self._release_now(definition, pending.token, pending.job)
            _released.add(1, {"outcome": "released"})
        except Exception as exc:  # noqa: BLE001 - any failure of the call (Secret, QRMI)
            _released.add(1, {"outcome": "failed"})
            log.warning(
                "an acquisition never handed to a pod could not be released; left to the "
                "service's expiry",
                extra={"group": group, "resource": pending.resource, "error": str(exc)},
            )

    def _credentials(self, resource: qrmi.QrmiResource) -> Mapping[str, str]:
        if not resource.secrets:
            return {}
        found = self.credentials(resource.secret)
        if found is None:
            raise AcquireFailed(
                f"Secret {resource.secret!r} with its credentials is missing from the "
                "extender's namespace"
            )
        return found

    # ---- after the pods -----------------------------------------------------------------

    def reap(self) -> list[tuple[str, list[PatchOp]]]:
        """Release the tokens whose pods are all done; the finalizer removals to write."""
        with self._lock:
            holding = list(self._holding.values())
        by_token: dict[tuple[str, str], list[Pod]] = {}
        sealed: dict[str, list[tuple[str, str]]] = {}
        for pod in holding:
            sealed[pod.key] = self.tokens(pod)
            if len(sealed[pod.key]) < len(_tokens(pod)):
                self._refuse(pod)
            for key in sealed[pod.key]:
                by_token.setdefault(key, []).append(pod)
        now = self.clock()
        for key, pods in by_token.items():
            if key in self._released_tokens or not all(_done(p) for p in pods):
                continue
            state = self._releases.setdefault(key, _Release())
            if self._release(key, pods, state, now):
                self._releases.pop(key, None)
                self._released_tokens.add(key)
        # Forget what no pod carries any more (their finalizers are off).
        self._released_tokens &= set(by_token)
        for key in [k for k in self._releases if k not in by_token]:
            del self._releases[key]
        for key in [k for k in self._releasing if k not in by_token and self._releasing[k].done()]:
            del self._releasing[key]
        return [
            (pod.key, unfinalize_ops(pod))
            for pod in holding
            if _done(pod) and all(k in self._released_tokens for k in sealed[pod.key])
        ]

    def _refuse(self, pod: Pod) -> None:
        """Say once that ``pod`` carries a token fluence did not seal: it is never released
        (a tenant's edit must not make fluence release another's acquisition)."""
        mark = f"{pod.key}/{pod.metadata.uid}"
        if mark in self._refused:
            return
        self._refused.add(mark)
        self._warn(
            pod,
            "QrmiTokenRefused",
            "a QRMI token annotation of this pod does not carry "
            "fluence's seal (edited after its release?); fluence will not release it",
        )

    def _release(self, key: tuple[str, str], pods: list[Pod], state: _Release, now: float) -> bool:
        """Release one token; True when its pods may go (released, or given up on)."""
        resource, token = key
        definition = self.definitions().get(resource)
        first = min(pods, key=lambda p: p.key)
        if definition is None:
            self._warn(
                first,
                "QrmiReleaseSkipped",
                f"QRMI resource {resource} is no longer in "
                "the resources config; its acquisition is left to the service's expiry",
            )
            return True
        call = self._releasing.get(key)
        if call is None:
            if now < state.next_at:
                return False
            call = self._call(self._releasing, key, self._release_now, definition, token, first)
        if not call.done():
            return False
        del self._releasing[key]
        exc = call.exception()
        if exc is not None:
            state.tries += 1
            _released.add(1, {"outcome": "failed"})
            if state.tries >= self.release_tries:
                self._warn(
                    first,
                    "QrmiReleaseFailed",
                    f"releasing QRMI resource {resource} failed {state.tries} times ({exc}); "
                    "left to the service's expiry",
                )
                return True
            state.next_at = now + self.retry_after * 2 ** (state.tries - 1)
            log.warning(
                "qrmi release failed; tried again",
                extra={"resource": resource, "tries": state.tries, "error": str(exc)},
            )
            return False
        _released.add(1, {"outcome": "released"})
        log.info("qrmi resource released", extra={"resource": resource, "pods": len(pods)})
        return True

    def _warn(self, pod: Pod, reason: str, message: str) -> None:
        log.warning(message, extra={"pod": pod.key})
        if self.warn is not None:
            self.warn(pod, reason, message)


def _sealed(resource: str, token: str) -> str:
    """What a token's seal signs (never an allocation record: those are JSON)."""
    return f"qrmi-token {resource} {token}"


def _tokens(pod: Pod) -> list[tuple[str, str]]:
    """(resource, token) of each token annotation on ``pod``, sealed or not."""
    prefix = names.ANNOTATION_QRMI_TOKEN_PREFIX
    return [
        (k[len(prefix) :], v)
        for k, v in pod.metadata.annotations.items()
        if k.startswith(prefix) and v
    ]


def _done(pod: Pod) -> bool:
    return pod.terminal or bool(pod.metadata.deletion_timestamp)


def unfinalize_ops(pod: Pod) -> list[PatchOp]:
    """The patch that takes our finalizer off ``pod`` (``test`` first: only that entry)."""
    index = pod.metadata.finalizers.index(names.FINALIZER_QRMI_RELEASE)
    path = f"/metadata/finalizers/{index}"
    return [
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "test", "path": path, "value": names.FINALIZER_QRMI_RELEASE},
        {"op": "remove", "path": path},
    ]


def api_secret_reader(api: Any, namespace: str) -> Callable[[str], Mapping[str, str] | None]:
    """Reads a Secret of ``namespace`` (the extender's own): its data, None when it is absent."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    core = CoreV1Api(api)

    def read(name: str) -> Mapping[str, str] | None:
        try:
            secret = core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise QrmiCallFailed(
                f"Secret {namespace}/{name} could not be read: HTTP {exc.status}"
            ) from exc
        data = secret.data or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    return read
