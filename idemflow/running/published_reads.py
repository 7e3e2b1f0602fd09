"""Reading what a running request publishes, from outside it: its events and its streams.

A read is not a step: nothing is written, and it may run in any process while the request runs
in another. The readers wait for what is not there yet without a busy loop: no store notifies a
reader, so each looks again after 10 ms, then twice as long each time up to ``poll`` seconds
(:func:`~idemflow.core.policy.polling`), until it is there or ``timeout`` passed.

- :func:`get_event` (:func:`aget_event`): the event's value once the request set it; ``default``
  (None) if ``timeout`` passed first, as DBOS's ``get_event`` answers.
- :func:`read_stream` (:func:`aread_stream`): each value of a stream once, in order, from
  ``offset``, until the stream is over: closed by ``close_stream``, or its request finished
  (completed or aborted). An ``offset`` past the end of a stream that is over is refused with
  :class:`~idemflow.errors.StreamClosedError`; ``timeout`` is how long to wait for each next
  value before :class:`~idemflow.errors.StreamTimeoutError` (the offset it names is where to
  read again from).

Both the blocking readers and their asyncio twins run the same computations (the engine's
drivers answer their reads), so they answer alike on every store.

>>> from idemflow import run, set_event, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("doc-status")
... def ship(order):
...     yield set_event("status", "packed")
...     yield set_event("status", "shipped")
>>> store = MemoryStore()
>>> run(ship("o-1"), request_id="o-1", store=store)
>>> get_event(store, "doc-status", "o-1", "status")
'shipped'
>>> get_event(store, "doc-status", "o-2", "status", timeout=0) is None  # never set
True
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from idemflow.core.policy import DEFAULT_POLICY, NOT_YET, polling, resent, retried
from idemflow.core.published import Event, StreamEnd, StreamItem
from idemflow.core.requests import Read, ReadMany, Scan, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import InvalidInputError, StreamClosedError, StreamTimeoutError
from idemflow.keys import (
    RUNS_TABLE,
    check_duration,
    check_published_key,
    check_request_id,
    check_workflow_name,
    event_key,
    stream_end_key,
    stream_key,
    stream_prefix,
)
from idemflow.records import RunRecord, run_ref
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Row, RowRef, Store

__all__ = ["aget_event", "aread_stream", "get_event", "read_stream"]

DEFAULT_TIMEOUT = 60.0
"""Seconds a reader waits by default (DBOS's ``get_event`` waits as long)."""
DEFAULT_POLL = 1.0
"""The longest pause, in seconds, between two looks of a waiting reader."""
PAGE = 12
"""Most values of a stream one look reads: with the stream's end and the run record, 14 rows of
one partition, which one Azure query returns (DynamoDB's ``BatchGetItem`` takes 100)."""
RECORD_EVERY = 1.0
"""Seconds between two looks at the run record of a request whose stream has nothing new (a
request that finished without closing its stream ends it)."""


def get_event(
    store: Store,
    workflow: str,
    request_id: str,
    key: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    default: Any = None,
    poll: float = DEFAULT_POLL,
) -> Any:
    """The value of the event ``key`` of the request ``request_id`` of ``workflow``, waiting up to
    ``timeout`` seconds (None: as long as it takes) for the request to set it; ``default`` if
    it did not by then.

    One point read when the event is there; a reader that waits reads again with a growing
    pause, up to ``poll`` seconds.
    """
    return drive(_event(workflow, request_id, key, timeout, default, poll), store)


async def aget_event(
    store: Store | AsyncStore,
    workflow: str,
    request_id: str,
    key: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    default: Any = None,
    poll: float = DEFAULT_POLL,
) -> Any:
    """:func:`get_event`, awaitable: its pauses are ``asyncio.sleep``, so no thread is held.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(aget_event(MemoryStore(), "doc-status", "o-9", "status", timeout=0, default="none yet"))
    'none yet'
    """
    computation = _event(workflow, request_id, key, timeout, default, poll)
    return await adrive(computation, to_async(store))


def read_stream(
    store: Store,
    workflow: str,
    request_id: str,
    key: str,
    *,
    offset: int = 0,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll: float = DEFAULT_POLL,
) -> Iterator[Any]:
    """Each value of the stream ``key`` of the request ``request_id`` of ``workflow``, once and in
    order, from ``offset`` until the stream is over (closed, or its request finished).

    Waits up to ``timeout`` seconds (None: as long as it takes) for each next value, then raises
    :class:`~idemflow.errors.StreamTimeoutError`; an ``offset`` past the end of a stream that is
    over raises :class:`~idemflow.errors.StreamClosedError`. Arguments are checked when
    iteration starts. Each look reads up to :data:`PAGE` values in one call.
    """
    reading = _Reading.of(workflow, request_id, key, offset, timeout, poll)
    while True:
        values = drive(reading.next_values(), store)
        if values is None:
            return
        yield from values


async def aread_stream(
    store: Store | AsyncStore,
    workflow: str,
    request_id: str,
    key: str,
    *,
    offset: int = 0,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll: float = DEFAULT_POLL,
) -> AsyncIterator[Any]:
    """:func:`read_stream`, as an asynchronous iterator (``async for``): its pauses are awaited.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> async def read_all():
    ...     try:
    ...         return [value async for value in aread_stream(MemoryStore(), "w", "r", "log", timeout=0)]
    ...     except StreamTimeoutError as waited:
    ...         return f"nothing yet at offset {waited.offset}"
    >>> asyncio.run(read_all())
    'nothing yet at offset 0'
    """
    reading = _Reading.of(workflow, request_id, key, offset, timeout, poll)
    target = to_async(store)
    while True:
        values = await adrive(reading.next_values(), target)
        if values is None:
            return
        for value in values:
            yield value


def _checked(workflow: str, request_id: str, key: str, what: str, timeout: float | None, poll: float) -> None:
    check_workflow_name(workflow)
    check_request_id(request_id)
    check_published_key(key, what)
    if timeout is not None:
        check_duration(timeout, "timeout", zero=True)
    check_duration(poll, "poll")


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _read(request: Read | ReadMany | Scan) -> Steps[Any]:
    """One read, resent on transient errors (as every read outside a step)."""
    return resent(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), request)


def _event(
    workflow: str, request_id: str, key: str, timeout: float | None, default: Any, poll: float
) -> Steps[Any]:
    _checked(workflow, request_id, key, "event key", timeout, poll)
    ref = RowRef(RUNS_TABLE, request_id, event_key(workflow, request_id, key))

    def look() -> Steps[Any]:
        row: Row | None = yield from _read(Read(ref))
        return NOT_YET if row is None else Event.from_json(row.value).value

    found = yield from retried(polling(_deadline(timeout), poll), look)
    return default if found is NOT_YET else found


_OVER: Any = object()
"""A look's answer once the stream is over."""


@dataclass(slots=True)
class _Reading:
    """Where one reader of one stream is: the next offset, how many values a look asks for, when
    it last looked at the run record."""

    workflow: str
    request_id: str
    key: str
    offset: int
    timeout: float | None
    poll: float
    page: int = PAGE
    record_seen: float = -math.inf

    @classmethod
    def of(
        cls, workflow: str, request_id: str, key: str, offset: int, timeout: float | None, poll: float
    ) -> _Reading:
        _checked(workflow, request_id, key, "stream key", timeout, poll)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"a stream's offset is a whole number >= 0, not {offset!r}")
        return cls(workflow, request_id, key, offset, timeout, poll)

    def value_ref(self, offset: int) -> RowRef:
        return RowRef(
            RUNS_TABLE, self.request_id, stream_key(self.workflow, self.request_id, self.key, offset)
        )

    def next_values(self) -> Steps[list[Any] | None]:
        """The next values (at least one), or None once the stream is over."""
        found = yield from retried(polling(_deadline(self.timeout), self.poll), self._look)
        if found is NOT_YET:
            assert self.timeout is not None  # only a deadline ends the polling
            raise StreamTimeoutError(self.workflow, self.request_id, self.key, self.offset, self.timeout)
        return None if found is _OVER else found

    def _look(self) -> Steps[Any]:
        """One look: the values from the offset, :data:`_OVER`, or :data:`NOT_YET`."""
        end_ref = RowRef(
            RUNS_TABLE, self.request_id, stream_end_key(self.workflow, self.request_id, self.key)
        )
        record_due = time.monotonic() - self.record_seen >= RECORD_EVERY
        refs = [end_ref, *(self.value_ref(self.offset + n) for n in range(self.page))]
        if record_due:
            refs.append(run_ref(self.workflow, self.request_id))
        rows: list[Row | None] = yield from _read(ReadMany(refs))
        values: list[Any] = []
        for row in rows[1 : 1 + self.page]:
            if row is None:
                break
            values.append(StreamItem.from_json(row.value).value)
        if values:  # a full page: the next look asks for a full page again; else for what came
            self.page = PAGE if len(values) == self.page else min(PAGE, 2 * len(values))
            self.offset += len(values)
            return values
        self.page = 1  # waiting: one value at a time until they come
        end = rows[0]
        if end is not None:  # values commit before their stream's end: every one is there
            length = StreamEnd.from_json(end.value).length
            if self.offset > length:
                raise StreamClosedError(self.workflow, self.request_id, self.key, length, self.offset)
            return _OVER if self.offset == length else NOT_YET  # a read before its value's commit
        if not record_due:
            return NOT_YET
        self.record_seen = time.monotonic()
        record = rows[-1]
        if record is None or not RunRecord.from_json(record.value).status.final:
            return NOT_YET
        return (yield from self._after_the_end())

    def _after_the_end(self) -> Steps[Any]:
        """The request finished without closing the stream: what is written is all there is."""
        at = self.value_ref(self.offset)
        before = [self.value_ref(self.offset - 1)] if self.offset else []
        rows: list[Row | None] = yield from _read(ReadMany([at, *before]))
        found = rows[0]
        if found is not None:  # written before the outcome: the first look missed it
            self.offset += 1
            return [StreamItem.from_json(found.value).value]
        if before and rows[1] is None:  # past its last value: how many it has
            scanned = yield from _read(Scan(RUNS_TABLE, self.request_id))
            prefix = stream_prefix(self.workflow, self.request_id, self.key)
            length = sum(1 for _, key, _ in scanned if key.startswith(prefix) and key[-1].isdigit())
            raise StreamClosedError(self.workflow, self.request_id, self.key, length, self.offset)
        return _OVER
