"""KWOK playing the kubelet of the control plane's simulated nodes.

Simulated nodes are API objects with no kubelet; KWOK (built from its Go module
with the other binaries) watches the pods bound to them and moves them through
their lifecycle by the stages in ``kwok-stages.yaml``: Running at once, then
Succeeded or Failed when a test (or a workload's annotation) says so, and gone
at once when deleted. :meth:`Kwok.succeed` and :meth:`Kwok.fail` end a pod's run
the way a container exits: they set the annotations the stages act on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fluence import names
from testbed.processes import ManagedProcess, wait_until
from testbed.rest import KubeRest

STAGES = Path(__file__).with_name("kwok-stages.yaml")
ANNOTATION_EXIT_CODE = "testbed.fluence.flux-framework.org/exit-code"
ANNOTATION_EXIT_AFTER = "testbed.fluence.flux-framework.org/exit-after"
"""A Go duration ("30s"): how long after the exit code is set the pod ends."""


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


class Kwok:
    """One ``kwok`` process managing every node labelled as simulated."""

    def __init__(
        self, binary: Path, kubeconfig: Path, rest: KubeRest, workdir: Path, log_path: Path
    ) -> None:
        self._rest = rest
        argv = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--config={STAGES}",
            f"--manage-nodes-with-label-selector={names.LABEL_FAKE_NODE}=true",
        ]
        self.process = ManagedProcess("kwok", argv, log_path, cwd=workdir)

    def wait_started(self, timeout_s: float = 30.0) -> None:
        """Until KWOK logs that it watches the nodes (it serves no readiness endpoint here)."""

        def started() -> bool:
            try:
                return "Watch nodes" in self.process.log_path.read_text(errors="replace")
            except OSError:
                return False

        wait_until(started, timeout_s=timeout_s, what="started", process=self.process)

    def stop(self, grace_s: float) -> None:
        self.process.stop(grace_s)

    @property
    def running(self) -> bool:
        return self.process.running()

    # Test controls ---------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod: dict[str, Any] = self._rest.get(_pod_path(namespace, name))
        return pod

    def exit(self, namespace: str, name: str, code: int, after: str = "") -> None:
        """Have the pod's containers exit with ``code`` (now, or ``after`` a Go duration)."""
        annotations = {ANNOTATION_EXIT_CODE: str(code)}
        if after:
            annotations[ANNOTATION_EXIT_AFTER] = after
        self._rest.merge_patch(
            _pod_path(namespace, name), {"metadata": {"annotations": annotations}}
        )

    def succeed(self, namespace: str, name: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Every container exits 0: phase Succeeded (returns the pod then)."""
        self.exit(namespace, name, 0)
        return self.wait_for_phase(namespace, name, "Succeeded", timeout_s)

    def fail(
        self, namespace: str, name: str, *, exit_code: int = 1, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        """Every container exits with ``exit_code``: phase Failed (returns the pod then)."""
        if exit_code == 0:
            raise ValueError("a failed pod needs a non-zero exit code; use succeed() for 0")
        self.exit(namespace, name, exit_code)
        return self.wait_for_phase(namespace, name, "Failed", timeout_s)

    def wait_for_phase(
        self, namespace: str, name: str, phase: str, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        """Poll until the pod reaches ``phase``; raises TimeoutError with the last phase seen."""
        deadline = time.monotonic() + timeout_s
        while True:
            pod = self.get_pod(namespace, name)
            seen = (pod.get("status") or {}).get("phase", "?")
            if seen == phase:
                return pod
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"pod {namespace}/{name} is {seen}, not {phase}, after {timeout_s:.0f}s "
                    f"(node: {(pod.get('spec') or {}).get('nodeName') or 'unbound'})"
                )
            time.sleep(0.1)
