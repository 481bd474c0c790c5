"""Random allocate/cancel sequences never over-commit and always return the graph to empty."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxion_nb import Graph
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
