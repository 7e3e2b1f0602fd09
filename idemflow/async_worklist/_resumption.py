"""Hand a failed, cancelled or stuck submitted request back to the workers (``idemflow retry``,
``idemflow resume``); cancelling one is :mod:`idemflow.async_worklist._cancellation`.

A delayed request (``submit(delay=)``) that ``retry`` resumes runs at once: its start time
is cleared. A request ends ``failed`` when a step kept raising; after a fix is deployed,
``retry`` puts it back to ``running`` and sends a pointer, and a worker
resumes it where it stopped (committed steps replay from their memos). A
request ``running`` with nothing queued for it (its message was purged or
dead-lettered by hand) is resumed the same way. Safe to run twice and while
workers run: a second pointer is a harmless duplicate. ``aretry`` takes the
same steps on the event loop (:mod:`idemflow.engine.drive_asyncio`), on asynchronous stores and queues.

>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> retry(MemoryStore(), MemoryQueue(), "checkout", "o-1")
Traceback (most recent call last):
...
idemflow.errors.InvalidInputError: no request 'o-1' of workflow 'checkout' is known to this store
"""

from __future__ import annotations

from idemflow import telemetry
from idemflow.async_worklist import _runs
from idemflow.async_worklist._queue_answers import on_async_queue, on_queue
from idemflow.async_worklist.aborts import stored_arguments
from idemflow.async_worklist.messages import Pointer, encode_pointer, resolve_signing_key
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import DEFAULT_POLICY
from idemflow.core.requests import Send, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import InvalidInputError
from idemflow.records import RunRecord, RunStatus
from idemflow.running.runner import status_steps
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Store


def retry(
    store: Store, queue: Queue, workflow: str, request_id: str, *, signing_key: bytes | str | None = None
) -> RunStatus:
    """Resume an unfinished request through the workers; the status it had (final ones are left alone)."""
    return drive(retry_steps(workflow, request_id, resolve_signing_key(signing_key)), store, on_queue(queue))


async def aretry(
    store: Store | AsyncStore,
    queue: Queue | AsyncQueue,
    workflow: str,
    request_id: str,
    *,
    signing_key: bytes | str | None = None,
) -> RunStatus:
    """:func:`retry`, awaitable: the same reads, rewrite and pointer on the event loop.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> from idemflow.worker import MemoryQueue
    >>> asyncio.run(aretry(MemoryStore(), MemoryQueue(), "checkout", "o-1"))
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: no request 'o-1' of workflow 'checkout' is known to this store
    """
    steps = retry_steps(workflow, request_id, resolve_signing_key(signing_key))
    return await adrive(steps, to_async(store), on_async_queue(to_async_queue(queue)))


def known_steps(workflow: str, request_id: str) -> Steps[RunRecord]:
    """The run record of a request, or :class:`InvalidInputError` if this store has none."""
    record = yield from status_steps(workflow, request_id, DEFAULT_POLICY)
    if record is None:
        raise InvalidInputError(f"no request {request_id!r} of workflow {workflow!r} is known to this store")
    return record


def retry_steps(workflow: str, request_id: str, key: bytes | None) -> Steps[RunStatus]:
    """:func:`retry` as the engine's computation, for both APIs."""
    record = yield from known_steps(workflow, request_id)
    if record.status.final:
        return record.status
    stored_arguments(record, request_id)  # the workers resume from it
    if record.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        yield from _runs.reopen_steps(workflow, request_id)
    if record.not_before is not None:  # a delayed request: the operator wants it run now
        yield from _runs.start_now_steps(workflow, request_id)
    body = encode_pointer(Pointer(workflow, record.version, request_id), key)
    with telemetry.span("idemflow.queue.send", workflow=workflow, request_id=request_id):
        yield Send(body, 0.0, record.lane)
    return record.status
