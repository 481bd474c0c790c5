"""15,000 pods created, placed, bound, run and deleted through the extender: nothing accumulates.

Every pod ever scheduled used to leave its record (R text, vertex lists) in the
matcher after its release. Now the matcher holds no job once the pods are gone.
What that means for the process's memory is measured by ``bench/churn.py``.
"""

from __future__ import annotations

import pytest

from tests.support.churn import extender_churn

PODS = 15_000
"""More than the ledger's bounded caches hold (the last match of 4,096 groups), three times."""


@pytest.mark.slow
def test_create_delete_churn_returns_every_allocation() -> None:
    env, cycle, close = extender_churn()
    for i in range(PODS):
        cycle(i)
    close()
    assert env.ledger.holdings() == {}
    assert all(u["core"]["allocated"] == 0 for u in env.graph.node_usage().values())
    assert not any(env.graph.backend_usage().values())
    assert env.graph._g.jobs() == []
