"""Priority lanes: one queue per priority, drained highest first (``submit(priority=)``).

Why lanes and not a priority field: SQS and Azure Queue deliver in no order
at all, so the only priority they can honour is a separate queue per
priority that workers poll in order. The same lanes are used on SQLite and
memory, so a priority means one thing on every backend. A URL with
``?lanes=true`` opens three queues: ``<name>-high``, ``<name>`` itself
(``normal``, so the queue of a deployment without lanes is its normal lane
and nothing moves) and ``<name>-low``, each with its own dead-letter place.

:meth:`LanedQueue.receive` asks the lanes in order, each without waiting, and
returns the first lane's messages that has any: a worker never takes a lower
lane's message while a higher lane had one visible when it looked. When all
are empty it waits on the highest lane only, for at most ``wait``: a message
sent to a lower lane meanwhile is taken on the next receive. On SQS a
receive without waiting asks a sample of the servers, so it can miss a
message a higher lane holds: there a backlog's higher lane is drained first
in practice, not by a guarantee. A message's id carries its lane
(``high:<id>``), so acks, extensions, dead letters and redrives reach the
lane it came from.

>>> from idemflow.async_worklist.queues.memory import MemoryQueue
>>> queue = LanedQueue({lane: MemoryQueue() for lane in LANES})
>>> queue.lane("low").send("later")
>>> queue.lane("high").send("first")
>>> [m.body for m in queue.receive(max_messages=10)]
['first']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from idemflow.async_worklist.queues.async_adapters import AsyncQueue, ThreadedQueue, to_async_queue
from idemflow.async_worklist.queues.base import DeadLetter, Message, Queue, check_ids, check_limit
from idemflow.core.backlog import aqueue_stats, combined, queue_name, queue_stats
from idemflow.core.urls import Url
from idemflow.errors import ConfigurationError, InvalidValueError

if TYPE_CHECKING:
    from idemflow.core.backlog import QueueStats

LANES = ("high", "normal", "low")
"""The lanes, highest first; ``normal`` is the queue itself."""


NAMED_BY_PARAMETER = frozenset({"sqlite", "postgresql", "postgres"})
"""The schemes whose queue is named by a ``name`` parameter (the target is a file or a server)."""


def lane_url(url: Url, lane: str) -> Url:
    """The URL of ``lane`` of the queue ``url`` names: ``-<lane>`` appended to its name (its
    ``name`` parameter where the scheme has one, else its target); the normal lane is ``url``."""
    if lane == "normal":
        return url
    params = {key: value for key, value in url.params.items() if key != "lanes"}
    if url.scheme in NAMED_BY_PARAMETER:
        params["name"] = params.get("name", "default") + "-" + lane
        return dataclasses.replace(url, params=params)
    target = url.target + "-" + lane if url.target else url.target
    return dataclasses.replace(url, target=target, params=params)


def _split(message_id: str) -> tuple[str, str]:
    lane, sep, inner = message_id.partition(":")
    if not sep or lane not in LANES:
        raise InvalidValueError("message id", f"{message_id!r} names no lane (high:, normal:, low:)")
    return lane, inner


def lane_of(message: Message) -> str | None:
    """The lane a message was received from (None: normal, or a queue without lanes)."""
    lane, sep, _ = message.id.partition(":")
    return lane if sep and lane in LANES and lane != "normal" else None


def _tagged(lane: str, message: Message) -> Message:
    return dataclasses.replace(message, id=f"{lane}:{message.id}")


def _untagged(message: Message) -> tuple[str, Message]:
    lane, inner = _split(message.id)
    return lane, dataclasses.replace(message, id=inner)


class LanedQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.base.Queue` of three lanes (see the module).

    ``lanes`` maps each of :data:`LANES` to its queue. :meth:`send` sends to the normal lane;
    :meth:`lane` gives a lane's own queue to send to.
    """

    def __init__(self, lanes: Mapping[str, Queue]) -> None:
        if set(lanes) != set(LANES):
            raise ConfigurationError(f"a laned queue needs the lanes {', '.join(LANES)}, not {sorted(lanes)}")
        self.lanes = {lane: lanes[lane] for lane in LANES}
        normal = self.lanes["normal"]
        self.visibility_timeout = normal.visibility_timeout
        self.max_body_bytes = min(queue.max_body_bytes for queue in self.lanes.values())

    def __repr__(self) -> str:
        return f"LanedQueue({self.lanes['normal']!r})"

    def lane(self, lane: str | None) -> Queue:
        """The queue of ``lane`` (None: normal)."""
        return self.lanes["normal" if lane is None else lane]

    def send(self, body: str, *, delay: float = 0.0) -> None:
        self.lanes["normal"].send(body, delay=delay)

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        for lane, queue in self.lanes.items():
            got = queue.receive(max_messages=max_messages, visibility_timeout=visibility_timeout)
            if got:
                return [_tagged(lane, message) for message in got]
        if wait <= 0:
            return []
        got = self.lanes["high"].receive(
            max_messages=max_messages, wait=wait, visibility_timeout=visibility_timeout
        )
        return [_tagged("high", message) for message in got]

    def ack(self, message: Message) -> None:
        lane, inner = _untagged(message)
        self.lanes[lane].ack(inner)

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        lane, inner = _untagged(message)
        self.lanes[lane].nack(inner, delay=delay)

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        lane, inner = _untagged(message)
        return _tagged(lane, self.lanes[lane].extend(inner, visibility_timeout))

    def dead_letter(self, message: Message, reason: str) -> None:
        lane, inner = _untagged(message)
        self.lanes[lane].dead_letter(inner, reason)

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """Every lane's dead letters, highest lane first, each id naming its lane."""
        limit = check_limit(limit)
        found: list[DeadLetter] = []
        for lane, queue in self.lanes.items():
            left = None if limit is None else limit - len(found)
            if left is not None and left <= 0:
                break
            found += [dataclasses.replace(d, id=f"{lane}:{d.id}") for d in queue.list_dead_letters(left)]
        return found

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Each dead letter back onto its own lane (all lanes' if ``ids`` is None)."""
        if ids is None:
            return sum(queue.redrive() for queue in self.lanes.values())
        by_lane = _by_lane(ids)
        return sum(self.lanes[lane].redrive(wanted) for lane, wanted in by_lane.items())

    def approximate_size(self) -> int:
        return sum(queue.approximate_size() for queue in self.lanes.values())

    def stats(self) -> QueueStats:
        """The lanes' backlog as one queue's: a worker drains them together, so a scaler sizes
        workers by their sum and by the longest lag of any lane."""

        lanes = self.lanes.values()
        return combined(queue_name(self.lanes["normal"]), [queue_stats(queue) for queue in lanes])

    def close(self) -> None:
        for queue in self.lanes.values():
            queue.close()


def _by_lane(ids: Iterable[str]) -> dict[str, list[str]]:
    """The ids by lane; ids naming no lane are no dead letters of these lanes: skipped, as unknown
    ids are."""
    by_lane: dict[str, list[str]] = {}
    for item in check_ids(ids) or ():
        lane, sep, inner = item.partition(":")
        if sep and lane in LANES:
            by_lane.setdefault(lane, []).append(inner)
    return by_lane


class AsyncLanedQueue:
    """:class:`LanedQueue` on asynchronous queues (``asubmit``, :class:`~idemflow.worker.AsyncWorker`)."""

    def __init__(self, lanes: Mapping[str, AsyncQueue]) -> None:
        if set(lanes) != set(LANES):
            raise ConfigurationError(f"a laned queue needs the lanes {', '.join(LANES)}, not {sorted(lanes)}")
        self.lanes = {lane: lanes[lane] for lane in LANES}
        self.visibility_timeout = self.lanes["normal"].visibility_timeout
        self.max_body_bytes = min(queue.max_body_bytes for queue in self.lanes.values())

    def __repr__(self) -> str:
        return f"AsyncLanedQueue({self.lanes['normal']!r})"

    def lane(self, lane: str | None) -> AsyncQueue:
        """The queue of ``lane`` (None: normal)."""
        return self.lanes["normal" if lane is None else lane]

    async def send(self, body: str, *, delay: float = 0.0) -> None:
        await self.lanes["normal"].send(body, delay=delay)

    async def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        for lane, queue in self.lanes.items():
            got = await queue.receive(max_messages=max_messages, visibility_timeout=visibility_timeout)
            if got:
                return [_tagged(lane, message) for message in got]
        if wait <= 0:
            return []
        got = await self.lanes["high"].receive(
            max_messages=max_messages, wait=wait, visibility_timeout=visibility_timeout
        )
        return [_tagged("high", message) for message in got]

    async def ack(self, message: Message) -> None:
        lane, inner = _untagged(message)
        await self.lanes[lane].ack(inner)

    async def nack(self, message: Message, *, delay: float = 0.0) -> None:
        lane, inner = _untagged(message)
        await self.lanes[lane].nack(inner, delay=delay)

    async def extend(self, message: Message, visibility_timeout: float) -> Message:
        lane, inner = _untagged(message)
        return _tagged(lane, await self.lanes[lane].extend(inner, visibility_timeout))

    async def dead_letter(self, message: Message, reason: str) -> None:
        lane, inner = _untagged(message)
        await self.lanes[lane].dead_letter(inner, reason)

    async def approximate_size(self) -> int:
        return sum([await queue.approximate_size() for queue in self.lanes.values()])

    async def stats(self) -> QueueStats:
        """:meth:`LanedQueue.stats`, each lane read by :func:`~idemflow.worker.aqueue_stats`."""

        lanes = self.lanes.values()
        return combined(queue_name(self.lanes["normal"]), [await aqueue_stats(queue) for queue in lanes])

    async def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        limit = check_limit(limit)
        found: list[DeadLetter] = []
        for lane, queue in self.lanes.items():
            left = None if limit is None else limit - len(found)
            if left is not None and left <= 0:
                break
            found += [
                dataclasses.replace(d, id=f"{lane}:{d.id}") for d in await queue.list_dead_letters(left)
            ]
        return found

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        if ids is None:
            return sum([await queue.redrive() for queue in self.lanes.values()])
        return sum([await self.lanes[lane].redrive(wanted) for lane, wanted in _by_lane(ids).items()])

    async def close(self) -> None:
        for queue in self.lanes.values():
            await queue.close()


def in_lane(queue: Queue, lane: str | None) -> Queue:
    """Where a continuation of ``lane`` goes on ``queue``: that lane of a laned queue; on a queue
    without lanes, the queue itself (a relay or worker never loses a message for want of one)."""
    return queue.lane(lane) if isinstance(queue, LanedQueue) else queue


def in_async_lane(queue: AsyncQueue, lane: str | None) -> AsyncQueue:
    """:func:`in_lane` for an asynchronous queue (a blocking laned one on threads included)."""
    if isinstance(queue, AsyncLanedQueue):
        return queue.lane(lane)
    if isinstance(queue, ThreadedQueue) and isinstance(queue.queue, LanedQueue):
        return to_async_queue(queue.queue.lane(lane))
    return queue


def has_lanes(queue: object) -> bool:
    """Whether ``queue`` (blocking or asynchronous) has priority lanes."""
    inner: Any = queue.queue if isinstance(queue, ThreadedQueue) else queue
    return isinstance(inner, (LanedQueue, AsyncLanedQueue))


__all__ = [
    "LANES",
    "AsyncLanedQueue",
    "LanedQueue",
    "has_lanes",
    "in_async_lane",
    "in_lane",
    "lane_of",
    "lane_url",
]
