"""Without an OTLP endpoint, spans cost nothing and change no context."""

from __future__ import annotations

from opentelemetry import trace

from fluence import telemetry


def test_spans_are_shared_no_ops_while_traces_go_nowhere() -> None:
    assert not telemetry.traces_exported()
    t = telemetry.tracer("fluence.test")
    first = t.start_as_current_span("filter")
    assert t.start_as_current_span("bind") is first  # one shared object, nothing built per span
    with first as span:
        assert not span.is_recording()
        span.set_attribute("pod", "default/p")  # accepted and dropped
        assert trace.get_current_span() is trace.INVALID_SPAN
