"""``python -m testbed.demo`` as a user runs it: the whole chain, its report, and no leftovers.

Every process the demo starts inherits a unique marker variable in its
environment, so leftovers are found precisely even when other control planes
run on the same machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fluence import names
from fluence.resources import load as load_resources
from tests.support.real_node import require_real_node

ROOT = Path(__file__).resolve().parents[2]
MARKER = "FLUENCE_DEMO_TEST_RUN"
DEMO_TIMEOUT_S = 240
NAMESPACE = "fluence-demo"
# Pod name patterns of the example workloads the demo applies, with how many pods each has.
EXAMPLE_PODS = {
    r"training-[a-z0-9]+-[a-z0-9]{5}": 2,
    r"label-gang-[a-z0-9]+-[a-z0-9]{5}": 2,
    r"job-gang-0-[a-z0-9]{5}": 1,
    r"job-gang-1-[a-z0-9]{5}": 1,
    r"quantum-hello": 1,
}
ROW = re.compile(rf"^{NAMESPACE}/(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


def marked_processes(run_id: str) -> list[psutil.Process]:
    """Live processes carrying this run's marker in their environment."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(MARKER) == run_id:
                found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> str:
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            out.append(f"{p.pid}: {' '.join(p.cmdline())[:160]}")
    return "; ".join(out)


class DemoRun:
    """One demo subprocess; the fixture kills it and anything it left, whatever happens."""

    def __init__(self, *args: str) -> None:
        self.run_id = uuid.uuid4().hex
        env = {**os.environ, MARKER: self.run_id, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.demo", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []

    def read_until(self, needle: str, timeout_s: float) -> None:
        """Collect output lines until one contains ``needle`` (or the process ends)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if needle in line:
                return
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"no {needle!r} in the demo output:\n{self.output}")

    def finish(self, timeout_s: float = DEMO_TIMEOUT_S) -> int:
        try:
            rest, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            rest, _ = self.proc.communicate()
            raise AssertionError(
                f"the demo ran over {timeout_s}s:\n{self.output}\n{rest}"
            ) from None
        self.lines += rest.splitlines()
        return self.proc.returncode

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def leftovers(self) -> list[psutil.Process]:
        """Marked processes still alive a moment after the demo exited (exits take a tick)."""
        deadline = time.monotonic() + 5
        while (left := marked_processes(self.run_id)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left


@contextlib.contextmanager
def demo(*args: str) -> Iterator[DemoRun]:
    run = DemoRun(*args)
    try:
        yield run
    finally:
        run.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.proc.wait(10)
        for proc in marked_processes(run.run_id):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def pod_rows(output: str) -> dict[str, tuple[str, str, str, str]]:
    """Report rows: pod name -> (group, phase, node, backend)."""
    rows = {}
    for line in output.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4), m.group(5))
    return rows


@pytest.mark.parametrize("real", [True, False], ids=["real-node", "kwok-only"])
def test_demo_shows_every_example_pod_placed_and_leaves_nothing_running(real: bool) -> None:
    backends = {r.name for r in load_resources(ROOT / "examples" / "resources.yaml").resources}
    if real:
        require_real_node("the demo's real node")
    with demo("--nodes", "3", *([] if real else ["--no-real-node"])) as run:
        code = run.finish()
        output = run.output
        assert code == 0, output
        rows = pod_rows(output)
        for pattern, count in EXAMPLE_PODS.items():
            matching = {n: r for n, r in rows.items() if re.fullmatch(pattern, n)}
            assert len(matching) == count, (pattern, rows, output)
            for name, (_, phase, node, _) in matching.items():
                assert re.fullmatch(r"node-[0-2]|real-node", node), (name, node, output)
                assert phase in ("Running", "Succeeded"), (name, phase, output)
        assert rows["quantum-hello"][3] in backends, output
        backend = rows["quantum-hello"][3]
        if real:
            # Only the real node has quantum devices (its kubelet took the device plugin):
            # the example ran there, and its container printed what the kubelet set.
            assert rows["quantum-hello"][2] == "real-node", output
            assert f"  {NAMESPACE}/quantum-hello: QRMI_BACKEND={backend}" in run.lines, output
        else:
            assert "no real node (" in output
            assert rows["quantum-hello"][2] != "real-node", output
            at = run.lines.index(f"  {NAMESPACE}/quantum-hello:")
            env = run.lines[at + 1 : at + 5]
            field = f"{names.ANNOTATION_BACKEND} = {backend}"
            assert f"    QRMI_BACKEND <- {field}" in env, output
            assert f"    FLUXION_BACKEND <- {field}" in env, output
            assert f"{backend}: held by {NAMESPACE}/quantum-hello" in output
        assert re.search(r"^demo finished in \d+\.\d+s \(ok\)$", output, re.MULTILINE), output
        left = run.leftovers()
        assert not left, f"processes outlived the demo: {describe(left)}"


def test_keep_running_serves_kubectl_until_ctrl_c_then_stops_everything(tmp_path: Path) -> None:
    from kubernetes import client, config

    with demo("--nodes", "2", "--keep-running", "--workdir", str(tmp_path / "cluster")) as run:
        run.read_until("Press Ctrl-C to stop.", DEMO_TIMEOUT_S)
        kubeconfig = next(
            ln.split("--kubeconfig ", 1)[1].split()[0] for ln in run.lines if "--kubeconfig " in ln
        )
        assert Path(kubeconfig).is_file()
        marked = marked_processes(run.run_id)
        cmdlines = " ".join(" ".join(p.cmdline()) for p in marked)
        for component in ("etcd", "kube-apiserver", "kube-scheduler", "fluence-extender"):
            assert component in cmdlines, (component, describe(marked))
        api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        try:
            pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
        finally:
            api.close()  # type: ignore[no-untyped-call]
        assert len(pods) == sum(EXAMPLE_PODS.values())
        assert all(p.spec.node_name for p in pods)
        os.kill(run.proc.pid, signal.SIGINT)
        code = run.finish(60)
        assert code == 130, run.output
        assert "interrupted" in run.output and "demo finished in" in run.output
        left = run.leftovers()
        assert not left, f"processes outlived the demo: {describe(left)}"
