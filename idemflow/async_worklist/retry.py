"""Hand a failed, cancelled or stuck submitted request back to the workers (``idemflow retry``,
``idemflow resume``), or stop one at its next step (``idemflow cancel``).

A request ends ``failed`` when a step kept raising; after a fix is deployed,
``retry`` puts it back to ``running`` and sends a pointer, and a worker
resumes it where it stopped (committed steps replay from their memos). A
request ``running`` with nothing queued for it (its message was purged or
dead-lettered by hand) is resumed the same way. Safe to run twice and while
workers run: a second pointer is a harmless duplicate.

>>> from idemflow import MemoryStore
>>> from idemflow.async_worklist import MemoryQueue
>>> retry(MemoryStore(), MemoryQueue(), "checkout", "o-1")
Traceback (most recent call last):
...
idemflow.errors.InvalidInputError: no request 'o-1' of workflow 'checkout' is known to this store
"""

from __future__ import annotations

from idemflow import telemetry
from idemflow.async_worklist import _runs
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.submit import resolve_signing_key
from idemflow.operations import known_run, stored_arguments
from idemflow.records import RunStatus
from idemflow.stores.base import Store


def retry(
    store: Store, queue: Queue, workflow: str, request_id: str, *, signing_key: bytes | str | None = None
) -> RunStatus:
    """Resume an unfinished request through the workers; the status it had (final ones are left alone)."""
    record = known_run(store, workflow, request_id)
    if record.status.final:
        return record.status
    stored_arguments(record, request_id)  # the workers resume from it
    if record.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        _runs.reopen(store, workflow, request_id)
    body = encode_pointer(Pointer(workflow, record.version, request_id), resolve_signing_key(signing_key))
    with telemetry.span("idemflow.queue.send", workflow=workflow, request_id=request_id):
        queue.send(body)
    return record.status


def cancel(store: Store, workflow: str, request_id: str, *, reason: str = "cancelled") -> RunStatus:
    """Stop an unfinished submitted request: workers run none of its steps until :func:`retry`
    resumes it; nothing is undone (:func:`idemflow.operations.abort` undoes). The status it had.

    A worker already inside the request finishes the step it runs and stops at its next wait (a
    timer, a message, a child, a retry's backoff); if it completes the request first, the request
    ends ``completed``. Safe to run twice.
    """
    record = known_run(store, workflow, request_id)
    if record.status.final or record.status is RunStatus.CANCELLED:
        return record.status
    stored_arguments(record, request_id)  # only a submitted request can be resumed by workers
    _runs.cancel(store, workflow, request_id, reason)
    return record.status
