"""An in-memory queue: a real backend for tests and docs, not a mock.

It honours visibility timeouts, delays, receipts and dead letters exactly as
the durable queues do, under one :class:`threading.Condition`, so workers and
the conformance suite run against it unchanged. Time comes from an injectable
clock, so tests move time forward instead of sleeping.

>>> from idemflow.async_worklist.queues import MemoryQueue
>>> now = [0.0]
>>> queue = MemoryQueue(visibility_timeout=10, clock=lambda: now[0])
>>> queue.send("job")
>>> first = queue.receive()[0]
>>> queue.receive()            # hidden while the first receiver works on it
[]
>>> now[0] += 11               # ... until its visibility expires
>>> queue.receive()[0].deliveries
2
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from idemflow.async_worklist.queues.base import (
    DEFAULT_MAX_BODY_BYTES,
    DeadLetter,
    Message,
    Queue,
    check_body,
    check_ids,
    check_limit,
    check_max_messages,
    check_reason,
    check_seconds,
)
from idemflow.core.backlog import QueueStats, oldest_lag
from idemflow.errors import MessageLostError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Held:
    body: str
    visible_at: float
    deliveries: int = 0
    receipt: str | None = None
    generation: int = 0
    """Bumped on every visibility change; heap entries of older generations are stale."""


class MemoryQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` held in this process, thread-safe.

    ``clock`` measures visibility and delays (``time.monotonic`` by default;
    tests pass a fake one). ``receive(wait=...)`` blocks on a condition
    variable for real time, woken by every send, nack and redrive. A dead
    letter's ``dead_at`` is wall time (``time.time``), not ``clock``.

    >>> queue = MemoryQueue()
    >>> queue.send('{"n": 1}')
    >>> queue.approximate_size()
    1
    """

    def __init__(
        self,
        *,
        visibility_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.visibility_timeout = check_seconds(visibility_timeout, "visibility_timeout", positive=True)
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        self._cond = threading.Condition()
        self._messages: dict[str, _Held] = {}
        self._ready: list[tuple[float, int, str, int]] = []  # (visible_at, seq, id, generation)
        self._seq = itertools.count()
        self._dead: dict[str, DeadLetter] = {}  # by id, oldest first

    def send(self, body: str, *, delay: float = 0.0) -> None:
        check_body(body, self.max_body_bytes, "MemoryQueue")
        delay = check_seconds(delay, "delay")
        with self._cond:
            self._enqueue(body, delay)
            self._cond.notify()

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        check_max_messages(max_messages)
        hide = self._timeout(visibility_timeout)
        deadline = time.monotonic() + check_seconds(wait, "wait")
        with self._cond:
            while True:
                claimed = self._claim(max_messages, hide)
                remaining = deadline - time.monotonic()
                if claimed or remaining <= 0:
                    return claimed
                if self._ready:  # wake when the next hidden message would become visible
                    remaining = min(remaining, max(self._ready[0][0] - self._clock(), 0.001))
                self._cond.wait(remaining)

    def ack(self, message: Message) -> None:
        with self._cond:
            if self._owned(message) is None:
                log.debug("ack of message %s ignored: already deleted or received elsewhere", message.id)
                return
            del self._messages[message.id]

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        delay = check_seconds(delay, "delay")
        with self._cond:
            held = self._owned(message)
            if held is None:
                log.debug("nack of message %s ignored: already deleted or received elsewhere", message.id)
                return
            held.visible_at = self._clock() + delay
            held.receipt = None
            self._schedule(message.id, held)
            self._cond.notify()

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        hide = check_seconds(visibility_timeout, "visibility_timeout", positive=True)
        with self._cond:
            held = self._owned(message)
            if held is None:
                raise MessageLostError(
                    f"cannot extend message {message.id}: it was deleted or received again elsewhere",
                    backend="memory",
                )
            held.visible_at = self._clock() + hide
            self._schedule(message.id, held)
            return message

    def dead_letter(self, message: Message, reason: str) -> None:
        reason = check_reason(reason)
        with self._cond:
            held = self._owned(message)
            if held is None:
                log.debug("dead_letter of message %s ignored: deleted or received elsewhere", message.id)
                return
            del self._messages[message.id]
            self._dead[message.id] = DeadLetter(message.id, held.body, reason, time.time())

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        limit = check_limit(limit)
        with self._cond:
            return list(itertools.islice(self._dead.values(), limit))

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        wanted = check_ids(ids)
        with self._cond:
            chosen = list(self._dead) if wanted is None else [i for i in self._dead if i in wanted]
            for dead_id in chosen:
                self._enqueue(self._dead.pop(dead_id).body, 0.0)
            self._cond.notify_all()
            return len(chosen)

    def approximate_size(self) -> int:
        with self._cond:
            return len(self._messages)

    def stats(self) -> QueueStats:
        """Exact counts; ``lag`` since the oldest visible message became visible."""
        with self._cond:
            now = self._clock()
            ready = [held.visible_at for held in self._messages.values() if held.visible_at <= now]
            held = sum(1 for h in self._messages.values() if h.visible_at > now and h.receipt is not None)
            delayed = len(self._messages) - len(ready) - held
            lag = oldest_lag(min(ready, default=None), now)
            return QueueStats("memory", len(ready), delayed, held, len(self._messages), lag, True, "exact")

    def close(self) -> None:
        """Nothing to release; the messages stay for other users of this object."""

    def _timeout(self, visibility_timeout: float | None) -> float:
        if visibility_timeout is None:
            return self.visibility_timeout
        return check_seconds(visibility_timeout, "visibility_timeout", positive=True)

    def _enqueue(self, body: str, delay: float) -> None:
        message_id = uuid.uuid4().hex
        held = _Held(body, self._clock() + delay)
        self._messages[message_id] = held
        self._schedule(message_id, held)

    def _schedule(self, message_id: str, held: _Held) -> None:
        held.generation += 1
        if len(self._ready) > 2 * len(self._messages) + 64:  # drop entries of acked/rescheduled messages
            self._ready = [e for e in self._ready if self._current(e)]
            heapq.heapify(self._ready)
        heapq.heappush(self._ready, (held.visible_at, next(self._seq), message_id, held.generation))

    def _claim(self, limit: int, hide: float) -> list[Message]:
        now = self._clock()
        claimed: list[Message] = []
        while self._ready and len(claimed) < limit and self._ready[0][0] <= now:
            _, _, message_id, generation = heapq.heappop(self._ready)
            if not self._current((0.0, 0, message_id, generation)):
                continue  # deleted, or rescheduled since this entry was pushed
            held = self._messages[message_id]
            held.deliveries += 1
            held.receipt = uuid.uuid4().hex
            held.visible_at = now + hide
            self._schedule(message_id, held)
            claimed.append(Message(message_id, held.body, held.deliveries, held.receipt))
        return claimed

    def _current(self, entry: tuple[float, int, str, int]) -> bool:
        held = self._messages.get(entry[2])
        return held is not None and held.generation == entry[3]

    def _owned(self, message: Message) -> _Held | None:
        held = self._messages.get(message.id)
        if held is None or held.receipt is None or held.receipt != message.receipt:
            return None
        return held
