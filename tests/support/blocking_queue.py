"""A test-only blocking facade over an :class:`~idemflow.async_worklist.queues.async_adapters.AsyncQueue`.

:class:`BlockingQueue` runs the asynchronous queue on a private event loop in a
background thread and presents the blocking
:class:`~idemflow.async_worklist.queues.base.Queue` methods, so the queue
contract (``tests/conformance/test_queue_contract.py``) runs unchanged against
an asynchronous queue. ``list_dead_letters``, ``dead_letters`` and ``redrive``
(operators' calls, blocking only) go to a companion blocking queue on the same queue.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from idemflow.async_worklist.queues.base import Message
from idemflow.worker import AsyncQueue, DeadLetter, Queue

T = TypeVar("T")


class BlockingQueue(Queue):
    """``queue`` (asynchronous) behind blocking methods; dead-letter tools delegated to ``companion``.

    Any number of threads may call it at once: their calls run side by side on the one loop.
    :meth:`close` closes ``queue``, stops the loop, then closes ``companion``.
    ``consume`` is :meth:`Queue.consume` on the facade's :meth:`receive`.
    """

    def __init__(self, queue: AsyncQueue, companion: Queue) -> None:
        self.queue = queue
        self.companion = companion
        self.visibility_timeout = queue.visibility_timeout
        self.max_body_bytes = queue.max_body_bytes
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="blocking-queue", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def name(self) -> str:
        """The companion's queue name (the contract opens second handles by name)."""
        return str(getattr(self.companion, "name"))  # noqa: B009 - not part of the protocol

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def send(self, body: str, *, delay: float = 0.0) -> None:
        self._run(self.queue.send(body, delay=delay))

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        return self._run(
            self.queue.receive(max_messages=max_messages, wait=wait, visibility_timeout=visibility_timeout)
        )

    def ack(self, message: Message) -> None:
        self._run(self.queue.ack(message))

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        self._run(self.queue.nack(message, delay=delay))

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        return self._run(self.queue.extend(message, visibility_timeout))

    def dead_letter(self, message: Message, reason: str) -> None:
        self._run(self.queue.dead_letter(message, reason))

    def approximate_size(self) -> int:
        return self._run(self.queue.approximate_size())

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        return self.companion.list_dead_letters(limit)

    def dead_letters(self) -> list[tuple[str, str]]:
        return self.companion.dead_letters()

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        return self.companion.redrive(ids)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.queue.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            self.companion.close()

    def __repr__(self) -> str:
        return f"BlockingQueue({self.queue!r})"
