"""Asynchronous worklist: checkpoints, queues and background workers.

The paper's asynchronous variant: a workflow answers its client at a
``checkpoint()`` and background agents finish it from a reliable queue. The
same workflow code runs synchronously under :func:`idemflow.run`, where the
checkpoint is a no-op; both variants share the one step engine, so they
leave identical tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from idemflow._lazy import load_optional
from idemflow.async_worklist.aworker import AsyncWorker
from idemflow.async_worklist.deliver import asend_message, send_message
from idemflow.async_worklist.messages import MessageRejected
from idemflow.async_worklist.outbox import relay
from idemflow.async_worklist.queues import (
    _LAZY,
    AsyncQueue,
    DeadLetter,
    Message,
    MessageLostError,
    Queue,
    ThreadedQueue,
    open_async_queue,
    open_queue,
)
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.async_worklist.retry import cancel, retry
from idemflow.async_worklist.submit import (
    Pending,
    RequestStatus,
    astatus,
    asubmit,
    checkpoint,
    status,
    submit,
)
from idemflow.async_worklist.worker import Worker, WorkerStats
from idemflow.errors import MessageNotDelivered

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.async_worklist.queues.azure_queue_async import AsyncAzureQueue
    from idemflow.async_worklist.queues.sqs import SqsQueue
    from idemflow.async_worklist.queues.sqs_async import AsyncSqsQueue

__all__ = [
    "AsyncAzureQueue",
    "AsyncQueue",
    "AsyncSqsQueue",
    "AsyncWorker",
    "AzureQueue",
    "DeadLetter",
    "MemoryQueue",
    "Message",
    "MessageLostError",
    "MessageNotDelivered",
    "MessageRejected",
    "Pending",
    "Queue",
    "RequestStatus",
    "SqliteQueue",
    "SqsQueue",
    "ThreadedQueue",
    "Worker",
    "WorkerStats",
    "asend_message",
    "astatus",
    "asubmit",
    "cancel",
    "checkpoint",
    "open_async_queue",
    "open_queue",
    "relay",
    "retry",
    "send_message",
    "status",
    "submit",
]


def __getattr__(name: str) -> Any:
    return load_optional(__name__, name, _LAZY)
