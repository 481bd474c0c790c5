"""The rule every real-node test follows: skip with the reason where containers cannot run,
fail under CI (which must run them)."""

from __future__ import annotations

import os

import pytest

from testbed.node import missing_requirements


def require_real_node(what: str = "the real node") -> None:
    reason = missing_requirements()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run {what}: {reason}")
    pytest.skip(reason)
