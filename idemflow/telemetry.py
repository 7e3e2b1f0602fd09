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
deleted), gauges by ``idemflow.store``, set as each pass ends;
``idemflow.queue.backlog`` (messages visible, waiting for a worker) and
``idemflow.queue.lag_seconds`` (how long the oldest visible one waited, where
the queue can tell), observable gauges by ``idemflow.queue``, read from the
queue of every running worker each time the metrics are collected (one
:func:`~idemflow.worker.queue_stats` call per queue and collection).

>>> enabled()  # until the application calls instrument()
False
>>> with span("idemflow.step", workflow="pay", request_id="r-1"):
...     count(STEPS_COMMITTED, "pay")
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from idemflow.core.backlog import aqueue_stats, queue_name, queue_stats

if TYPE_CHECKING:
    from idemflow.core.backlog import QueueStats

STEPS_COMMITTED = "idemflow.steps.committed"
CONFLICTS_RETRIED = "idemflow.conflicts.retried"
DUPLICATES_ANSWERED = "idemflow.duplicates.answered"
QUEUE_LAG = "idemflow.queue.lag"
EXPIRY_BACKLOG = "idemflow.expiry.backlog"
EXPIRY_LATE = "idemflow.expiry.late"
QUEUE_BACKLOG = "idemflow.queue.backlog"
QUEUE_LAG_SECONDS = "idemflow.queue.lag_seconds"

_DESCRIPTIONS = {
    STEPS_COMMITTED: "steps committed (memo and data in one write)",
    CONFLICTS_RETRIED: "step bodies run again because their reads went stale",
    DUPLICATES_ANSWERED: "steps answered from their memo instead of running",
}


class _Instruments:
    """The OpenTelemetry handles, made once a provider is set (they follow the global providers)."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace  # the [otel] extra: loaded when turned on

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
        meter.create_observable_gauge(
            QUEUE_BACKLOG,
            callbacks=[lambda _options: _observe(lambda stats: stats.backlog)],
            unit="{message}",
            description="messages visible in the queue, waiting for a worker",
        )
        meter.create_observable_gauge(
            QUEUE_LAG_SECONDS,
            callbacks=[lambda _options: _observe(lambda stats: stats.lag)],
            unit="s",
            description="seconds the oldest visible message has waited (where the queue can tell)",
        )


_watched: dict[int, tuple[str, Callable[[], QueueStats]]] = {}
"""The queues of running workers, by a token: what the queue gauges read when collected."""
_watched_lock = threading.Lock()
_tokens = itertools.count()


def watch_queue(queue: Any, read: Callable[[], QueueStats] | None = None) -> Callable[[], None]:
    """Report ``queue``'s backlog and lag on the queue gauges until the returned function is called.

    ``read`` takes one reading (default: :func:`~idemflow.worker.queue_stats` of ``queue``);
    workers call this as they start. It costs nothing until metrics are collected.
    """

    name = queue_name(queue)
    reader = read if read is not None else lambda: queue_stats(queue)
    token = next(_tokens)
    with _watched_lock:
        _watched[token] = (name, reader)

    def unwatch() -> None:
        with _watched_lock:
            _watched.pop(token, None)

    return unwatch


def watch_async_queue(queue: Any, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """:func:`watch_queue` for an asyncio queue whose ``loop`` runs in another thread than the
    collector's: each reading runs on that loop (at most 10 s); none is taken on the loop's own thread."""

    def read() -> QueueStats:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs on the collector's thread: the usual case
            here = None
        if here is loop:
            raise RuntimeError("queue stats cannot be awaited on the worker's own loop thread")
        future = asyncio.run_coroutine_threadsafe(aqueue_stats(queue), loop)
        return future.result(timeout=10)

    return watch_queue(queue, read)


def _observe(value: Callable[[QueueStats], float | None]) -> Iterable[Any]:
    from opentelemetry.metrics import Observation  # the [otel] extra

    if not _made:  # uninstrumented since: the provider still calls back
        return []
    with _watched_lock:
        watched = list(_watched.values())
    readings: dict[str, float] = {}
    for name, read in watched:
        try:
            found = value(read())
        except Exception as exc:  # noqa: BLE001 - a gauge without this reading beats a failed export
            logging.getLogger(__name__).debug("queue stats of %s failed: %r", name, exc)
            continue
        if found is not None:
            readings[name] = float(found)  # several workers on one queue: one reading of it
    return [Observation(found, {"idemflow.queue": name}) for name, found in readings.items()]


_made: list[_Instruments] = []
"""Empty until :func:`instrument`: a process-wide switch, as every OpenTelemetry instrumentation has."""


def instrument() -> None:
    """Report idemflow's spans and metrics to the global OpenTelemetry providers from now on.

    Raises :class:`ImportError` naming the extra if OpenTelemetry is not installed.
    """
    if not _made:
        try:
            _made.append(_Instruments())
        except ImportError as missing:
            raise ImportError(
                "idemflow.telemetry needs OpenTelemetry: pip install 'idemflow[otel]'"
            ) from missing


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


def log_event(logger: logging.Logger, level: int, name: str, **fields: Any) -> None:
    """One log event: JSON text for people and log shippers, the same fields as ``extra``.

    The text starts with ``ts``, an ISO-8601 UTC time to the millisecond: a worker's stderr is
    often shipped as bare lines (no logging format around them), and events of several workers
    can only be put in order, or matched with a request's ``started_at``, by a time of their own.
    Events about a request name its ``workflow``, ``version`` and ``request_id``. Nothing is
    formatted unless ``logger`` takes ``level``.
    """
    if not logger.isEnabledFor(level):
        return
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    logger.log(level, json.dumps({"ts": stamp, "event": name, **fields}, default=str), extra=fields)


def enabled() -> bool:
    """True once :func:`instrument` was called (hot paths skip the work otherwise)."""
    return bool(_made)
