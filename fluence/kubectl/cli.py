"""``kubectl fluence``: status, explain, graph and what-if match against the extender.

Installed as the ``kubectl-fluence`` console script, so kubectl finds it as a
plugin. Exit codes: 0 success (``match``: fits now), 1 ``match``: busy,
2 ``match``: unsatisfiable, 3 the extender could not be asked, 4 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from fluence.kubectl import manifests, render
from fluence.kubectl.client import (
    DEFAULT_NAMESPACE,
    DEFAULT_TARGET,
    DirectTransport,
    ExtenderClient,
    ExtenderUnreachable,
    port_forward,
)

EXIT_OK = 0
EXIT_BUSY = 1
EXIT_UNSATISFIABLE = 2
EXIT_UNREACHABLE = 3
EXIT_BAD_INPUT = 4
MATCH_EXIT = {"fits": EXIT_OK, "busy": EXIT_BUSY, "unsatisfiable": EXIT_UNSATISFIABLE}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubectl fluence",
        description="See what fluence's Fluxion graph holds and why pods wait.",
    )
    reach = p.add_argument_group("reaching the extender")
    reach.add_argument("--url", help="extender base URL, e.g. http://127.0.0.1:8888")
    reach.add_argument(
        "--port-forward",
        action="store_true",
        help=f"run 'kubectl port-forward {DEFAULT_TARGET}' to the extender for this call "
        "(the default without --url)",
    )
    reach.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    reach.add_argument("--context", help="kubeconfig context")
    reach.add_argument(
        "--extender-namespace", default=DEFAULT_NAMESPACE, help="namespace fluence runs in"
    )
    reach.add_argument("--target", default=DEFAULT_TARGET, help="what --port-forward connects to")
    p.add_argument("--no-color", action="store_true", help="never colour the output")
    sub = p.add_subparsers(dest="command", required=True)

    st = sub.add_parser("status", help="capacity, allocated and free per node/backend; groups")
    st.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")

    ex = sub.add_parser("explain", help="why a pod is pending, or where it went")
    ex.add_argument("pod", help="pod name (or namespace/name)")
    ex.add_argument("-n", "--namespace", default="", help="the pod's namespace (default: default)")
    ex.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")

    qu = sub.add_parser(
        "queue", help="groups waiting for capacity, in order, with their expected start"
    )
    qu.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")

    pl = sub.add_parser(
        "plan", help="would a manifest's pods fit now, start at some time, or never (nothing made)"
    )
    pl.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    pl.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")

    gr = sub.add_parser("graph", help="the live resource graph")
    gr.add_argument("-o", "--output", choices=["jgf", "dot"], default="jgf")
    gr.add_argument("--render", metavar="FILE", help="draw the graph into FILE with Graphviz")

    ma = sub.add_parser("match", help="what-if: would this jobspec fit now, and where")
    ma.add_argument("jobspec", help="jobspec file (YAML or JSON), or - for stdin")
    ma.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    return p


@contextlib.contextmanager
def connect(args: argparse.Namespace) -> Iterator[ExtenderClient]:
    if args.url:
        yield ExtenderClient(DirectTransport(args.url))
    else:
        with port_forward(
            args.target, args.extender_namespace, args.kubeconfig, args.context
        ) as url:
            yield ExtenderClient(DirectTransport(url))


def use_color(args: argparse.Namespace, out: TextIO) -> bool:
    if args.no_color or os.environ.get("NO_COLOR"):
        return False
    return out.isatty()


def emit(doc: Any, fmt: str, out: TextIO) -> None:
    if fmt == "yaml":
        out.write(yaml.safe_dump(doc, sort_keys=False))
    else:
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def run(args: argparse.Namespace, out: TextIO) -> int:
    paint = render.Painter(use_color(args, out))
    planned: list[dict[str, Any]] = []
    if args.command == "plan":
        try:
            text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
            planned = manifests.pods_from_manifests(text)
        except (OSError, manifests.ManifestError) as exc:
            print(f"cannot plan {args.filename}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.command == "match":
        try:
            body = (
                sys.stdin.buffer.read() if args.jobspec == "-" else Path(args.jobspec).read_bytes()
            )
        except OSError as exc:
            print(f"cannot read jobspec {args.jobspec}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    with connect(args) as client:
        if args.command == "status":
            state = client.state()
            if args.output == "table":
                out.write(render.status_text(state, paint))
            else:
                emit(render.status_doc(state), args.output, out)
            return EXIT_OK
        if args.command == "plan":
            doc = client.plan(planned)
            if args.output == "text":
                out.write(render.match_text(doc, paint))
            else:
                emit(doc, args.output, out)
            return MATCH_EXIT.get(str(doc.get("status")), EXIT_UNREACHABLE)
        if args.command == "queue":
            waiting = client.state().get("queue", [])
            if args.output == "table":
                out.write(render.queue_text(waiting, paint))
            else:
                emit(waiting, args.output, out)
            return EXIT_OK
        if args.command == "explain":
            ns, _, name = args.pod.rpartition("/")
            ns = args.namespace or ns or "default"
            doc = client.explain(ns, name)
            if args.output == "text":
                out.write(render.explain_text(doc, paint))
            else:
                emit(doc, args.output, out)
            return EXIT_OK
        if args.command == "graph":
            jgf = client.graph()
            if args.output == "jgf" and not args.render:
                emit(jgf, "json", out)
                return EXIT_OK
            dot_text = render.graph_dot(jgf, client.state().get("nodes", {}))
            if args.render:
                return draw(dot_text, args.render)
            out.write(dot_text)
            return EXIT_OK
        doc = client.match(body)
        if args.output == "text":
            out.write(render.match_text(doc, paint))
        else:
            emit(doc, args.output, out)
        return MATCH_EXIT.get(str(doc.get("status")), EXIT_UNREACHABLE)


def draw(dot_text: str, target: str) -> int:
    dot = shutil.which("dot")
    if dot is None:
        print(
            "Graphviz 'dot' is not installed, so the picture cannot be drawn; install graphviz "
            "(e.g. apt-get install graphviz), or write DOT with '-o dot' and render it elsewhere",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    fmt = Path(target).suffix.lstrip(".") or "png"
    done = subprocess.run(
        [dot, f"-T{fmt}", "-o", target], input=dot_text.encode(), capture_output=True
    )
    if done.returncode != 0:
        print(f"dot failed: {done.stderr.decode(errors='replace').strip()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {target}", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args, sys.stdout)
    except ExtenderUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
