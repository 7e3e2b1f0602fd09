"""What a request published, as an operator sees it: its events with their values, its streams
with their length and whether they are closed (``runs show``, :func:`idemflow.admin.show`, the
console's request page).

They live beside the request's run record, so one scan of that partition finds them all; no
workflow code is needed to read them.

>>> from idemflow import close_stream, run, set_event, workflow, write_stream
>>> from idemflow.stores import MemoryStore
>>> @workflow("doc-publish")
... def publish(n):
...     yield set_event("stage", "counting")
...     for i in range(n):
...         yield write_stream("counts", i)
...     yield close_stream("counts")
>>> store = MemoryStore()
>>> run(publish(2), request_id="p-1", store=store)
>>> events, streams = read_published(store, "doc-publish", "p-1")
>>> [(e.key, e.value) for e in events], [(s.key, s.length, s.closed) for s in streams]
([('stage', 'counting')], [('counts', 2, True)])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from idemflow.core.published import Event, StreamEnd
from idemflow.core.requests import Scan, Steps
from idemflow.engine.drive import drive
from idemflow.keys import RUNS_TABLE, STREAM_END, event_prefix, parse_published_key, stream_prefix
from idemflow.serialization import JSON
from idemflow.stores.base import Row, Store

__all__ = ["EventView", "StreamView", "published_rows", "published_views", "read_published"]


@dataclass(frozen=True, slots=True)
class EventView:
    """One event of a request: its key, the value it holds now, the step that set it and when."""

    key: str
    value: JSON
    step: int
    at: float

    def to_json(self) -> dict[str, JSON]:
        return {"key": self.key, "value": self.value, "step": self.step, "at": self.at}


@dataclass(frozen=True, slots=True)
class StreamView:
    """One stream of a request: its key, how many values it holds, and whether ``close_stream``
    ended it (with the step that did)."""

    key: str
    length: int
    closed: bool
    closed_at_step: int | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "key": self.key,
            "length": self.length,
            "closed": self.closed,
            "closed_at_step": self.closed_at_step,
        }


def published_views(
    workflow: str, request_id: str, rows: Iterable[tuple[str, str, Row]]
) -> tuple[list[EventView], list[StreamView]]:
    """The events and streams of a request among ``rows`` (a scan of its partition), by key."""
    events: list[EventView] = []
    lengths: dict[str, int] = {}
    ends: dict[str, StreamEnd] = {}
    mine = (event_prefix(workflow, request_id), stream_prefix(workflow, request_id))
    for _, row_key, row in rows:
        if not row_key.startswith(mine):
            continue
        parsed = parse_published_key(row_key)
        if parsed is None:
            continue
        _, _, key, part = parsed
        if part is None:
            event = Event.from_json(row.value)
            events.append(EventView(key, event.value, event.step, event.at))
        elif part == STREAM_END:
            ends[key] = StreamEnd.from_json(row.value)
        else:
            lengths[key] = lengths.get(key, 0) + 1
    streams = [
        StreamView(
            key,
            lengths.get(key, 0),
            key in ends,
            ends[key].step if key in ends else None,
        )
        for key in sorted({*lengths, *ends})
    ]
    return sorted(events, key=lambda event: event.key), streams


def published_rows(workflow: str, request_id: str) -> Steps[tuple[list[EventView], list[StreamView]]]:
    """:func:`published_views` of the request's partition, read in one scan (both APIs answer it)."""
    rows: list[tuple[str, str, Row]] = yield Scan(RUNS_TABLE, request_id)
    return published_views(workflow, request_id, rows)


def read_published(store: Store, workflow: str, request_id: str) -> tuple[list[EventView], list[StreamView]]:
    """:func:`published_rows` on a blocking store (the console's page of a request it cannot replay)."""
    return drive(published_rows(workflow, request_id), store)
