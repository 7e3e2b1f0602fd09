"""The worklist's answers to the engine's queue requests (:class:`Send`, :class:`Settle`).

Why here and not in the drivers: the drivers (:mod:`idemflow.engine.drive`,
:mod:`idemflow.engine.drive_asyncio`)
answer what a store, the clock and an effect answer, so the synchronous core exists without a
queue; ``submit``, workers, the relay and deliveries hand the drivers these answers for theirs.
"""

from __future__ import annotations

from typing import Any

from idemflow.async_worklist.queues.async_adapters import AsyncQueue
from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.queues.lanes import in_async_lane, in_lane
from idemflow.core.requests import Send, Settle
from idemflow.engine.drive import Answers
from idemflow.engine.drive_asyncio import AsyncAnswers


def on_queue(queue: Queue | None) -> Answers | None:
    """The answers to ``Send`` and ``Settle`` on a blocking ``queue`` (None: no queue to ask)."""
    if queue is None:
        return None

    def answer(request: object) -> Any:
        match request:
            case Send(body, delay, lane):
                return in_lane(queue, lane).send(body, delay=delay)
            case Settle(holder, action, options):
                with holder.lock:
                    if not holder.lost:
                        getattr(queue, action)(holder.message, **options)
                return None
        raise TypeError(f"not an engine request: {request!r}")

    return answer


def on_async_queue(queue: AsyncQueue | None) -> AsyncAnswers | None:
    """:func:`on_queue` for an asyncio ``queue``."""
    if queue is None:
        return None

    async def answer(request: object) -> Any:
        match request:
            case Send(body, delay, lane):
                return await in_async_lane(queue, lane).send(body, delay=delay)
            case Settle(holder, action, options):
                async with holder.alock:
                    if not holder.lost:
                        await getattr(queue, action)(holder.message, **options)
                return None
        raise TypeError(f"not an engine request: {request!r}")

    return answer


__all__ = ["on_async_queue", "on_queue"]
