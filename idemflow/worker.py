"""Workers and the queues they drain: :class:`Worker` on threads, :class:`AsyncWorker` on an
event loop, the queues a URL opens (``open_queue``/``open_async_queue``), and the passes that
fire schedules beside them (:func:`fire_schedules`, :class:`Scheduler` and their asyncio twins).

The cloud queues import their SDKs on first use, so ``import idemflow.worker`` needs neither
boto3 nor the Azure SDK; using one without its extra installed says which extra to install.

>>> queue = open_queue("memory:")
>>> type(queue).__name__
'MemoryQueue'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from idemflow.async_worklist._asyncio_worker import AsyncWorker
from idemflow.async_worklist._delivery import WorkerStats
from idemflow.async_worklist.pool.policy import BacklogPolicy, PoolView, Scaling, ScalingPolicy
from idemflow.async_worklist.queues import (
    _LAZY,
    AsyncQueue,
    DeadLetter,
    Queue,
    ThreadedQueue,
    open_async_queue,
    open_queue,
)
from idemflow.async_worklist.queues.base import Message as QueueMessage
from idemflow.async_worklist.queues.lanes import AsyncLanedQueue, LanedQueue
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.async_worklist.worker import Worker
from idemflow.core.backlog import QueueStats, aqueue_stats, queue_stats
from idemflow.core.lazy import load_optional as _load_optional
from idemflow.scheduling.firing import Fired, PassReport, afire_schedules, fire_schedules
from idemflow.scheduling.scheduler import AsyncScheduler, Scheduler

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.async_worklist.queues.azure_queue_async import AsyncAzureQueue
    from idemflow.async_worklist.queues.postgres import PostgresQueue
    from idemflow.async_worklist.queues.sqs import SqsQueue
    from idemflow.async_worklist.queues.sqs_async import AsyncSqsQueue

__all__ = [
    "AsyncAzureQueue",
    "AsyncLanedQueue",
    "AsyncQueue",
    "AsyncScheduler",
    "AsyncSqsQueue",
    "AsyncWorker",
    "AzureQueue",
    "BacklogPolicy",
    "DeadLetter",
    "Fired",
    "LanedQueue",
    "MemoryQueue",
    "PassReport",
    "PoolView",
    "PostgresQueue",
    "Queue",
    "QueueMessage",
    "QueueStats",
    "Scaling",
    "ScalingPolicy",
    "Scheduler",
    "SqliteQueue",
    "SqsQueue",
    "ThreadedQueue",
    "Worker",
    "WorkerStats",
    "afire_schedules",
    "aqueue_stats",
    "fire_schedules",
    "open_async_queue",
    "open_queue",
    "queue_stats",
]


def __getattr__(name: str) -> Any:
    # The cloud queues need optional extras: resolve them lazily.
    return _load_optional(__name__, name, _LAZY)
