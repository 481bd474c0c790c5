"""Command line for humans: ``python -m testbed bins|images|up|down|status``.

``up`` keeps a control plane running in the foreground (Ctrl-C or SIGTERM
stops it) and records its pid in the work directory, so ``down`` from another
terminal can stop it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from testbed.binaries import BinariesError, cache_root, ensure_release, kubernetes_version
from testbed.cluster import ControlPlane, selected_release
from testbed.images import ImageBuildError
from testbed.processes import ProcessStartError

STATE_FILE = "cluster.json"
DOWN_TIMEOUT_S = 60.0


def default_workdir() -> Path:
    return cache_root() / "cluster"


def _read_state(workdir: Path) -> dict[str, object] | None:
    try:
        state: dict[str, object] = json.loads((workdir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # Field 3, after the parenthesised command name, is the state letter.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def cmd_bins(_: argparse.Namespace) -> int:
    binaries = ensure_release(selected_release().minor)
    for path in binaries.all():
        print(path)
    return 0


def cmd_images(_: argparse.Namespace) -> int:
    """Build (or reuse) the real node's images; where it cannot run, say why and succeed."""
    from testbed import images
    from testbed.node import missing_requirements

    reason = missing_requirements()
    if reason is not None:
        print(f"no images for a real node here: {reason}", file=sys.stderr)
        return 0
    binaries = ensure_release(selected_release().minor)
    version = kubernetes_version()
    archives = [images.ensure_image(image) for image in images.NODE_IMAGES]
    archives.append(images.ensure_scheduler_image(binaries.kube_scheduler, version))
    archives.append(images.ensure_fluence_image())
    archives.append(images.ensure_qrmi_example_image())
    for archive in archives:
        print(archive)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    workdir: Path = args.workdir
    state = _read_state(workdir)
    if state is not None:
        pid = int(str(state.get("pid", 0)))
        if pid and _alive(pid):
            print(
                f"a control plane (pid {pid}) already runs from {workdir}; "
                "stop it with `python -m testbed down` first",
                file=sys.stderr,
            )
            return 1
        # Left behind by a killed `up`: the processes died with it, the files did not.
        shutil.rmtree(workdir, ignore_errors=True)

    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    cp = ControlPlane(workdir, keep=args.keep)
    try:
        cp.start()
        nodes = cp.add_nodes(args.nodes) if args.nodes else []
        cp.start_kwok()
        (cp.workdir / STATE_FILE).write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "server": cp.server,
                    "kubeconfig": str(cp.kubeconfig),
                    "nodes": nodes,
                }
            )
        )
        print(f"control plane ready in {cp.timings.start_s:.1f}s at {cp.server}", flush=True)
        print(f"nodes: {', '.join(nodes) or '(none)'}", flush=True)
        print(f"kubeconfig: {cp.kubeconfig}", flush=True)
        print(f"export KUBECONFIG={cp.kubeconfig}", flush=True)
        print("press Ctrl-C (or run `python -m testbed down`) to stop", flush=True)
        while not stop_requested.wait(1.0):
            for proc in cp.processes:
                if not proc.running():
                    print(
                        f"{proc.name} exited unexpectedly; see {proc.log_path}\n{proc.log_tail()}",
                        file=sys.stderr,
                    )
                    return 1
        return 0
    except (BinariesError, ProcessStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        (workdir / STATE_FILE).unlink(missing_ok=True)
        cp.stop()
        print(f"control plane stopped in {cp.timings.stop_s:.1f}s", file=sys.stderr, flush=True)


def cmd_down(args: argparse.Namespace) -> int:
    state = _read_state(args.workdir)
    if state is None:
        print(f"no control plane recorded in {args.workdir}", file=sys.stderr)
        return 0
    pid = int(str(state.get("pid", 0)))
    if not pid or not _alive(pid):
        print(f"control plane pid {pid} is not running; removing stale {args.workdir}")
        shutil.rmtree(args.workdir, ignore_errors=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while _alive(pid):
        if time.monotonic() > deadline:
            # Its children die with it (PR_SET_PDEATHSIG).
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    print(f"stopped control plane pid {pid}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = _read_state(args.workdir)
    if state is None:
        print(f"no control plane recorded in {args.workdir}")
        return 1
    pid = int(str(state.get("pid", 0)))
    running = bool(pid) and _alive(pid)
    print(json.dumps({**state, "running": running}, indent=2))
    return 0 if running else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed",
        description="Local etcd + kube-apiserver for fluence tests and demos.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("bins", help="build (or reuse) the cached binaries and print their paths")
    sub.add_parser(
        "images", help="build (or reuse) the real node's images (busybox, kube-scheduler, fluence)"
    )
    up = sub.add_parser("up", help="start a control plane and keep it in the foreground")
    up.add_argument("--nodes", type=int, default=2, help="fake Ready nodes to create")
    up.add_argument("--keep", action="store_true", help="keep the work dir after stopping")
    for sp in (
        up,
        sub.add_parser("down", help="stop the control plane started by `up`"),
        sub.add_parser("status", help="show the running control plane, if any"),
    ):
        sp.add_argument(
            "--workdir",
            type=Path,
            default=default_workdir(),
            help="directory for PKI, etcd data, logs and the pid record",
        )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    handlers = {
        "bins": cmd_bins,
        "images": cmd_images,
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
    }
    try:
        return handlers[args.command](args)
    except (BinariesError, ImageBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
