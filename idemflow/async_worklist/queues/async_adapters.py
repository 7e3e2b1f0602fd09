"""Asynchronous queues: the :class:`AsyncQueue` contract for ``asubmit`` and the asyncio worker.

SQS and Azure Queue have queues on their SDKs' own asynchronous clients
(:mod:`~idemflow.async_worklist.queues.sqs_async`,
:mod:`~idemflow.async_worklist.queues.azure_queue_async`). Any other queue is a
blocking :class:`~idemflow.async_worklist.queues.base.Queue` whose calls run
on threads of its own (:class:`ThreadedQueue`): the loop never waits.
Operators' calls (``list_dead_letters``, ``redrive``) stay on blocking queues.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from idemflow.async_worklist.queues.base import DeadLetter, Message, Queue
from idemflow.core.backlog import QueueStats, queue_stats

T = TypeVar("T")


class AsyncQueue(Protocol):
    """The :class:`~idemflow.async_worklist.queues.base.Queue` contract with every call awaited."""

    visibility_timeout: float
    max_body_bytes: int

    async def send(self, body: str, *, delay: float = 0.0) -> None: ...

    async def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]: ...

    async def ack(self, message: Message) -> None: ...

    async def nack(self, message: Message, *, delay: float = 0.0) -> None: ...

    async def extend(self, message: Message, visibility_timeout: float) -> Message: ...

    async def dead_letter(self, message: Message, reason: str) -> None: ...

    async def approximate_size(self) -> int: ...

    async def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]: ...

    async def redrive(self, ids: Iterable[str] | None = None) -> int: ...

    async def close(self) -> None: ...


class ThreadedQueue:
    """A blocking queue whose every call runs on a thread pool of its own."""

    def __init__(self, queue: Queue, *, threads: int = 8) -> None:
        self.queue = queue
        self.visibility_timeout = queue.visibility_timeout
        self.max_body_bytes = queue.max_body_bytes
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="idemflow-queue")

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: function(*args, **kwargs))

    async def send(self, body: str, *, delay: float = 0.0) -> None:
        await self._call(self.queue.send, body, delay=delay)

    async def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        return await self._call(
            self.queue.receive, max_messages=max_messages, wait=wait, visibility_timeout=visibility_timeout
        )

    async def ack(self, message: Message) -> None:
        await self._call(self.queue.ack, message)

    async def nack(self, message: Message, *, delay: float = 0.0) -> None:
        await self._call(self.queue.nack, message, delay=delay)

    async def extend(self, message: Message, visibility_timeout: float) -> Message:
        return await self._call(self.queue.extend, message, visibility_timeout)

    async def dead_letter(self, message: Message, reason: str) -> None:
        await self._call(self.queue.dead_letter, message, reason)

    async def approximate_size(self) -> int:
        return await self._call(self.queue.approximate_size)

    async def stats(self) -> QueueStats:
        """The wrapped queue's :func:`~idemflow.worker.queue_stats`, read on a thread."""
        return await self._call(queue_stats, self.queue)

    async def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        return await self._call(self.queue.list_dead_letters, limit)

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        return await self._call(self.queue.redrive, None if ids is None else list(ids))

    async def close(self) -> None:
        await self._call(self.queue.close)
        self._pool.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"ThreadedQueue({self.queue!r})"


_ADAPTED: weakref.WeakKeyDictionary[Queue, AsyncQueue] = weakref.WeakKeyDictionary()


def is_async_queue(queue: object) -> bool:
    """Is ``queue`` an :class:`AsyncQueue` (its send a coroutine function)?"""
    return inspect.iscoroutinefunction(getattr(type(queue), "send", None))


def to_async_queue(queue: Queue | AsyncQueue) -> AsyncQueue:
    """``queue`` as an :class:`AsyncQueue`: itself if it is one, else on threads (once per queue)."""
    if is_async_queue(queue):
        return queue  # type: ignore[return-value]
    assert isinstance(queue, Queue)
    adapted = _ADAPTED.get(queue)
    if adapted is None:
        adapted = _ADAPTED[queue] = ThreadedQueue(queue)
    return adapted
