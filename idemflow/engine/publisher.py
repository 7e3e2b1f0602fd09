"""The steps that publish what a request's readers see while it runs: events and streams (the
engine's part).

:mod:`idemflow.running.publishing` builds these steps; each is a step like any other, its memo
beside the run record. The row it publishes (an event, a stream's value, a stream's end) lives
beside the run record too, so it goes in the same commit as the step's memo, in one partition:
one atomic write on every store, cross-partition commits or not. A replay, a crash after that
commit or a racing execution meets the memo, and nothing is written again.

An event is overwritten by a later ``set_event`` of its key: steps commit in order, so the row
holds the last one committed. A stream's value goes at the next offset: the number of values
this request wrote to it before, which the part counts as the workflow's earlier writes pass
(replayed, each gives back the offset its memo holds), so no write reads anything first. The
count is the part's only state, rebuilt from the start whenever the execution restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from idemflow.core.ops import Op, Put
from idemflow.core.published import end_text, event_text, item_text
from idemflow.core.requests import Steps
from idemflow.engine.attempt import Extra, constant
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.monad import CloseStream, Publishing, SetEvent, WriteStream
from idemflow.engine.stepper import Stepper
from idemflow.errors import LimitExceededError, StreamClosedError
from idemflow.keys import RUNS_TABLE, event_key, stream_end_key, stream_key
from idemflow.serialization import JSON
from idemflow.stores.base import RowRef


def _writing(op: Op) -> Extra:
    """The step's commit also writes ``op`` (recomputed never: the row is the same each attempt)."""

    def extra() -> Steps[list[Op]]:
        return [op]
        yield  # a generator: the engine's extra operations are computations

    return extra


class Publisher:
    """Events and streams of this execution's request, each write one step."""

    __slots__ = ("_cursor", "_given", "_stepper", "_streams")

    def __init__(self, given: Given, cursor: Cursor, stepper: Stepper) -> None:
        self._given = given
        self._cursor = cursor
        self._stepper = stepper
        self._streams: dict[str, tuple[int, bool]] = {}
        """Per stream key: how many values the workflow wrote to it so far, and whether it closed it."""

    def restart(self) -> None:
        """The workflow starts over: its writes are counted again as they replay."""
        self._streams.clear()

    def publish(self, node: Publishing) -> Steps[Any]:
        """The step's value: None for an event and a stream's end, the offset of a stream's value."""
        match node:
            case SetEvent(key, value, text):
                return self._set_event(key, value, text)
            case WriteStream(key, value, text):
                return self._write(key, value, text)
            case CloseStream(key):
                return self._close(key)
            case _:
                assert_never(node)

    def _set_event(self, key: str, value: Any, text: str) -> Steps[None]:
        given = self._given
        step = self._cursor.advance()
        at = given.clock()
        ref = RowRef(RUNS_TABLE, given.request_id, event_key(given.workflow, given.request_id, key))
        row: JSON = {"v": value, "n": step, "at": at}
        put = self._put(ref, row, event_text(text, step, at), lambda: f"event {key!r}")
        yield from self._stepper.forward(
            RUNS_TABLE, given.request_id, "set_event " + key, constant(None), None, _writing(put)
        )
        return None

    def _write(self, key: str, value: Any, text: str) -> Steps[int]:
        given = self._given
        identity = "write_stream " + key
        length = self._open(key, identity)
        step = self._cursor.advance()
        ref = RowRef(RUNS_TABLE, given.request_id, stream_key(given.workflow, given.request_id, key, length))
        row: JSON = {"v": value, "n": step}
        put = self._put(ref, row, item_text(text, step), lambda: f"value {length} of stream {key!r}")
        offset = yield from self._stepper.forward(
            RUNS_TABLE, given.request_id, identity, constant(length), None, _writing(put)
        )
        self._streams[key] = (int(offset) + 1, False)  # a replay's memo holds the offset it took
        return int(offset)

    def _close(self, key: str) -> Steps[None]:
        given = self._given
        identity = "close_stream " + key
        length = self._open(key, identity)
        step = self._cursor.advance()
        at = given.clock()
        ref = RowRef(RUNS_TABLE, given.request_id, stream_end_key(given.workflow, given.request_id, key))
        row: JSON = {"len": length, "n": step, "at": at}
        put = self._put(ref, row, end_text(length, step, at), lambda: f"end of stream {key!r}")
        closed = yield from self._stepper.forward(
            RUNS_TABLE, given.request_id, identity, constant(length), None, _writing(put)
        )
        self._streams[key] = (int(closed), True)
        return None

    def _open(self, key: str, identity: str) -> int:
        """How many values the stream ``key`` holds; :class:`StreamClosedError` if it was closed
        (the workflow's own error, raised before anything of the step is written)."""
        length, closed = self._streams.get(key, (0, False))
        if closed:
            cursor, given = self._cursor, self._given
            cursor.advance()  # the error names the step that was refused
            cursor.identity = identity
            raise StreamClosedError(given.workflow, given.request_id, key, length)
        return length

    def _put(self, ref: RowRef, row: JSON, text: str, what: Callable[[], str]) -> Put:
        """The blind write of a published row, refused before anything is written (the request's
        claim included) if its text is over the store's limit for one row."""
        given = self._given
        allowed = given.capabilities.max_value_bytes
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size > allowed:
            request = f"workflow {given.workflow!r} request {given.request_id!r}"
            where = f"{what()} of {request} (step {self._cursor.step})"
            raise LimitExceededError(where, f"a value of {size} bytes; the backend allows {allowed} per row")
        return Put(ref, row, text, expires_at=given.expiry())
