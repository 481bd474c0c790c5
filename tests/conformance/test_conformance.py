"""flux-sched's own resource-query cases, replayed through fluxion-rq (byte-for-byte)."""

from __future__ import annotations

import pytest

from tests.conformance.replay import fixtures_dir, jgf_cases, replay_case
from tests.support.shared_data import require

# Cases known to pass; the suite fails if any of them regresses.  Raise it as
# more of flux-sched's behaviour is covered.
PASS_FLOOR = 414


@pytest.mark.slow
def test_resource_query_cases_match_flux_sched_output() -> None:
    fx = fixtures_dir()
    require(fx / "cases.json", "flux-sched's resource-query fixtures", "FLUXION_FIXTURES")
    results = [replay_case(c, fx) for c in jgf_cases(fx)]
    passed = sum(r.passed for r in results)
    print(f"conformance: {passed}/{len(results)} cases byte-identical")
    assert passed >= PASS_FLOOR, [
        f"{r.test_file}: {r.case}: {r.reason}" for r in results if not r.passed
    ]


def test_basic_case_is_byte_identical() -> None:
    fx = fixtures_dir()
    require(fx / "cases.json", "flux-sched's resource-query fixtures", "FLUXION_FIXTURES")
    cases = [c for c in jgf_cases(fx) if c["test_file"] == "t3015-resource-basic-jgf.t"]
    assert cases, "t3015 cases must be present in the fixtures"
    for c in cases:
        r = replay_case(c, fx)
        assert r.passed, f"{r.case}: {r.reason}"
