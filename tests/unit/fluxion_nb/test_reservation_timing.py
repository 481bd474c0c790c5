"""``allocate_orelse_reserve`` starts a job at the earliest time its resources are free.

On Kubernetes-shaped pooled nodes the same holds with whole pool vertices as the unit.

On per-core graphs (cores one vertex each, with or without sockets) with running and
reserved jobs of mixed durations, the start the matcher picks is compared with a plain
oracle: the first of "now" and the jobs' starts and ends at which enough single cores are free for
the whole duration (in one socket per slot when there are sockets, in one node when the
request names a node). Fluxion's planner walk reaches the same time: it tries the times
at which the cluster's free cores suffice, earliest first, and matches at each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxion_nb import Graph
from fluxion_nb.examples import pooled_cluster, slot_jobspec


def per_core_graph(nodes: int, cores: int, sockets: int) -> dict[str, Any]:
    verts: list[dict[str, Any]] = []
    edges: list[dict[str, str]] = []

    def vertex(type_: str, idx: int, path: str, parent: str | None) -> str:
        key = str(len(verts))
        meta = {"type": type_, "name": f"{type_}{idx}", "id": idx, "size": 1}
        verts.append({"id": key, "metadata": {**meta, "paths": {"containment": path}}})
        if parent is not None:
            edges.append({"source": parent, "target": key})
        return key

    root = vertex("cluster", 0, "/c0", None)
    for n in range(nodes):
        node_path = f"/c0/node{n}"
        node = vertex("node", n, node_path, root)
        per = cores // sockets if sockets else cores
        for s in range(sockets or 1):
            parent, base = node, node_path
            if sockets:
                base = f"{node_path}/socket{s}"
                parent = vertex("socket", s, base, node)
            for c in range(per):
                cid = s * per + c
                vertex("core", cid, f"{base}/core{cid}", parent)
    return {"graph": {"nodes": verts, "edges": edges}}


def slot_units(nodes: int, cores: int, sockets: int) -> tuple[list[str], dict[str, str], int]:
    """Where a slot's cores must sit (a socket, else a node), each one's node, cores in each."""
    if sockets:
        units = [f"/c0/node{n}/socket{s}" for n in range(nodes) for s in range(sockets)]
    else:
        units = [f"/c0/node{n}" for n in range(nodes)]
    return units, {u: u.split("/")[2] for u in units}, cores // sockets if sockets else cores


@dataclass(frozen=True)
class Request:
    slots: int
    cores: int
    duration: int
    in_one_node: bool

    def jobspec(self) -> dict[str, Any]:
        slot = {
            "type": "slot",
            "count": self.slots,
            "label": "s",
            "with": [{"type": "core", "count": self.cores}],
        }
        resources = [{"type": "node", "count": 1, "with": [slot]}] if self.in_one_node else [slot]
        return {
            "version": 9999,
            "resources": resources,
            "tasks": [{"command": ["x"], "slot": "s", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": self.duration}},
        }


@dataclass(frozen=True)
class Held:
    start: int
    end: int
    cores: frozenset[str]


def earliest_start(
    held: list[Held],
    req: Request,
    units: list[str],
    per_unit: int,
    by_node: dict[str, str],
    allocated: frozenset[str] = frozenset(),
) -> int | None:
    """The first of 0 and the held jobs' starts and ends (the planner's points) at which
    ``req`` fits for its whole duration.

    ``allocated``: cores that record an allocation (a running job, or one replayed by
    update, whenever it starts); as in Fluxion's ``by_excl``, none of them is taken now,
    whatever its span, while a later start looks at the spans alone. So when only such
    records stand in the way now, a later job's start can be the first point that fits.
    """
    for t in sorted({0} | {h.end for h in held} | {h.start for h in held}):
        busy: set[str] = set(allocated) if t == 0 else set()
        for h in held:
            if h.start < t + req.duration and t < h.end:
                busy |= h.cores
        slots = {
            u: (per_unit - sum(1 for c in busy if c.startswith(u + "/"))) // req.cores
            for u in units
        }
        if req.in_one_node:
            per_node: dict[str, int] = {}
            for u, n in slots.items():
                per_node[by_node[u]] = per_node.get(by_node[u], 0) + n
            if max(per_node.values()) >= req.slots:
                return t
        elif sum(slots.values()) >= req.slots:
            return t
    return None


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, int, int, str, list[Request]]:
    nodes = draw(st.integers(2, 4))
    cores = draw(st.sampled_from([2, 4, 8]))
    sockets = draw(st.sampled_from([0, 0, 2]))
    policy = draw(st.sampled_from(["high", "low", "first", "lonode", "hinode"]))
    requests = []
    for _ in range(draw(st.integers(1, 8))):
        per = cores // sockets if sockets else cores
        size = draw(st.sampled_from(sorted({1, 2, per // 2 or 1, per})))
        # A slot under a node is found only where the node holds the cores itself.
        in_one_node = not sockets and draw(st.booleans())
        most = (cores // size) if in_one_node else max(1, nodes * cores // size // 2)
        requests.append(
            Request(
                slots=draw(st.integers(1, most)),
                cores=size,
                duration=draw(st.sampled_from([10, 20, 35, 50, 100])),
                in_one_node=in_one_node,
            )
        )
    return nodes, cores, sockets, policy, requests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_reservation_starts_when_its_cores_first_free(
    case: tuple[int, int, int, str, list[Request]],
) -> None:
    nodes, cores, sockets, policy, requests = case
    g = Graph(per_core_graph(nodes, cores, sockets), policy=policy)
    units, by_node, per_unit = slot_units(nodes, cores, sockets)
    held: list[Held] = []
    for req in requests:
        expected = earliest_start(held, req, units, per_unit, by_node)
        r = g.match(req.jobspec(), "allocate_orelse_reserve")
        if expected is None:
            assert r.status not in ("allocated", "reserved"), (req, r)
            continue
        assert r.status == ("allocated" if expected == 0 else "reserved"), (req, r)
        assert r.at == expected, (req, r.at, expected)
        taken = frozenset(v.path for v in r.vertices if v.type == "core")
        assert len(taken) == req.slots * req.cores
        held.append(Held(r.at, r.at + req.duration, taken))


def _core_paths(found: str) -> set[str]:
    """The cores a ``find`` answer (JGF) lists."""
    if not found.strip():
        return set()
    nodes = json.loads(found)["graph"]["nodes"]
    return {n["metadata"]["paths"]["containment"] for n in nodes if n["metadata"]["type"] == "core"}


@st.composite
def command_files(draw: st.DrawFn) -> tuple[int, int, int, str, list[tuple[str, Any]]]:
    nodes, cores, sockets, policy, _ = draw(scenarios())
    per = cores // sockets if sockets else cores
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(4, 24))):
        kind = draw(
            st.sampled_from(
                ["match", "match", "match", "cancel", "partial", "replay", "down", "up"]
            )
        )
        if kind == "match":
            size = draw(st.sampled_from(sorted({1, 2, per // 2 or 1, per})))
            steps.append(
                (
                    kind,
                    Request(
                        slots=draw(st.integers(1, max(1, nodes * cores // size // 2))),
                        cores=size,
                        duration=draw(st.sampled_from([10, 20, 35, 50, 100])),
                        in_one_node=False,
                    ),
                )
            )
        elif kind in ("down", "up"):
            steps.append((kind, draw(st.integers(0, nodes - 1))))
        else:
            steps.append((kind, draw(st.integers(0, 1000))))
    return nodes, cores, sockets, policy, steps


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command_files())
def test_long_command_files_keep_the_model(
    case: tuple[int, int, int, str, list[tuple[str, Any]]],
) -> None:
    """Matches (now or reserved), cancels, partial cancels of running jobs, a cancelled
    job replayed from its R, nodes set down and up, in any order: every start is the
    model's earliest, a replay holds exactly what the job held, and ``find`` lists the
    cores of the running jobs (sched-now) and of the later ones (sched-future)."""
    nodes, cores, sockets, policy, steps = case
    g = Graph(per_core_graph(nodes, cores, sockets), policy=policy, match_format="jgf")
    units, by_node, per_unit = slot_units(nodes, cores, sockets)
    # jobid -> (held, its R while it holds all of it, duration, replayed)
    jobs: dict[int, tuple[Held, str, int, bool]] = {}
    down: set[str] = set()

    def recording(allocation: bool) -> frozenset[str]:
        """Cores whose vertices record an allocation (running jobs and replays) or else a
        reservation (later matches)."""
        return frozenset(
            c
            for h, _, _, replayed in jobs.values()
            if (h.start == 0 or replayed) == allocation
            for c in h.cores
        )

    for kind, arg in steps:
        if kind == "match":
            up_units = [u for u in units if by_node[u] not in down]
            held = [h for h, *_ in jobs.values()]
            expected = (
                earliest_start(held, arg, up_units, per_unit, by_node, recording(True))
                if up_units
                else None
            )
            r = g.match(arg.jobspec(), "allocate_orelse_reserve")
            if expected is None:
                assert r.status not in ("allocated", "reserved"), (arg, r)
                continue
            assert (r.status, r.at) == ("allocated" if expected == 0 else "reserved", expected)
            taken = frozenset(v.path for v in r.vertices if v.type == "core")
            assert not any(
                by_node[u] in down for u in units if any(c.startswith(u + "/") for c in taken)
            )
            jobs[r.jobid] = (Held(r.at, r.at + arg.duration, taken), r.R, arg.duration, False)
        elif kind == "cancel" and jobs:
            jobid = sorted(jobs)[arg % len(jobs)]
            assert g.cancel(jobid)
            del jobs[jobid]
        elif kind == "partial":
            running = sorted(j for j, (h, *_) in jobs.items() if h.start == 0 and len(h.cores) > 1)
            if running:
                jobid = running[arg % len(running)]
                h, R, d, replayed = jobs[jobid]
                gone = sorted(h.cores)[0]
                assert not g.partial_cancel(jobid, [gone])
                # Its R is no longer what it holds: a replay of it is not checked.
                jobs[jobid] = (Held(h.start, h.end, h.cores - {gone}), "", d, replayed)
        elif kind == "replay":
            whole = sorted(j for j, (_, R, *_) in jobs.items() if R)
            if whole:
                jobid = whole[arg % len(whole)]
                h, R, d, _ = jobs.pop(jobid)
                g.cancel(jobid)
                fresh = max(j.jobid for j in g.jobs()) + 1
                again = g.update_allocate(fresh, R, at=h.start, duration=d)
                assert again.status == ("allocated" if h.start == 0 else "reserved")
                assert frozenset(v.path for v in again.vertices if v.type == "core") == h.cores
                jobs[fresh] = (h, again.R, d, True)
        elif kind in ("down", "up"):
            g.set_status(f"/c0/node{arg}", kind == "up")
            (down.discard if kind == "up" else down.add)(f"node{arg}")
        assert _core_paths(g.find("sched-now=allocated")) == recording(True)
        assert _core_paths(g.find("sched-future=reserved")) == recording(False)
    for jobid in list(jobs):
        g.cancel(jobid)
    assert not _core_paths(g.find("sched-now=allocated"))
    assert not _core_paths(g.find("sched-future=reserved"))


@st.composite
def pooled_scenarios(draw: st.DrawFn) -> tuple[int, int, int, str, list[tuple[int, int, int, int]]]:
    nodes = draw(st.sampled_from([2, 3, 4, 64]))
    cores, memory = draw(st.sampled_from([4, 8])), draw(st.sampled_from([8, 16]))
    policy = draw(st.sampled_from(["high", "low", "first", "lonode"]))
    requests = [
        (
            draw(st.integers(1, 2 if nodes < 64 else 40)),
            draw(st.integers(1, cores)),
            draw(st.integers(1, memory)),
            draw(st.sampled_from([10, 20, 35, 50])),
        )
        for _ in range(draw(st.integers(1, 10)))
    ]
    return nodes, cores, memory, policy, requests


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pooled_scenarios())
def test_on_pooled_nodes_a_reservation_starts_when_enough_nodes_first_free(
    case: tuple[int, int, int, str, list[tuple[int, int, int, int]]],
) -> None:
    """Kubernetes-shaped nodes (one core pool, one memory pool each), pools not shared:
    as in Fluxion a slot takes its pools' whole vertices (the match granule is the vertex)
    and a vertex serves one job at a time, so a slot needs a node nothing holds over its
    window, and the start is the first of 0 and the jobs' ends with enough such nodes."""
    nodes, cores, memory, policy, requests = case
    g = Graph(pooled_cluster(nodes=nodes, cpus_milli=cores, memory_mib=memory), policy=policy)
    held: list[tuple[int, int, set[str]]] = []
    for slots, cpu, mem, duration in requests:
        expected = None
        for t in sorted({0} | {end for _, end, _ in held}):
            free = [
                f"worker{i}"
                for i in range(nodes)
                if not any(s < t + duration and t < e and f"worker{i}" in on for s, e, on in held)
            ]
            if len(free) >= slots:
                expected = t
                break
        spec = slot_jobspec(slots, cpu, mem, duration=duration)
        r = g.match(spec, "allocate_orelse_reserve")
        if expected is None:
            assert r.status not in ("allocated", "reserved"), r
            continue
        assert (r.status, r.at) == ("allocated" if expected == 0 else "reserved", expected)
        taken = r.by_node()
        assert len(taken) == slots
        assert all(per == {"core": cores, "memory": memory} for per in taken.values())
        held.append((r.at, r.at + duration, set(taken)))
