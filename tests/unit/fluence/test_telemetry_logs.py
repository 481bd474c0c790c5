"""The JSON log line: one object per record, extras as keys, nothing lost to encoding."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from fluence.telemetry import JsonFormatter


def _record(msg: str, extra: dict[str, object], exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError:
            info = sys.exc_info()
    rec = logging.LogRecord("fluence.test", logging.WARNING, __file__, 1, msg, (), info)
    rec.__dict__.update(extra)
    return rec


def test_extras_become_keys_and_values_without_json_form_become_text() -> None:
    line = JsonFormatter().format(
        _record(
            "pod %s bound",
            {"pod": "ns/p", "where": Path("/etc/x"), "amounts": {"core": 2}, "ratio": 0.5},
        )
    )
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "warning"
    assert doc["logger"] == "fluence.test"
    assert doc["msg"] == "pod %s bound"
    assert doc["pod"] == "ns/p"
    assert doc["where"] == "/etc/x"
    assert doc["amounts"] == {"core": 2}
    assert doc["ratio"] == 0.5
    assert "trace_id" not in doc  # no span is current
    assert not {"pathname", "lineno", "args", "exc_info"} & set(doc)


def test_an_exception_is_carried_as_its_traceback() -> None:
    doc = json.loads(JsonFormatter().format(_record("failed", {"error": ValueError("bad")}, True)))
    assert doc["error"] == "bad"
    assert doc["exc"].startswith("Traceback") and "ZeroDivisionError" in doc["exc"]
