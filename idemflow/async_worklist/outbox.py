"""The transactional outbox: continuations that are due reach the queue, whatever crashed.

``submit`` commits an outbox entry with the request's claim (in the same
atomic write as its first step where the backend can span partitions), then
sends a pointer at the checkpoint and deletes the entry off its critical
path. If the process dies, or the queue is down, between that commit and the
send, the entry stays, and a relay (every :class:`~idemflow.worker.Worker`
runs one) sends it once its due time passed. A pointer sent twice is harmless:
workers replay from the memos.

A relay pass reads the :data:`~idemflow.keys.OUTBOX_SHARDS` outbox partitions
(one query each; they hold only entries not yet sent); for each due entry it
reads the request's run record (one read), sends a pointer and deletes the
entry, conditioned on the version it read. An entry with no run record is
dropped: where a claim cannot share a commit with its outbox entry (Azure
Tables) the entry is written first, and a submitter that died between the
two committed nothing.

>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> relay(MemoryStore(), MemoryQueue())
0
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from idemflow import telemetry
from idemflow.async_worklist._queue_answers import on_async_queue, on_queue
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import DEFAULT_POLICY, resent
from idemflow.core.requests import Commit, Read, Scan, Send, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.keys import OUTBOX, RUNS_TABLE, outbox_key, outbox_partitions, parse_outbox_key
from idemflow.records import OutboxEntry, RunRecord, run_ref
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Delete, Row, RowRef, Store

log = logging.getLogger("idemflow.relay")

DEFAULT_GRACE = 30.0
"""Seconds after its claim before a relay sends a continuation ``submit`` did not send itself:
long enough that a live ``submit`` normally sends first, short enough that a crashed one is
picked up soon."""


def relay(
    store: Store,
    queue: Queue,
    *,
    signing_key: bytes | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Send every due continuation still in the outbox; the number sent."""
    return drive(relay_steps(signing_key, clock), store, on_queue(queue))


async def arelay(
    store: Store | AsyncStore,
    queue: Queue | AsyncQueue,
    *,
    signing_key: bytes | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """:func:`relay`, awaitable: the same scan, sends and deletes on the event loop.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> from idemflow.worker import MemoryQueue
    >>> asyncio.run(arelay(MemoryStore(), MemoryQueue()))
    0
    """
    return await adrive(
        relay_steps(signing_key, clock), to_async(store), on_async_queue(to_async_queue(queue))
    )


def relay_steps(signing_key: bytes | None, clock: Callable[[], float]) -> Steps[int]:
    """:func:`relay` as the engine's computation, for the blocking and the asyncio worker."""
    now = clock()
    sent = 0
    for partition in outbox_partitions():
        for _, key, row in (yield Scan(RUNS_TABLE, partition)):
            if not key.startswith(OUTBOX):
                continue  # a request whose id names this partition keeps its own rows here
            try:
                entry = OutboxEntry.from_json(row.value)
            except (KeyError, TypeError, ValueError):
                workflow, request_id = parse_outbox_key(key) or (None, None)
                unread = {"workflow": workflow, "version": None, "request_id": request_id}
                telemetry.log_event(log, logging.WARNING, "outbox-entry-unreadable", **unread, key=key)
                continue
            if entry.due > now:
                continue
            fields = {"workflow": entry.workflow, "version": entry.version, "request_id": entry.request_id}
            resending = DEFAULT_POLICY.resending(DEFAULT_POLICY.until())
            claimed = yield from resent(resending, Read(run_ref(entry.workflow, entry.request_id)))
            if claimed is not None and key != outbox_key(entry.workflow, entry.request_id):
                claimed = _wakeable(claimed)  # a wake-up: only for a request workers finish
            if claimed is not None:  # else its submitter died before the claim: nothing to finish
                body = encode_pointer(Pointer(entry.workflow, entry.version, entry.request_id), signing_key)
                lane = RunRecord.from_json(claimed.value).lane  # the request's priority
                with telemetry.span(
                    "idemflow.queue.send", workflow=entry.workflow, request_id=entry.request_id
                ):
                    yield Send(body, 0.0, lane)
                sent += 1
            delete = Delete(RowRef(RUNS_TABLE, partition, key), expect=row.version)
            yield from resent(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), Commit([delete]))
            wake = "wake-up" if key != outbox_key(entry.workflow, entry.request_id) else "continuation"
            telemetry.log_event(log, logging.INFO, "relayed" if claimed else "dropped", **fields, entry=wake)
    return sent


def _wakeable(row: Row) -> Row | None:
    """The run record, if a wake-up of its request is for the workers: it was submitted and is not
    finished (a request ``run`` runs polls for its child or message itself)."""
    record = RunRecord.from_json(row.value)
    return row if record.input is not None and not record.status.final else None
