"""What a running request publishes for the world outside: events and streams.

Nothing of a request can be read while it runs but its status line, unless it publishes it.
Each of these is a step like ``atomic``: yielded by a workflow, numbered, memoized, and the row it
publishes is written in the same atomic commit as its memo, so a replay, a crash after the commit
or a duplicate worker writes it once however often the step runs.

- ``yield set_event(key, value)``: the request's value under ``key``, until a later
  ``set_event`` of the same key replaces it (last write wins). Read from outside with
  :func:`idemflow.client.get_event`, which waits for it to be set.
- ``yield write_stream(key, value)``: appends ``value`` to the stream ``key`` (offsets 0, 1, 2
  ...); the step's value is the offset it took. ``yield close_stream(key)`` ends it; writing to
  it afterwards raises :class:`~idemflow.errors.StreamClosedError` in the workflow, before
  anything is written. Read from outside with :func:`idemflow.client.read_stream`, which yields
  each value once, in order, until the stream is closed or the request finished.

A key is text of 1 to 100 characters; a value is anything a step may return (JSON and the
types of :mod:`idemflow.codecs`). A bad key or a value the codecs refuse is refused when the
step is made, before anything is written; a value over the store's limit for one row
(:class:`~idemflow.errors.LimitExceededError`) when the step runs, before its commit.

>>> from idemflow import run, workflow
>>> from idemflow.client import get_event, read_stream
>>> from idemflow.stores import MemoryStore
>>> @workflow("count-doc")
... def count(n):
...     for i in range(n):
...         yield write_stream("numbers", i * i)
...     yield close_stream("numbers")
...     yield set_event("done", True)
>>> store = MemoryStore()
>>> run(count(3), request_id="c-1", store=store)
>>> list(read_stream(store, "count-doc", "c-1", "numbers")), get_event(store, "count-doc", "c-1", "done")
([0, 1, 4], True)
"""

from __future__ import annotations

from typing import Any

from idemflow.engine.monad import CloseStream, Idem, SetEvent, WriteStream
from idemflow.keys import check_published_key
from idemflow.serialization import encode

__all__ = ["close_stream", "set_event", "write_stream"]


def set_event(key: str, value: Any) -> Idem[None]:
    """Publish ``value`` as this request's event ``key``; a later ``set_event(key, ...)`` replaces it.

    Why a step: the value is written once, in the commit of its memo, so a reader never sees it
    go back to an earlier value when a crashed request is run again.

    >>> set_event("status", "shipped").node.key
    'status'
    """
    check_published_key(key, "event key")
    text = encode(value, f"value of event {key!r}")  # refused before any write
    return Idem(SetEvent(key, value, text))


def write_stream(key: str, value: Any) -> Idem[int]:
    """Append ``value`` to this request's stream ``key``; the offset it takes (0, 1, 2 ...).

    Why a step: each value is written once, at one offset, however often the request is run
    again or raced, so a reader resuming from an offset never sees a value twice.

    >>> write_stream("tokens", "Hello").node.value
    'Hello'
    """
    check_published_key(key, "stream key")
    text = encode(value, f"value written to stream {key!r}")  # refused before any write
    return Idem(WriteStream(key, value, text))


def close_stream(key: str) -> Idem[None]:
    """End this request's stream ``key``: its readers stop after its last value.

    A request that finishes (completed or aborted) ends its open streams all the same; closing
    one tells readers sooner, while the request goes on.

    >>> close_stream("tokens").node.key
    'tokens'
    """
    return Idem(CloseStream(check_published_key(key, "stream key")))
