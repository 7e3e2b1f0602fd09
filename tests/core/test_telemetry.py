"""OpenTelemetry: spans for runs, steps, commits and queue traffic, and the counters, as an
application's own SDK set-up receives them (the SDK's in-memory exporter and reader)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from idemflow import all_of, effect, run, workflow
from idemflow import telemetry as telemetry_module
from idemflow.admin import RunRecord
from idemflow.client import RunStatus, submit
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores import MemoryStore
from idemflow.stores.base import Put, RowRef
from idemflow.worker import MemoryQueue, Worker
from tests.support.checkout_workflows import V1, checkout_v1

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture
def telemetry() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """The process-wide providers, set once as an application does (OpenTelemetry allows one)."""
    if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    telemetry_module.instrument()
    EXPORTER.clear()
    yield EXPORTER, READER
    telemetry_module.uninstrument()  # the rest of the suite runs untraced
    EXPORTER.clear()


def counters(reader: InMemoryMetricReader) -> dict[str, float]:
    found: dict[str, float] = {}
    data: Any = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if point.attributes.get("idemflow.workflow") == "checkout":
                        found[metric.name] = getattr(point, "value", None) or getattr(point, "count", 0)
    return found


def test_runs_steps_commits_and_queue_traffic_are_traced(telemetry: Any) -> None:
    exporter, reader = telemetry
    store, queue = MemoryStore(), MemoryQueue()
    before = counters(reader)
    order = {"space": "t-", "id": "o1", "amount": 10}
    submit(checkout_v1(order), request_id="o1", store=store, queue=queue)
    Worker(V1, store=store, queue=queue, wait=0.01, relay_every=None).run(idle_timeout=0.1)
    run(checkout_v1(order), request_id="o1", store=store)  # a duplicate of a finished request
    run(checkout_v1(order), request_id="o2-dup", store=store)
    run(checkout_v1(order), request_id="o2-dup", store=store)  # answered by its run record
    spans = exporter.get_finished_spans()
    names = [span.name for span in spans]
    for name in (
        "idemflow.run",
        "idemflow.step",
        "idemflow.commit",
        "idemflow.queue.send",
        "idemflow.queue.receive",
    ):
        assert name in names, names
    steps = [span for span in spans if span.name == "idemflow.step"]
    assert {span.attributes["idemflow.identity"] for span in steps} >= {"atomic debit", "atomic ship"}
    assert all(span.attributes["idemflow.workflow"] == "checkout" for span in steps)
    runs = [span for span in spans if span.name == "idemflow.run"]
    assert {span.attributes["idemflow.request_id"] for span in runs} == {"o1", "o2-dup"}
    step_ids = {span.context.span_id for span in steps}
    assert any(
        span.parent is not None and span.parent.span_id in step_ids
        for span in spans
        if span.name == "idemflow.commit"
    )
    after = counters(reader)
    committed = after["idemflow.steps.committed"] - before.get("idemflow.steps.committed", 0)
    assert committed == 4  # two steps for each of the two requests, once each
    assert after["idemflow.duplicates.answered"] > before.get("idemflow.duplicates.answered", 0)
    assert after["idemflow.queue.lag"] >= 1  # one continuation taken up


def test_branches_side_by_side_each_trace_their_step_under_the_run(telemetry: Any) -> None:
    """The three calls wait for each other, so their steps' spans are open at once: each is the
    run's child (not the previous branch's), and none is left current after the run."""
    exporter, _ = telemetry
    together = threading.Barrier(3, timeout=30)

    def quote(n: int) -> Any:
        return lambda key: together.wait() * 0 + n

    @workflow("traced-together")
    def traced(n: int) -> Any:
        return (yield all_of(*(effect(quote(k), name=f"q{k}") for k in range(n))))

    assert run(traced(3), request_id="t-1", store=MemoryStore()) == [0, 1, 2]
    spans = exporter.get_finished_spans()
    [ran] = [span for span in spans if span.name == "idemflow.run"]
    steps = [span for span in spans if span.name == "idemflow.step"]
    assert sorted(span.attributes["idemflow.identity"] for span in steps) == [
        "effect q0",
        "effect q1",
        "effect q2",
    ]
    assert all(span.parent is not None and span.parent.span_id == ran.context.span_id for span in steps)
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_finished_sweep_pass_sets_the_expiry_gauges(telemetry: Any) -> None:
    """As a pass of a store's sweeps ends, ``idemflow.expiry.backlog`` says how many expired rows
    it left (an old-format finished run record in its hold) and ``idemflow.expiry.late`` how late the rows
    it deleted were, under the store's name."""
    _, reader = telemetry
    now = [time.time() + 3600]
    store = MemoryStore(expire_every=None)
    # A finished run record written before incarnations (format 4), expired and in its hold.
    held: Any = RunRecord("fp", RunStatus.COMPLETED, result=1, finished_at=now[0] - 20.0).to_json()
    store.commit([Put(run_ref("wf", "g"), held, encode(held), expires_at=now[0] - 10.0)])
    store.schedule_expiry(0.0, clock=lambda: now[0])
    store.commit([Put(RowRef("items", "p", "mwf|gone|s1"), 1, "1", expires_at=now[0] - 30.0)])  # sweeps
    gauges: dict[str, float] = {}
    data: Any = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if point.attributes.get("idemflow.store") == "memory store":
                        gauges[metric.name] = point.value
    assert gauges[telemetry_module.EXPIRY_BACKLOG] == 1
    assert gauges[telemetry_module.EXPIRY_LATE] == pytest.approx(30.0)


def queue_gauges(reader: InMemoryMetricReader, queue: str) -> dict[str, float]:
    gauges: dict[str, float] = {}
    data: Any = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if point.attributes.get("idemflow.queue") == queue:
                        gauges[metric.name] = point.value
    return gauges


def test_a_watched_queue_reports_its_backlog_and_lag(telemetry: Any, tmp_path: Any) -> None:
    """``idemflow.queue.backlog`` and ``idemflow.queue.lag_seconds`` read the queue when collected."""
    from idemflow.worker import SqliteQueue

    _, reader = telemetry
    queue = SqliteQueue(tmp_path / "q.sqlite3", name="gauged")
    for n in range(3):
        queue.send(str(n))
    queue.send("later", delay=600)
    unwatch = telemetry_module.watch_queue(queue)
    try:
        gauges = queue_gauges(reader, "gauged")
        assert gauges[telemetry_module.QUEUE_BACKLOG] == 3  # the delayed one waits for nobody yet
        assert gauges[telemetry_module.QUEUE_LAG_SECONDS] >= 0
    finally:
        unwatch()
    assert queue_gauges(reader, "gauged") == {}
    queue.close()


def test_a_running_worker_watches_its_queue(telemetry: Any, tmp_path: Any) -> None:
    import threading

    from idemflow.worker import SqliteQueue

    _, reader = telemetry
    queue = SqliteQueue(tmp_path / "q.sqlite3", name="worked")
    queue.send("not yet", delay=600)
    worker = Worker([checkout_v1], store=MemoryStore(), queue=queue, relay_every=None)
    running = threading.Thread(target=worker.run)
    running.start()
    try:
        deadline = time.monotonic() + 60
        while not queue_gauges(reader, "worked") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queue_gauges(reader, "worked") == {telemetry_module.QUEUE_BACKLOG: 0}  # no lag: none visible
    finally:
        worker.stop()
        running.join()
    assert queue_gauges(reader, "worked") == {}
    queue.close()


def test_a_running_asyncio_worker_watches_its_queue(telemetry: Any, tmp_path: Any) -> None:
    """The collector runs on its own thread; the reading is awaited on the worker's loop."""
    import asyncio

    from idemflow.worker import AsyncWorker, SqliteQueue

    _, reader = telemetry
    queue = SqliteQueue(tmp_path / "q.sqlite3", name="looped")
    queue.send("now")
    queue.send("not yet", delay=600)

    async def scenario() -> tuple[dict[str, float], dict[str, float]]:
        worker = AsyncWorker(
            [checkout_v1], store=MemoryStore(), queue=queue, relay_every=None, max_deliveries=99
        )
        running = asyncio.create_task(worker.run())
        seen: dict[str, float] = {}
        for _ in range(600):
            seen = await asyncio.to_thread(queue_gauges, reader, "looped")
            if seen:
                break
            await asyncio.sleep(0.05)
        on_loop = queue_gauges(reader, "looped")  # the loop's own thread: no reading, no deadlock
        worker.stop()
        await running
        return seen, on_loop

    seen, on_loop = asyncio.run(scenario())
    assert telemetry_module.QUEUE_BACKLOG in seen and on_loop == {}
    queue.close()


def test_turning_telemetry_on_without_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry is loaded when telemetry is turned on, not when idemflow is imported: without
    it, instrument() says which extra to install and leaves telemetry off."""
    telemetry_module.uninstrument()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"idemflow\[otel\]"):
        telemetry_module.instrument()
    assert not telemetry_module.enabled()


def test_importing_idemflow_does_not_load_opentelemetry() -> None:
    """Every process (a worker, a CLI command) pays for what it imports."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, idemflow.cli, idemflow.worker; print('opentelemetry' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"
