"""Data the tests read from the project's shared folder beside the checkout, when it is there.

flux-sched's resource-query fixtures and the baseline's benchmark inputs are not
part of this repository. A clone without them skips the tests that need them,
with the reason; CI (``CI`` set) has them, and fails rather than skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("FLUENCE_SHARED", ROOT.parent / "shared"))
BENCH_JOBSPECS = SHARED / "bench-inputs" / "jobspecs"


def require(path: Path, what: str, variable: str) -> Path:
    """``path`` if it exists; otherwise skip the test, or fail it under CI."""
    if path.exists():
        return path
    message = f"{what} not found at {path} (set {variable} to where it is)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must run every test")
    pytest.skip(message)
