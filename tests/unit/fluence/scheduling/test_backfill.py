"""The backfill policies an operator names, and the depths they keep."""

from __future__ import annotations

import pytest

from fluence.scheduling import backfill


def test_each_named_policy_keeps_its_depth() -> None:
    assert backfill.named("conservative") == backfill.conservative(backfill.DEFAULT_DEPTH)
    assert backfill.named("conservative", 5).depth == 5
    assert backfill.named("easy", 5) == backfill.EASY and backfill.EASY.depth == 1
    assert backfill.NONE.depth == 0


@pytest.mark.parametrize("name", ["", "fcfs", "EASY", "none"])
def test_an_unknown_policy_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match="conservative, easy"):
        backfill.named(name)


@pytest.mark.parametrize("depth", [0, -1])
def test_conservative_protects_at_least_one_group(depth: int) -> None:
    with pytest.raises(ValueError, match="at least one"):
        backfill.conservative(depth)
    with pytest.raises(ValueError, match="negative"):
        backfill.Backfill("any", -1)
