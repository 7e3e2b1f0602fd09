"""Optional OpenTelemetry spans and metrics (``pip install 'idemflow[otel]'``).

Like OpenTelemetry's own instrumentations, it is off until the application
turns it on, once, with :func:`instrument` (after setting up its providers
with ``trace.set_tracer_provider`` / ``metrics.set_meter_provider``); idemflow
then reports to those providers and configures none itself. Off, every call
here is one flag check (asking OpenTelemetry whether a provider is set reads
the environment each time: too dear for every step).

Spans: ``idemflow.run`` (one execution of a request), ``idemflow.step``,
``idemflow.commit``, ``idemflow.queue.send`` (``submit``, the relay,
``retry``), ``idemflow.queue.receive`` (a worker handling a message); each
carries ``idemflow.workflow``, ``idemflow.request_id`` and, where it applies,
``idemflow.version`` and ``idemflow.step``. Metrics:
``idemflow.steps.committed``, ``idemflow.conflicts.retried``,
``idemflow.duplicates.answered`` (a step answered from its memo instead of
running), counters by workflow; ``idemflow.queue.lag`` (seconds from a
request's claim to a worker taking it up), a histogram; ``idemflow.expiry.backlog``
(expired rows the last complete pass of a store's sweeps met and left in place)
and ``idemflow.expiry.late`` (most seconds past expiry of a row that pass
deleted), gauges by ``idemflow.store``, set as each pass ends.

>>> enabled()  # until the application calls instrument()
False
>>> with span("idemflow.step", workflow="pay", request_id="r-1"):
...     count(STEPS_COMMITTED, "pay")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import metrics, trace
except ImportError:  # the extra is not installed: every call below is a no-op
    metrics = trace = None  # type: ignore[assignment]

STEPS_COMMITTED = "idemflow.steps.committed"
CONFLICTS_RETRIED = "idemflow.conflicts.retried"
DUPLICATES_ANSWERED = "idemflow.duplicates.answered"
QUEUE_LAG = "idemflow.queue.lag"
EXPIRY_BACKLOG = "idemflow.expiry.backlog"
EXPIRY_LATE = "idemflow.expiry.late"

_DESCRIPTIONS = {
    STEPS_COMMITTED: "steps committed (memo and data in one write)",
    CONFLICTS_RETRIED: "step bodies run again because their reads went stale",
    DUPLICATES_ANSWERED: "steps answered from their memo instead of running",
}


class _Instruments:
    """The OpenTelemetry handles, made once a provider is set (they follow the global providers)."""

    def __init__(self) -> None:
        assert trace is not None and metrics is not None
        self.tracer = trace.get_tracer("idemflow")
        meter = metrics.get_meter("idemflow")
        self.counters = {
            name: meter.create_counter(name, description=text) for name, text in _DESCRIPTIONS.items()
        }
        self.lag = meter.create_histogram(QUEUE_LAG, unit="s", description="claim to a worker taking it up")
        self.backlog = meter.create_gauge(
            EXPIRY_BACKLOG, unit="{row}", description="expired rows the last sweep pass met and left"
        )
        self.late = meter.create_gauge(
            EXPIRY_LATE, unit="s", description="most seconds past expiry of a row the last sweep pass deleted"
        )


_made: list[_Instruments] = []
"""Empty until :func:`instrument`: a process-wide switch, as every OpenTelemetry instrumentation has."""


def instrument() -> None:
    """Report idemflow's spans and metrics to the global OpenTelemetry providers from now on.

    Raises :class:`ImportError` naming the extra if OpenTelemetry is not installed.
    """
    if trace is None:
        raise ImportError("idemflow.telemetry needs OpenTelemetry: pip install 'idemflow[otel]'")
    if not _made:
        _made.append(_Instruments())


def uninstrument() -> None:
    """Stop reporting (tests, or an application that turns tracing off)."""
    _made.clear()


def _instruments() -> _Instruments | None:
    return _made[0] if _made else None


def _attributes(fields: dict[str, Any]) -> dict[str, Any]:
    return {f"idemflow.{key}": value for key, value in fields.items() if value is not None}


@contextlib.contextmanager
def span(name: str, **fields: Any) -> Iterator[None]:
    """A span named ``name`` with ``idemflow.<field>`` attributes, if tracing is set up."""
    made = _instruments()
    if made is None:
        yield
        return
    with made.tracer.start_as_current_span(name, attributes=_attributes(fields)):
        yield


def count(metric: str, workflow: str, amount: int = 1) -> None:
    """Add to one of the counters, by workflow."""
    made = _instruments()
    if made is not None:
        made.counters[metric].add(amount, {"idemflow.workflow": workflow})


def lag(seconds: float, workflow: str) -> None:
    """Record how long a request waited between its claim and a worker."""
    made = _instruments()
    if made is not None:
        made.lag.record(seconds, {"idemflow.workflow": workflow})


def expiry_pass(store: str, left: int, late: float) -> None:
    """Set the expiry gauges of ``store`` as one pass of its sweeps ended."""
    made = _instruments()
    if made is not None:
        made.backlog.set(left, {"idemflow.store": store})
        made.late.set(late, {"idemflow.store": store})


def enabled() -> bool:
    """True once :func:`instrument` was called (hot paths skip the work otherwise)."""
    return bool(_made)
