"""Random allocate/cancel sequences never over-commit and always return the graph to empty;
a graph that remembers failed matches answers every sequence as one that does not."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxion_nb import Graph, StateError
from fluxion_nb.examples import pooled_cluster, slot_jobspec

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("alloc"), st.integers(1, 6), st.integers(100, 4000), st.integers(1, 4096)
        ),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops, partial=st.booleans(), policy=st.sampled_from(["first", "high", "low", "lonode"]))
def test_random_sequences_never_over_commit_and_drain_to_empty(
    ops: list[tuple[str, int, int, int]], partial: bool, policy: str
) -> None:
    g = Graph(
        pooled_cluster(nodes=3, cpus_milli=4000, memory_mib=4096),
        policy=policy,
        partial_pools=partial,
    )
    live: list[int] = []
    for kind, a, b, c in ops:
        if kind == "alloc":
            r = g.match(slot_jobspec(a, b, c))
            assert r.status in ("allocated", "busy", "unsatisfiable")
            if r.status == "allocated":
                live.append(r.jobid)
        elif live:
            g.cancel(live.pop(a % len(live)))
        for u in g.usage():
            assert 0 <= u.used <= u.size, u.path
    for jobid in live:
        g.cancel(jobid)
    assert all(u.used == 0 for u in g.usage())
    # Everything is free again: the whole cluster can be taken at once.
    whole = slot_jobspec(12, 1000, 1024) if partial else slot_jobspec(3, 1, 1)
    assert g.match(whole).status == "allocated"


changes = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["allocate", "allocate_orelse_reserve", "satisfiability"]),
            st.integers(1, 3),
            st.just(3000),  # few shapes and times: repeats, which memory answers
            st.sampled_from([0, 0, 0, 30]),
        ),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0), st.just(0)),
        st.tuples(st.just("down"), st.integers(0, 2), st.booleans(), st.just(0)),
        st.tuples(st.just("hold"), st.integers(0, 2), st.just(3000), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops=changes, partial=st.booleans())
def test_a_graph_remembering_failed_matches_answers_as_one_that_does_not(
    ops: list[tuple[str, int, Any, int]], partial: bool
) -> None:
    """Repeats of a failed match come from memory; every change in between makes it anew."""
    made = {
        remember: Graph(
            pooled_cluster(nodes=3, cpus_milli=4000, memory_mib=4096),
            partial_pools=partial,
            remember_failures=remember,
        )
        for remember in (False, True)
    }
    live: list[int] = []
    jobid = 100
    for kind, a, b, c in ops:
        outcomes = []
        for g in made.values():
            if kind == "cancel":
                outcomes.append(g.cancel(live[a % len(live)], missing_ok=True) if live else None)
            elif kind == "down":
                g.set_status(f"/cluster/worker{a}", b)
            elif kind == "hold":
                try:
                    g.hold(jobid, {f"/cluster/worker{a}/core{a}": b}, duration=100)
                    outcomes.append(True)
                except StateError:
                    outcomes.append(False)
            else:
                r = g.match(slot_jobspec(a, b, 1024, duration=60), kind, jobid=jobid, now=c)
                outcomes.append((r.status, r.jobid, r.at, r.nodes))
        assert outcomes[:1] == outcomes[1:], (kind, outcomes)
        if kind == "cancel":
            if live:
                live.pop(a % len(live))
        elif kind == "hold":
            if outcomes[0]:
                live.append(jobid)
        elif kind != "down" and outcomes[0][0] in ("allocated", "reserved"):
            live.append(jobid)
        jobid += 1
