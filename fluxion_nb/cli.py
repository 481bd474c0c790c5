"""fluxion-rq: a drop-in for flux-sched's resource-query (same options, commands and output)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TextIO, get_args

from fluxion_nb import _core
from fluxion_nb.errors import InputError, NotFoundError, StateError
from fluxion_nb.graph import MatchOp
from fluxion_nb.jobspec import to_json

_OPS = set(get_args(MatchOp))
_BAR = "INFO: ============================="
# resource-query's reader words a second root in an attached JGF like this.
_DUPLICATE_ROOT = _core.DUPLICATE_ROOT_ERROR
_RQ_DUPLICATE_ROOT = (
    "add_graph_metadata: failed to add root metadata for containment subsystem. "
    "Possible duplicate root."
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fluxion-rq", description=__doc__)
    p.add_argument("-L", "--load-file", required=True, help="resource graph file (JGF)")
    p.add_argument("-f", "--load-format", default="jgf", help="graph format (jgf)")
    p.add_argument("-W", "--load-allowlist", default="", help="accepted, not used with JGF")
    p.add_argument(
        "-S",
        "--match-subsystems",
        default="CA",
        help="CA (containment), PA (power), C+PA, ...; matching walks the first one's tree",
    )
    p.add_argument("-P", "--match-policy", default="first")
    p.add_argument("-F", "--match-format", default="simple")
    p.add_argument("-T", "--traverser", default="simple", choices=["simple", "flexible"])
    p.add_argument("-p", "--prune-filters", default="ALL:core,ALL:node")
    p.add_argument("-g", "--graph-format", default="")
    p.add_argument("-o", "--graph-output", default="")
    p.add_argument("-r", "--reserve-vtx-vec", default="0")
    p.add_argument("-e", "--elapse-time", action="store_true")
    p.add_argument("-d", "--disable-prompt", action="store_true")
    p.add_argument("-t", "--test-output", default="")
    p.add_argument(
        "--partial-pools",
        default="",
        help="comma-separated pool types shared unit by unit ('*' = all)",
    )
    return p


def _read_r(reader: str, path: str, readers: tuple[str, ...]) -> str | None:
    """The R in ``path`` for one of ``readers``; None after resource-query's error line."""
    if reader not in readers:
        print(f"ERROR: unsupported reader {reader}", file=sys.stderr)
        return None
    try:
        return Path(path).read_text()
    except OSError:
        print(f"ERROR: can't open {path}", file=sys.stderr)
        return None


class Session:
    """One resource-query session: a graph, a job table and the command loop."""

    def __init__(self, m: _core.Matcher, out: TextIO, elapse: bool) -> None:
        self.m = m
        self.out = out
        self.elapse = elapse
        self.jobspec_files: dict[int, str] = {}

    def run_match(self, op: str, path: str) -> bool:
        jobid = self.m.next_jobid()
        try:
            text = Path(path).read_text()
        except OSError:
            print(f"ERROR: can't open {path}", file=sys.stderr)
            return True
        try:
            r = self.m.match(to_json(text), op, None, "")
        except InputError as exc:
            # A jobspec its reader refuses (an unknown type included) uses no job id,
            # and satisfiability still says "Satisfiable" (errno EINVAL keeps sat true).
            print(f"match_allocate: ERROR: Jobspec error for {jobid}: {exc}", file=sys.stderr)
            self._not_matched(op, jobid, sat=True)
            return False
        if r.status == "error":
            print(f"match_allocate: ERROR: {r.error}", file=sys.stderr)
            self._not_matched(op, jobid, sat=True)
            return False
        if op == "satisfiability":
            self._not_matched(op, jobid, sat=r.status == "satisfiable")
            return True
        if r.status in ("busy", "unsatisfiable"):
            self._failed(r.jobid, sat=r.status == "busy")
            return False
        self.out.write(r.R)
        mode = {"allocated": "ALLOCATED", "reserved": "RESERVED"}.get(r.status, "MATCHED")
        at = "Now" if r.at == 0 else str(r.at)
        self.out.write(
            f"{_BAR}\nINFO: JOBID={r.jobid}\nINFO: RESOURCES={mode}\nINFO: SCHEDULED AT={at}\n"
        )
        if self.elapse:
            sys.stdout.write(f"INFO: ELAPSE={r.overhead:.6f}\n")
        self.out.write(f"{_BAR}\n")
        if r.status in ("allocated", "reserved"):
            self.jobspec_files[r.jobid] = path
        return True

    def _not_matched(self, op: str, jobid: int, sat: bool) -> None:
        """What a match that placed nothing prints; satisfiability prints only ``sat``."""
        if op == "satisfiability":
            word = "Satisfiable" if sat else "Unsatisfiable"
            self.out.write(f"{_BAR}\nINFO: {word} request\n{_BAR}\n")
        else:
            self._failed(jobid, sat)

    def _failed(self, jobid: int, sat: bool) -> None:
        self.out.write(f"{_BAR}\nINFO: No matching resources found\n")
        if not sat:
            self.out.write("INFO: Unsatisfiable request\n")
        self.out.write(f"INFO: JOBID={jobid}\n{_BAR}\n")

    def command(self, args: list[str]) -> bool:
        """Run one command; returns False on quit."""
        cmd = args[0]
        if cmd in ("quit", "q"):
            return False
        if cmd in ("match", "m"):
            if len(args) != 3:
                print("ERROR: malformed command", file=sys.stderr)
            elif args[1] not in _OPS:
                print(f"ERROR: unknown subcmd {args[1]}", file=sys.stderr)
            else:
                self.run_match(args[1], args[2])
        elif cmd in ("multi-match", "M"):
            if len(args) <= 3:
                print("ERROR: malformed command", file=sys.stderr)
            elif args[1] not in _OPS:
                print(f"ERROR: unknown subcmd {args[1]}", file=sys.stderr)
            else:
                for path in args[2:]:
                    if not self.run_match(args[1], path):
                        break
        elif cmd in ("cancel", "c"):
            if len(args) not in (2, 3):
                print("ERROR: malformed command", file=sys.stderr)
            else:
                try:
                    self.m.cancel(int(args[1]), False)
                except (NotFoundError, ValueError):
                    print(f"cancel: ERROR: nonexistent job {args[1]}", file=sys.stderr)
                else:
                    if len(args) == 3 and args[2] == "stats":
                        self._stats("CANCEL", *self.m.traversal_counts())
        elif cmd in ("partial-cancel", "pc"):
            self._partial_cancel(args)
        elif cmd in ("update", "u"):
            self._update(args)
        elif cmd in ("set-status", "t"):
            if len(args) != 3:
                print("ERROR: malformed command", file=sys.stderr)
            elif args[2] not in ("up", "down"):
                print("ERROR: unrecognized status", file=sys.stderr)
            else:
                try:
                    self.m.set_status(args[1], args[2] == "up")
                except NotFoundError:
                    self.out.write(f"Could not find path {args[1]} in resource graph.\n")
        elif cmd in ("get-status", "e"):
            if len(args) != 2:
                print("ERROR: malformed command", file=sys.stderr)
            else:
                try:
                    up = self.m.get_status(args[1])
                    self.out.write(f"{args[1]} is {'up' if up else 'down'}\n")
                except NotFoundError:
                    self.out.write(f"Could not find path {args[1]} in resource graph.\n")
        elif cmd in ("set-property", "p"):
            self._set_property(args)
        elif cmd in ("get-property", "g"):
            self._get_property(args)
        elif cmd in ("find", "f"):
            self._find(args)
        elif cmd in ("list", "l"):
            for j in self.m.jobs():
                print(self._job_line(j))
        elif cmd in ("info", "i"):
            if len(args) != 2:
                print("ERROR: malformed command", file=sys.stderr)
            else:
                rec = self.m.info(int(args[1]))
                if rec is None:
                    print(f"info: ERROR: nonexistent job {args[1]}", file=sys.stderr)
                else:
                    print(self._job_line(rec))
        elif cmd in ("stat", "s"):
            jobs = self.m.jobs()
            times = [j.overhead for j in jobs]
            print(f"INFO: Num. of Jobs Matched: {len(jobs)}")
            print(f"INFO: Min. Match Time: {min(times) if times else 0:g}")
            print(f"INFO: Max. Match Time: {max(times) if times else 0:g}")
            print(f"INFO: Avg. Match Time: {sum(times) / len(times) if times else 0:g}")
        elif cmd in ("attach", "j"):
            self._attach(args)
        elif cmd == "remove":
            self._remove(args)
        elif cmd in ("cat", "a"):
            try:
                print(Path(args[1]).read_text(), end="")
            except (OSError, IndexError) as exc:
                print(f"ERROR: {exc}", file=sys.stderr)
        elif cmd in ("help", "h"):
            print(
                "Commands: match, multi-match, update, attach, remove, find, cancel, "
                "partial-cancel, set-property, get-property, set-status, get-status, list, info, "
                "stat, cat, help, quit"
            )
        else:
            print(f"ERROR: unknown command {cmd}", file=sys.stderr)
        return True

    def _partial_cancel(self, args: list[str]) -> None:
        # partial-cancel <jobid> <jgf|rv1exec> <R file> [stats], with
        # resource-query's messages: the reason of a failed removal goes to
        # stdout, the error line to stderr.
        if len(args) not in (4, 5):
            print("ERROR: malformed command", file=sys.stderr)
            return
        R = _read_r(args[2], args[3], ("jgf", "rv1exec"))
        if R is None:
            return
        try:
            jobid = int(args[1])
        except ValueError:
            jobid = 0
        rec = self.m.info(jobid)
        if rec is None or rec.state == "CANCELED":
            print(f"ERROR: nonexistent job {jobid}", file=sys.stderr)
            return
        if rec.state == "RESERVED":
            print("ERROR: reservations not currently supported by partial cancel", file=sys.stderr)
            return
        try:
            self.m.partial_cancel_r(jobid, R, args[2])
        except (InputError, NotFoundError, StateError) as exc:
            print(f"partial cancel: {exc}")
            print(f"ERROR: error encountered while removing job {jobid}", file=sys.stderr)
        if len(args) == 5 and args[4] == "stats":
            # A partial cancel releases vertices directly, without a walk.
            self._stats("PARTIAL CANCEL", 0, 0)

    def _attach(self, args: list[str]) -> None:
        if len(args) != 2:
            print("ERROR: malformed command", file=sys.stderr)
            return
        try:
            text = Path(args[1]).read_text()
        except OSError:
            print(f"ERROR: can't open {args[1]}", file=sys.stderr)
            return
        try:
            self.m.attach(text)
        except (InputError, StateError) as exc:
            # resource-query's report: its own line, the API's, then the reader's.
            why = str(exc)
            if why.startswith(_DUPLICATE_ROOT):
                why = _RQ_DUPLICATE_ROOT
            sys.stderr.write(
                "ERROR: can't attach JGF subgraph \n"
                "ERROR: add_subgraph: ERROR: add subgraph error: Invalid argument\n"
                f"add_subgraph: ERROR: reader returned error: {why}\n\n\n"
            )

    def _remove(self, args: list[str]) -> None:
        # remove <path> true | remove <rank idset> false
        if len(args) != 3:
            print("ERROR: malformed command", file=sys.stderr)
            return
        if args[2] not in ("true", "false"):
            print("ERROR: invalid path boolean input ", file=sys.stderr)
            return
        try:
            if args[2] == "true":
                self.m.remove(args[1])
            else:
                self.m.remove_ranks(args[1])
        except (InputError, NotFoundError, StateError) as exc:
            print(f"ERROR: {exc}", file=sys.stderr)

    def _stats(self, what: str, preorder: int, postorder: int) -> None:
        self.out.write(
            f'{_BAR}\nINFO: {what} PREORDER COUNT="{preorder}"\n'
            f'INFO: {what} POSTORDER COUNT="{postorder}"\n{_BAR}\n'
        )

    def _find(self, args: list[str]) -> None:
        if len(args) < 2:
            print("ERROR: malformed command: ", file=sys.stderr)
            return
        criteria = " ".join(args[1:])
        try:
            self.out.write(self.m.find(criteria, ""))
        except InputError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return
        self.out.write(f'{_BAR}\nINFO: EXPRESSION="{criteria}"\n{_BAR}\n')

    def _job_line(self, j: _core.JobRecord) -> str:
        spec = self.jobspec_files.get(j.jobid, "")
        return f"INFO: {j.jobid}, {j.state}, {j.at}, {spec}, {j.overhead:g}"

    def _update(self, args: list[str]) -> None:
        """resource-query's ``update allocate|reserve READER R JOBID AT DURATION``.

        As it does: both record an allocation on the vertices, the job's state and the
        mode printed follow the start (now: ALLOCATED, later: RESERVED), a failed replay
        prints the no-match block, and either way the next match takes the updated id
        plus one.
        """
        if len(args) != 7:
            print("ERROR: malformed command", file=sys.stderr)
            return
        if args[1] not in ("allocate", "reserve"):
            print(f"ERROR: unknown subcmd {args[1]}", file=sys.stderr)
            return
        text = _read_r(args[2], args[3], ("jgf", "rv1exec", "jgf_shorthand"))
        if text is None:
            return
        try:
            jobid, at, duration = int(args[4]), int(args[5]), int(args[6])
        except ValueError:
            print("ERROR: malformed command", file=sys.stderr)
            return
        held = self.m.info(jobid)
        if held is not None and held.state != "CANCELED":
            print("ERROR: existing Jobid ", file=sys.stderr)
            return
        if at < 0 or duration <= 0:
            print(f"ERROR: invalid time ({at}, {duration})", file=sys.stderr)
            return
        try:
            r = self.m.update_allocate(jobid, text, at, duration, False, "", args[2])
        except (InputError, NotFoundError, StateError) as exc:
            r = None
            print(f"ERROR: traverser run () returned error \nERROR: {exc}", file=sys.stderr)
        self.m.set_next_jobid(jobid + 1)
        if r is None:
            self._failed(jobid, sat=True)
            return
        self.out.write(r.R)
        mode = "ALLOCATED" if at == 0 else "RESERVED"
        at_s = "Now" if at == 0 else str(at)
        self.out.write(
            f"{_BAR}\nINFO: JOBID={jobid}\nINFO: RESOURCES={mode}\n"
            f"INFO: SCHEDULED AT={at_s}\n{_BAR}\n"
        )
        self.jobspec_files[jobid] = args[3]

    def _set_property(self, args: list[str]) -> None:
        if len(args) != 3:
            print("ERROR: malformed command", file=sys.stderr)
            return
        kv = args[2]
        pos = kv.find("=")
        if pos <= 0 or pos == len(kv) - 1:
            self.out.write(
                "Incorrect input format. \nPlease use `set-property <resource> PROPERTY=VALUE`.\n"
            )
            return
        try:
            self.m.set_property(args[1], kv[:pos], kv[pos + 1 :])
        except NotFoundError:
            self.out.write(f"Couldn't find path {args[1]} in resource graph.\n")

    def _get_property(self, args: list[str]) -> None:
        if len(args) != 2:
            print("ERROR: malformed command", file=sys.stderr)
            return
        try:
            props = self.m.get_property(args[1])
        except NotFoundError:
            self.out.write(f"Could not find path {args[1]} in resource graph.\n")
            return
        if not props:
            uid = self.m.uniq_id(args[1])
            self.out.write(f"No properties were found for {args[1]} (vtx's uniq_id={uid}).\n")
        for k, v in sorted(props.items()):
            self.out.write(f"{k}={v}\n")


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.load_format != "jgf":
        print(
            f"ERROR: load format '{a.load_format}' is not supported; convert the graph to JGF",
            file=sys.stderr,
        )
        return 1
    pools = {t for t in a.partial_pools.split(",") if t}
    try:
        graph_text = Path(a.load_file).read_text()
        m = _core.Matcher(
            graph_text,
            a.match_policy,
            a.prune_filters,
            a.match_format,
            pools,
            a.traverser,
            a.match_subsystems,
            carry_unprinted_schedule=True,
        )
    except OSError as exc:
        print(f"ERROR: cannot read {a.load_file}: {exc}", file=sys.stderr)
        return 1
    except (InputError, StateError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    out: TextIO = open(a.test_output, "w") if a.test_output else sys.stdout  # noqa: SIM115
    try:
        s = Session(m, out, a.elapse_time)
        for line in sys.stdin:
            if not a.disable_prompt:
                sys.stdout.write("resource-query> ")
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                args = shlex.split(line)
            except ValueError:
                args = line.split()
            if not s.command(args):
                break
            out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
