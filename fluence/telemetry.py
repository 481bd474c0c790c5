"""Logs, traces and metrics, set up the same way in every fluence binary.

- Logs are one JSON object per line on stderr (``FLUENCE_LOG_FORMAT=text`` for humans).
- Metrics go through OpenTelemetry into the Prometheus client registry; each server
  mounts :func:`metrics_app` at ``/metrics``.
- Traces use the OpenTelemetry SDK when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (or ``..._TRACES_ENDPOINT``) variable is set, and are exported over OTLP/HTTP; without
  it a span is a shared no-op (:class:`Tracer`), so nothing is recorded or sent by default.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import AbstractContextManager
from typing import Any

import msgspec
from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import make_asgi_app

_configured: str | None = None
_tracing = False  # spans are exported (setup found an OTLP endpoint)

# Latency buckets in seconds, fine enough for sub-millisecond handlers.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``extra={...}`` fields are carried as keys."""

    _plain = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in record.__dict__.items():
            if k not in self._plain and not k.startswith("_"):
                out[k] = v
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            out["trace_id"] = format(span.trace_id, "032x")
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _encode_line(out).decode()


# Values without a JSON form (a Path, an exception) are written as their str().
_encode_line = msgspec.json.Encoder(enc_hook=str).encode


def setup(service: str, *, level: str | None = None) -> None:
    """Configure logging, the meter provider and the tracer provider once per process."""
    global _configured, _tracing
    if _configured:
        return
    _configured = service
    # No line carries the caller's file, thread or process; not looking them up
    # halves the cost of a log call (the logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("FLUENCE_LOG_FORMAT", "json") == "text":
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    else:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("FLUENCE_LOG_LEVEL", "INFO")).upper())

    resource = Resource.create({SERVICE_NAME: service})
    metrics.set_meter_provider(
        MeterProvider(
            resource=resource,
            metric_readers=[PrometheusMetricReader()],
            # Every histogram fluence records is a latency in seconds.
            views=[
                View(
                    instrument_type=Histogram,
                    aggregation=ExplicitBucketHistogramAggregation(LATENCY_BUCKETS),
                )
            ],
        )
    )
    if traces_exported():
        # Without somewhere to send them, recorded spans would only cost CPU on every
        # request; Tracer hands out its shared no-op span instead.
        tracer_provider = TracerProvider(resource=resource)
        # The exporter reads the other standard OTEL_EXPORTER_OTLP_* variables itself.
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(tracer_provider)
        _tracing = True


def traces_exported() -> bool:
    """Whether the standard variables name an OTLP endpoint for traces."""
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def meter(name: str) -> metrics.Meter:
    return metrics.get_meter(name)


class Tracer:
    """An OpenTelemetry tracer that costs nothing while traces go nowhere.

    Without an OTLP endpoint the API's no-op tracer would still build a context
    manager, a span and a context change for every span, several per pod; this
    hands out one shared no-op instead, decided when the span starts, so a
    tracer made at import time follows :func:`setup`.
    """

    __slots__ = ("_name", "_real")

    def __init__(self, name: str) -> None:
        self._name = name
        self._real: trace.Tracer | None = None

    def start_as_current_span(self, name: str) -> AbstractContextManager[trace.Span]:
        if not _tracing:
            return _NO_SPAN
        if self._real is None:
            self._real = trace.get_tracer(self._name)
        return self._real.start_as_current_span(name)


class _NoSpan(AbstractContextManager[trace.Span]):
    def __enter__(self) -> trace.Span:
        return trace.INVALID_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def tracer(name: str) -> Tracer:
    return Tracer(name)


def metrics_app() -> Any:
    """An ASGI app serving the Prometheus text format for everything recorded in this process."""
    return make_asgi_app()


class Stopwatch:
    """Elapsed seconds since creation, from the monotonic clock."""

    __slots__ = ("start",)

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start
