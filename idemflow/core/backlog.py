"""How much work waits in a queue and for how long: the numbers a scaler follows.

Why one record for four backends: the worker pool (``idemflow worker
--processes``), ``idemflow queue stats``, the OpenTelemetry gauges and an
operator's own autoscaler all read the same :class:`QueueStats`, and each
backend fills what it can tell. SQLite and memory count exactly; SQS's three
``ApproximateNumberOf*`` attributes are eventually consistent (seconds behind);
Azure reports one approximate total and, by peeking (which changes nothing),
up to 32 visible messages and the insertion time of the oldest of them. A
number a backend cannot tell is None, never a guess dressed as a count.

>>> from idemflow.worker import MemoryQueue, queue_stats
>>> queue = MemoryQueue()
>>> queue.send("a"); queue.send("b", delay=60)
>>> stats = queue_stats(queue)
>>> stats.visible, stats.delayed, stats.in_flight, stats.total
(1, 1, 0, 2)
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["QueueStats", "aqueue_stats", "combined", "queue_stats"]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One reading of a queue's backlog.

    ``visible`` messages wait for a worker now; ``delayed`` become visible
    later (a ``submit(delay=...)``, a retry's backoff); ``in_flight`` are held
    by a worker (received, not yet acked). ``total`` is all three, the one
    number every backend knows. ``lag`` is how many seconds the oldest
    visible message has waited for a worker (SQLite and memory: since it
    became visible; Azure: since it was sent, a peek's ``inserted_on``;
    SQS: None, see ``lag_source``). ``exact`` says whether the counts are
    exact (SQLite, memory) or the service's approximation.

    >>> QueueStats("jobs", visible=3, delayed=0, in_flight=2, total=5, lag=1.5).backlog
    3
    """

    queue: str
    visible: int | None
    delayed: int | None
    in_flight: int | None
    total: int
    lag: float | None = None
    exact: bool = False
    lag_source: str = "none"
    """Where ``lag`` came from: ``exact`` (SQLite, memory), ``peek`` (Azure); or why it is None:
    ``cloudwatch`` (SQS: only CloudWatch's ``ApproximateAgeOfOldestMessage`` has it), ``none``
    (a queue without a ``stats`` method)."""

    @property
    def backlog(self) -> int:
        """Messages waiting for a worker: ``visible`` where known, else ``total`` (an upper bound).

        >>> QueueStats("jobs", visible=None, delayed=None, in_flight=None, total=40).backlog
        40
        """
        return self.total if self.visible is None else self.visible

    @property
    def work(self) -> int:
        """Messages waiting or being worked on: what threads are needed for now.

        >>> QueueStats("jobs", visible=3, delayed=9, in_flight=2, total=14).work
        5
        """
        if self.visible is None or self.in_flight is None:
            return self.total  # Azure: delayed and held are one number; count them all
        return self.visible + self.in_flight

    def to_json(self) -> dict[str, Any]:
        """The reading as ``idemflow queue stats --json`` prints it."""
        return {
            "queue": self.queue,
            "visible": self.visible,
            "delayed": self.delayed,
            "in_flight": self.in_flight,
            "total": self.total,
            "lag_seconds": None if self.lag is None else round(self.lag, 3),
            "lag_source": self.lag_source,
            "exact": self.exact,
        }


def queue_stats(queue: Any) -> QueueStats:
    """Read ``queue``'s backlog: its own ``stats()`` where it has one, else its approximate size.

    Every idemflow queue has ``stats()``; any other object with
    ``approximate_size()`` gets a reading with only ``total`` filled.

    >>> from idemflow.worker import MemoryQueue
    >>> queue_stats(MemoryQueue()).total
    0
    """
    own = getattr(queue, "stats", None)
    if callable(own):
        stats = own()
        assert isinstance(stats, QueueStats)
        return stats
    return QueueStats(queue_name(queue), None, None, None, int(queue.approximate_size()))


async def aqueue_stats(queue: Any) -> QueueStats:
    """:func:`queue_stats` of an asyncio queue (or of a blocking one, read on a thread).

    >>> import asyncio
    >>> from idemflow.worker import MemoryQueue
    >>> asyncio.run(aqueue_stats(MemoryQueue())).total
    0
    """
    own = getattr(queue, "stats", None)
    if own is None or not asyncio.iscoroutinefunction(own):
        return await asyncio.to_thread(queue_stats, queue)
    stats = await own()
    assert isinstance(stats, QueueStats)
    return stats


def combined(name: str, readings: list[QueueStats]) -> QueueStats:
    """One reading of several queues a worker drains as one (a laned queue's lanes): counts
    summed (None if any lane cannot tell), the longest lag, exact only if every lane is.

    >>> combined("jobs", [QueueStats("jobs-high", 1, 0, 0, 1, 2.0, True, "exact"),
    ...                   QueueStats("jobs", 4, 1, 2, 7, 9.5, True, "exact")]).to_json()["lag_seconds"]
    9.5
    """

    def total(field: str) -> int | None:
        values = [getattr(reading, field) for reading in readings]
        return None if None in values else sum(values)

    lags = [reading.lag for reading in readings if reading.lag is not None]
    sources = {reading.lag_source for reading in readings}
    return QueueStats(
        name,
        total("visible"),
        total("delayed"),
        total("in_flight"),
        sum(reading.total for reading in readings),
        max(lags) if lags else None,
        all(reading.exact for reading in readings),
        sources.pop() if len(sources) == 1 else "mixed",
    )


def oldest_lag(oldest: float | None, now: float) -> float | None:
    """Seconds since ``oldest`` (None if nothing waits), never negative (clocks of two hosts)."""
    if oldest is None or math.isnan(oldest):
        return None
    return max(now - oldest, 0.0)


def queue_name(queue: Any) -> str:
    """The queue's own name (a wrapped blocking queue's, for a threaded one), else its class name."""
    for candidate in (queue, getattr(queue, "queue", None)):
        name = getattr(candidate, "name", None)
        if isinstance(name, str):
            return name
    return type(queue).__name__
