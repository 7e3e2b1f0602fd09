"""Operators' dead-letter commands: list the messages no worker could read, and send them back.

Why functions beside the queue methods: every operator command is :mod:`idemflow.admin`'s, with
its asyncio twin, so a runbook or a console reaches dead letters the way it reaches requests.
"""

from __future__ import annotations

from collections.abc import Iterable

from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import DeadLetter, Queue


def dead_letters(queue: Queue, *, limit: int | None = None) -> list[DeadLetter]:
    """The dead letters of ``queue`` (at most ``limit``); listing leaves them where they are.

    >>> from idemflow.worker import MemoryQueue
    >>> queue = MemoryQueue()
    >>> queue.send("not a continuation")
    >>> [message] = queue.receive()
    >>> queue.dead_letter(message, "unreadable")
    >>> [(dead.body, dead.reason) for dead in dead_letters(queue)]
    [('not a continuation', 'unreadable')]
    >>> redrive(queue), queue.approximate_size()
    (1, 1)
    """
    return queue.list_dead_letters(limit)


async def adead_letters(queue: Queue | AsyncQueue, *, limit: int | None = None) -> list[DeadLetter]:
    """:func:`dead_letters`, awaited (a blocking queue runs on threads of its own)."""
    return await to_async_queue(queue).list_dead_letters(limit)


def redrive(queue: Queue, ids: Iterable[str] | None = None) -> int:
    """Send the dead letters ``ids`` (all if None) back onto ``queue``; how many moved (see
    :meth:`~idemflow.worker.Queue.redrive`: safe to run twice and beside workers)."""
    return queue.redrive(ids)


async def aredrive(queue: Queue | AsyncQueue, ids: Iterable[str] | None = None) -> int:
    """:func:`redrive`, awaited."""
    return await to_async_queue(queue).redrive(ids)


__all__ = ["adead_letters", "aredrive", "dead_letters", "redrive"]
