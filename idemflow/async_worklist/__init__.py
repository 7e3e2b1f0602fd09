"""Asynchronous worklist: checkpoints, queues and background workers (the implementation).

The paper's asynchronous variant: a workflow answers its client at a
``checkpoint()`` and background agents finish it from a reliable queue. The
same workflow code runs synchronously under :func:`idemflow.run`, where the
checkpoint is a no-op; both variants share the one step engine, so they
leave identical tables.

Its names are public by role since 1.0: ``checkpoint`` in :mod:`idemflow`, submitting and
status in :mod:`idemflow.client`, workers and queues in :mod:`idemflow.worker`, retry, cancel
and relay in :mod:`idemflow.admin`. The old names resolve here for one minor release, with a
:class:`DeprecationWarning` naming the new place.
"""

from __future__ import annotations

from idemflow.core.moved import Moves as _Moves
from idemflow.core.moved import resolve as _resolve

_MOVES: _Moves = {
    "AsyncAzureQueue": "idemflow.worker",
    "AsyncQueue": "idemflow.worker",
    "AsyncSqsQueue": "idemflow.worker",
    "AsyncWorker": "idemflow.worker",
    "AzureQueue": "idemflow.worker",
    "DeadLetter": "idemflow.worker",
    "MemoryQueue": "idemflow.worker",
    "Message": "idemflow.worker:QueueMessage",
    "MessageLostError": "idemflow",
    "MessageNotDelivered": "idemflow:MessageNotDeliveredError",
    "MessageRejected": "idemflow:MessageRejectedError",
    "Pending": "idemflow.client",
    "Queue": "idemflow.worker",
    "RequestStatus": "idemflow.client",
    "SqliteQueue": "idemflow.worker",
    "SqsQueue": "idemflow.worker",
    "ThreadedQueue": "idemflow.worker",
    "Worker": "idemflow.worker",
    "WorkerStats": "idemflow.worker",
    "asend_message": "idemflow.client",
    "astatus": "idemflow.client",
    "asubmit": "idemflow.client",
    "cancel": "idemflow.admin",
    "checkpoint": "idemflow",
    "open_async_queue": "idemflow.worker",
    "open_queue": "idemflow.worker",
    "relay": "idemflow.admin",
    "retry": "idemflow.admin",
    "send_message": "idemflow.client",
    "status": "idemflow.client",
    "submit": "idemflow.client",
}


def __getattr__(name: str) -> object:
    return _resolve(__name__, name, _MOVES)
