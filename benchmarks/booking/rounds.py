"""The two measurements of :mod:`benchmarks.booking`, one backend-round each, and the backends.

:func:`executions` submits requests of ``bench-book`` once or in three copies (two racing, one
after) while a :class:`~idemflow.worker.Worker` with two threads runs, and counts what
the worker did for them. :func:`confirm_latency` keeps a steady load of ``bench-book-confirm``
requests on the same kind of worker, confirms each once it waits at its ``receive`` and measures
from the call to ``send_message`` to the ``finished_at`` of the request's completion record.

The backends (:func:`open_backends`): SQLite (+ SqliteQueue), DynamoDB Local (+ SQS on a moto
server of its own, threaded as SQS serves concurrent calls: the suite's single-threaded moto
would hold every send behind a worker's long poll) and Azurite (Tables + Queue), all started
once for the whole run so the rounds can alternate between them.
"""

from __future__ import annotations

import contextlib
import heapq
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.booking.flows import CONFIRM, STARTS, TABLES, book, book_confirm
from idemflow.client import RunStatus, send_message, status, submit
from idemflow.running.runner import run_status
from idemflow.stores import SqliteStore, Store
from idemflow.worker import Queue, SqliteQueue, Worker, WorkerStats

KINDS = ("sqlite", "dynamodb-local", "azurite")
LABELS = {
    "sqlite": "SQLite + SqliteQueue",
    "dynamodb-local": "DynamoDB Local + SQS (moto)",
    "azurite": "Azure Tables + Queue (Azurite)",
}
VISIBILITY = 30.0
Factory = Callable[[str], tuple[Store, Queue]]
"""A fresh store (tables created) and queue under a tag."""


@contextlib.contextmanager
def open_backends(kinds: list[str]) -> Iterator[dict[str, Factory]]:
    """Start every backend of ``kinds`` for the block; a factory of stores and queues for each."""
    with contextlib.ExitStack() as stack:
        made: list[Any] = []
        factories: dict[str, Factory] = {}
        for kind in kinds:
            factories[kind] = _factory(kind, stack, made)
        stack.callback(_close_all, made)  # what the factories made: closed before the servers stop
        yield factories


def _close_all(made: list[Any]) -> None:
    for thing in reversed(made):
        with contextlib.suppress(Exception):
            thing.close()


def _factory(kind: str, stack: contextlib.ExitStack, made: list[Any]) -> Factory:
    if kind == "sqlite":
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idemflow-booking-")))

        def sqlite(tag: str) -> tuple[Store, Queue]:
            store = SqliteStore(folder / f"{tag}.sqlite3")
            queue = SqliteQueue(folder / f"{tag}-queue.sqlite3", visibility_timeout=VISIBILITY)
            return _made(made, store, queue)

        return sqlite
    if kind == "dynamodb-local":
        from benchmarks.timers.flows import threaded_moto
        from idemflow.stores.dynamodb import DynamoDBStore
        from idemflow.testing.servers import dynamodb_local_server
        from idemflow.worker import SqsQueue

        dynamo = stack.enter_context(dynamodb_local_server())
        sqs = stack.enter_context(threaded_moto())

        def dynamodb(tag: str) -> tuple[Store, Queue]:
            store = DynamoDBStore(endpoint_url=dynamo.endpoint, region_name=dynamo.region, prefix=tag)
            queue = SqsQueue(tag, endpoint_url=sqs, region_name=dynamo.region, visibility_timeout=VISIBILITY)
            return _made(made, store, queue)

        return dynamodb
    if kind == "azurite":
        from idemflow.stores.azure_tables import AzureTableStore
        from idemflow.testing.servers import azurite_server
        from idemflow.worker import AzureQueue

        azurite = stack.enter_context(azurite_server())

        def azure(tag: str) -> tuple[Store, Queue]:
            conn = azurite.connection_string
            store = AzureTableStore(connection_string=conn, prefix=tag)
            queue = AzureQueue(tag.lower(), connection_string=conn, visibility_timeout=VISIBILITY)
            return _made(made, store, queue)

        return azure
    raise ValueError(f"unknown backend {kind!r}; one of {KINDS}")


def _made(made: list[Any], store: Store, queue: Queue) -> tuple[Store, Queue]:
    store.create_tables(*TABLES)
    made += [store, queue]
    return store, queue


@contextlib.contextmanager
def working(store: Store, queue: Queue) -> Iterator[Worker]:
    """A worker with two threads on ``store`` and ``queue`` for the block (stopped after it)."""
    worker = Worker([book, book_confirm], store=store, queue=queue, concurrency=2, relay_every=5.0)
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join()


def executed(stats: WorkerStats) -> int:
    """Worker executions of a request, as the worker counts them: every message it handled that
    ran the request (completed, aborted, a duplicate, suspended, or a failed attempt retried)."""
    return stats.completed + stats.aborted + stats.duplicates + stats.suspended + stats.retried


def _until_final(store: Store, workflow: str, ids: list[str], deadline: float) -> list[str]:
    """Wait until every request finished (or ``deadline``); the ids of those that did not."""
    left = list(ids)
    while left and time.monotonic() < deadline:
        left = [rid for rid in left if not status(store, workflow, rid).status.final]
        if left:
            time.sleep(0.05)
    return left


@dataclass
class Executions:
    """One variant of one round: requests, worker executions (two ways), seconds."""

    requests: int
    executions: int
    starts: int
    unfinished: int
    seconds: float


def executions(make: Factory, tag: str, requests: int, copies: int) -> Executions:
    """Submit ``requests`` bookings, each ``copies`` times (the second racing the first in another
    thread, the third after both), to a running worker; count its executions once all finished."""
    store, queue = make(tag)
    ids = [f"{tag}-{n}" for n in range(requests)]
    STARTS.take()
    started = time.monotonic()
    with working(store, queue) as worker:
        for n, rid in enumerate(ids):
            m = book({"id": rid, "flight": f"f{n % 8}", "amount": 10 + n})

            def copy(rid: str = rid, m: Any = m) -> None:
                submit(m, request_id=rid, store=store, queue=queue)

            racer = threading.Thread(target=copy) if copies > 1 else None
            if racer is not None:
                racer.start()
            copy()
            if racer is not None:
                racer.join()
            for _ in range(copies - 2):
                copy()
        left = _until_final(store, book.name, ids, time.monotonic() + 120)
        time.sleep(0.3)  # a stray message a copy enqueued would be handled (and counted) by now
    seconds = time.monotonic() - started
    return Executions(requests, executed(worker.stats), STARTS.take(), len(left), seconds)


@dataclass
class Latency:
    """One backend-round of the steady load: each request's seconds from ``send_message`` to the
    ``finished_at`` of its completion record, and what the worker did."""

    seconds: list[float] = field(default_factory=list)
    requests: int = 0
    unfinished: int = 0
    executions: int = 0
    early: int = 0
    """Confirmations that had to wait: the request did not wait at its receive yet."""


def confirm_latency(make: Factory, tag: str, rate: float, window: float, delay: float = 0.3) -> Latency:
    """``rate`` requests per second for ``window`` seconds; each confirmed once it waits for it."""
    store, queue = make(tag)
    found = Latency()
    due: list[tuple[float, str]] = []
    sent: dict[str, float] = {}
    ids: list[str] = []
    lock, done = threading.Lock(), threading.Event()

    def confirmer() -> None:
        while not (done.is_set() and not due):
            with lock:
                ready = heapq.heappop(due) if due and due[0][0] <= time.monotonic() else None
            if ready is None:
                time.sleep(0.005)
                continue
            rid = ready[1]
            if CONFIRM not in (status(store, book_confirm.name, rid).waiting or ""):
                found.early += 1
                with lock:
                    heapq.heappush(due, (time.monotonic() + 0.05, rid))
                continue
            sent[rid] = time.time()
            send_message(store, book_confirm, rid, CONFIRM, "yes", key=f"{rid}.confirm", queue=queue)

    with working(store, queue) as worker:
        helper = threading.Thread(target=confirmer, name="bench-confirmer", daemon=True)
        helper.start()
        start, n = time.monotonic(), 0
        while time.monotonic() < start + window:
            time.sleep(max(0.0, start + n / rate - time.monotonic()))
            rid = f"{tag}-{n}"
            req = {"id": rid, "flight": f"f{n % 8}", "amount": 10 + n, "timeout": 600}
            submit(book_confirm(req), request_id=rid, store=store, queue=queue)
            ids.append(rid)
            with lock:
                heapq.heappush(due, (time.monotonic() + delay, rid))
            n += 1
        done.set()
        helper.join()
        left = _until_final(store, book_confirm.name, ids, time.monotonic() + 120)
    found.requests, found.unfinished, found.executions = len(ids), len(left), executed(worker.stats)
    for rid in ids:
        record = run_status(store, book_confirm.name, rid)
        if record is not None and record.status is RunStatus.COMPLETED and record.finished_at is not None:
            found.seconds.append(record.finished_at - sent[rid])
    return found
