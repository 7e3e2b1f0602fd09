"""Timers, children and messages through real queues and worker threads, in real time.

The conformance suite (``tests/conformance/test_coordination.py``) hands messages to workers
one by one under a test clock; here a :class:`~idemflow.worker.Worker` consumes a
SQLite queue, SQS on moto and Azure Queue on Azurite, with the delays those queues apply
themselves (whole seconds on SQS and Azure). The sleeps are short; what is asserted is the
promise (never early, each effect once, the right results), never a duration.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from idemflow import Tx, atomic, now, receive, send, sleep, start, wait, workflow
from idemflow.client import RunStatus, astatus, asubmit, status, submit
from idemflow.stores import SqliteStore, Store
from idemflow.worker import AsyncWorker, Queue, SqliteQueue, Worker
from tests.conformance.test_workflow_contract import new_space
from tests.support.selection import kinds
from tests.support.workflows import TEST_TABLES


def bump(space: str, key: str) -> Any:
    def body(tx: Tx) -> None:
        tx.increment(key)

    return atomic("tablea", space, body, name="bump " + key)


@workflow("q-napper")
def napper(space: str, seconds: float) -> Generator[Any, Any, dict[str, float]]:
    began = yield now()
    yield sleep(seconds)
    woke = yield now()
    yield bump(space, "woke")
    return {"began": began, "woke": woke}


@workflow("q-kid")
def kid(space: str) -> Generator[Any, Any, str]:
    yield bump(space, "kid")
    return "kid done"


@workflow("q-parent")
def parent(space: str) -> Generator[Any, Any, Any]:
    child = yield start(kid(space), request_id=space + "kid")
    result = yield wait(child)
    yield send(receiver, space + "inbox", "note", result)
    return result


@workflow("q-receiver")
def receiver(space: str) -> Generator[Any, Any, Any]:
    note = yield receive("note", timeout=120)
    yield bump(space, "received")
    return note


FLOWS = [napper, kid, parent, receiver]


@pytest.fixture(params=kinds("sqlite", "sqs", "azure"))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Queue]]:
    kind = str(request.param)
    name = f"q{new_space().replace('-', '')}"
    store: Store
    queue: Queue
    if kind == "sqlite":
        store, queue = SqliteStore(tmp_path / "store.sqlite3"), SqliteQueue(tmp_path / "queue.sqlite3")
    elif kind == "sqs":
        from idemflow.stores.dynamodb import DynamoDBStore
        from idemflow.worker import SqsQueue

        moto = request.getfixturevalue("moto")
        store = DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix=name)
        queue = SqsQueue(name, endpoint_url=moto.endpoint, region_name=moto.region, visibility_timeout=10)
    else:
        from idemflow.stores.azure_tables import AzureTableStore
        from idemflow.worker import AzureQueue

        conn = request.getfixturevalue("azurite").connection_string
        store = AzureTableStore(connection_string=conn, prefix=name)
        queue = AzureQueue(name, connection_string=conn, visibility_timeout=10)
    store.create_tables(*TEST_TABLES)
    yield store, queue
    queue.close()
    store.close()


def finish(store: Store, queue: Queue, done: list[tuple[str, str]], within: float = 60.0) -> Worker:
    """Run a worker until every request in ``done`` finished (or ``within`` seconds passed)."""
    worker = Worker(FLOWS, store=store, queue=queue, concurrency=2, wait=0.2, relay_every=0.5)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            if all(status(store, flow, rid).status.final for flow, rid in done):
                return worker
            time.sleep(0.1)
        raise AssertionError({rid: status(store, flow, rid) for flow, rid in done})
    finally:
        worker.stop()
        runner.join()


def requests(space: str) -> list[tuple[Any, str]]:
    return [
        (receiver(space), space + "inbox"),
        (napper(space, 1.5), space + "nap"),
        (parent(space), space + "parent"),
    ]


def done(space: str) -> list[tuple[str, str]]:
    return [("q-napper", space + "nap"), ("q-parent", space + "parent"), ("q-receiver", space + "inbox")]


async def afinish(store: Any, queue: Any, space: str, within: float = 60.0) -> AsyncWorker:
    """:func:`finish` with the asyncio API: ``asubmit``, an :class:`AsyncWorker`, the SDKs' async clients."""
    for _ in range(2):
        for m, rid in requests(space):
            await asubmit(m, request_id=rid, store=store, queue=queue)
    worker = AsyncWorker(FLOWS, store=store, queue=queue, concurrency=4, wait=0.2, relay_every=0.5)
    task = asyncio.create_task(worker.run())
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            states = [(await astatus(store, flow, rid)).status for flow, rid in done(space)]
            if all(state.final for state in states):
                return worker
            await asyncio.sleep(0.1)
        raise AssertionError("not finished")
    finally:
        worker.stop()
        await task


def asynchronous(store: Store, queue: Queue) -> tuple[Any, Any]:
    """The asyncio twins of a blocking store and queue (SQLite stays blocking, on threads)."""
    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.stores.azure_tables_async import AsyncAzureTableStore
    from idemflow.stores.dynamodb import DynamoDBStore
    from idemflow.stores.dynamodb_async import AsyncDynamoDBStore
    from idemflow.worker import AsyncAzureQueue, AsyncSqsQueue, AzureQueue, SqsQueue

    if isinstance(store, DynamoDBStore) and isinstance(queue, SqsQueue):
        return AsyncDynamoDBStore.twin_of(store), AsyncSqsQueue.twin_of(queue)
    if isinstance(store, AzureTableStore) and isinstance(queue, AzureQueue):
        return AsyncAzureTableStore.twin_of(store), AsyncAzureQueue.twin_of(queue)
    return store, queue


@pytest.mark.parametrize("api", ["sync", "async"])
def test_timers_children_and_messages_through_a_real_queue(backend: tuple[Store, Queue], api: str) -> None:
    store, queue = backend
    space = new_space()
    if api == "async":
        astore, aqueue = asynchronous(store, queue)

        async def main() -> AsyncWorker:
            try:
                return await afinish(astore, aqueue, space)
            finally:
                for closing in (astore, aqueue):
                    if closing is not store and closing is not queue:
                        await closing.close()

        worker: Worker | AsyncWorker = asyncio.run(main())
    else:
        for _ in range(2):  # every request submitted twice, as clients retry
            for m, rid in requests(space):
                submit(m, request_id=rid, store=store, queue=queue)
        worker = finish(store, queue, done(space))
    nap = status(store, "q-napper", space + "nap").result
    assert nap["woke"] >= nap["began"] + 1.5  # never early (the queue's own delay, not a poll)
    assert status(store, "q-parent", space + "parent").result == "kid done"
    assert status(store, "q-kid", space + "kid").status is RunStatus.COMPLETED
    assert status(store, "q-receiver", space + "inbox").result == "kid done"
    counts = {key: value for (_, _, key), value in _rows(store, space).items()}
    assert counts == {"woke": 1, "kid": 1, "received": 1}
    assert worker.stats.dead_lettered == 0


def _rows(store: Store, space: str) -> dict[tuple[str, str, str], Any]:
    from tests.support.workflows import rows_of

    return rows_of(store, space)
