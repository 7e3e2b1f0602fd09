"""Events and streams of a running request (issue #43), on every store and both APIs.

A workflow publishes with steps (``set_event``, ``write_stream``, ``close_stream``); readers
outside it (``get_event``, ``read_stream`` and their asyncio twins) wait for what is not there
yet. The promise checked: a reader waiting in another thread gets what is published, the last
event set wins, a stream is read complete, in order and once, from any offset, and each value is
written once whatever crashes or races in between; bad input is refused before anything is
written.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import pytest

from idemflow import (
    InvalidInputError,
    InvalidNameError,
    InvalidValueError,
    LimitExceededError,
    StreamClosedError,
    StreamTimeoutError,
    checkpoint,
    close_stream,
    effect,
    set_event,
    workflow,
    write_stream,
)
from idemflow.admin import collect, show
from idemflow.client import RunStatus
from idemflow.keys import EVENT, RUNS_TABLE, STREAM
from idemflow.stores import Store
from idemflow.stores.base import Row, RowRef
from idemflow.testing import SimulatedCrash, StoreWrapper
from idemflow.testing._plans import CrashAfterProgress
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.expiries import expiries

WAIT = 60.0
"""Seconds a reader in these tests waits at most: generous, never reached when all is well."""


@workflow("publisher")
def publisher(n: int, final: str = "done") -> Generator[Any, Any, int]:
    yield set_event("status", "started")
    for i in range(n):
        yield write_stream("numbers", {"i": i})
    yield set_event("status", final)
    yield close_stream("numbers")
    return n


@workflow("unclosed")
def unclosed(n: int) -> Generator[Any, Any, None]:
    for i in range(n):
        yield write_stream("log", i)


@workflow("gated")
def gated(key: str) -> Generator[Any, Any, None]:
    """Publishes once the test lets it: an effect waits on the gate ``GATES[key]``."""
    yield effect(lambda _key: GATES[key].wait(WAIT), name="gate")
    yield set_event("answer", 42)
    for i in range(3):
        yield write_stream("live", i)
    yield close_stream("live")


GATES: dict[str, threading.Event] = {}


class Watched(StoreWrapper):
    """A store that says when a reader first looked (``looked``): it waits from then on."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.looked = threading.Event()

    def read(self, ref: RowRef) -> Row | None:
        found = self.inner.read(ref)
        self.looked.set()
        return found

    def read_many(self, refs: Any) -> list[Row | None]:
        found = self.inner.read_many(refs)
        self.looked.set()
        return found


def published(store: Store, request_id: str) -> list[str]:
    """The keys of the event and stream rows beside a request's run record."""
    return [key for _, key, _ in store.scan(RUNS_TABLE, request_id) if key.startswith((EVENT, STREAM))]


def test_a_reader_in_another_thread_waits_for_the_event_and_the_stream(store: Store, api: Api) -> None:
    space = new_space()
    GATES[space] = threading.Event()
    answers: dict[str, Any] = {}
    event_reader, stream_reader = Watched(store), Watched(store)

    def read_event() -> None:
        answers["event"] = api.get_event(event_reader, "gated", space, "answer", timeout=WAIT)

    def read_stream() -> None:
        answers["stream"] = api.read_stream(stream_reader, "gated", space, "live", timeout=WAIT)

    readers = [threading.Thread(target=read_event), threading.Thread(target=read_stream)]
    running = threading.Thread(target=lambda: api.run(gated(space), request_id=space, store=store))
    for thread in [*readers, running]:
        thread.start()
    try:
        assert event_reader.looked.wait(WAIT) and stream_reader.looked.wait(WAIT)  # both wait now
        assert "event" not in answers and "stream" not in answers
    finally:
        GATES[space].set()
    for thread in [*readers, running]:
        thread.join(WAIT)
    assert answers == {"event": 42, "stream": [0, 1, 2]}


def test_the_last_event_set_wins_and_a_stream_reads_in_order_from_any_offset(store: Store, api: Api) -> None:
    space = new_space()
    n = 30  # more than one look's page
    assert api.run(publisher(n), request_id=space, store=store) == n
    assert api.get_event(store, "publisher", space, "status", timeout=0) == "done"
    values = [{"i": i} for i in range(n)]
    assert api.read_stream(store, "publisher", space, "numbers") == values
    assert api.read_stream(store, "publisher", space, "numbers", offset=25) == values[25:]
    assert api.read_stream(store, "publisher", space, "numbers", offset=n) == []  # at its end: over
    with pytest.raises(StreamClosedError) as past:
        api.read_stream(store, "publisher", space, "numbers", offset=n + 1)
    assert (past.value.length, past.value.offset) == (n, n + 1)
    assert api.run(publisher(n), request_id=space, store=store) == n  # a duplicate writes nothing
    assert len(published(store, space)) == 1 + n + 1  # the event, the values, the end


def test_a_crash_after_each_commit_writes_each_value_once(store: Store, api: Api) -> None:
    space = new_space()
    dying = CrashAfterProgress(store, lambda point: None)
    for _ in range(40):  # one commit of progress per execution, then a retry
        try:
            api.run(publisher(3, final="crashed and finished"), request_id=space, store=dying)
            break
        except SimulatedCrash:
            continue
    else:
        raise AssertionError("did not finish")
    assert len(dying.injected) >= 6  # every step's commit was followed by a crash
    assert api.read_stream(store, "publisher", space, "numbers") == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert api.get_event(store, "publisher", space, "status", timeout=0) == "crashed and finished"
    assert len(published(store, space)) == 1 + 3 + 1


def test_racing_duplicate_runs_write_each_value_once(store: Store, api: Api) -> None:
    space = new_space()
    racers = 4
    barrier = threading.Barrier(racers, timeout=WAIT)

    @workflow("racing-publisher")
    def racing(n: int) -> Generator[Any, Any, int]:
        yield effect(lambda _key: barrier.wait() * 0, name="meet")  # every racer reaches here
        for i in range(n):
            yield write_stream("numbers", i)
            yield set_event("last", i)
        yield close_stream("numbers")
        return n

    results: list[Any] = []

    def race() -> None:
        results.append(api.run(racing(5), request_id=space, store=store))

    threads = [threading.Thread(target=race) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert results == [5] * racers
    assert api.read_stream(store, "racing-publisher", space, "numbers") == [0, 1, 2, 3, 4]
    assert api.get_event(store, "racing-publisher", space, "last", timeout=0) == 4
    assert len(published(store, space)) == 1 + 5 + 1


def test_a_worker_publishes_after_the_checkpoint_and_an_unclosed_stream_ends_with_its_request(
    store: Store, api: Api
) -> None:
    space = new_space()

    @workflow("submitted-publisher")
    def submitted(n: int) -> Generator[Any, Any, str]:
        yield write_stream("log", "accepted")
        yield checkpoint()
        for i in range(n):
            yield write_stream("log", i)
        yield set_event("status", "finished")
        return "ok"

    clock = Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(submitted(2), request_id=space, store=store, queue=queue, clock=clock)
    with pytest.raises(StreamTimeoutError) as waited:  # running: its stream is open
        api.read_stream(store, "submitted-publisher", space, "log", timeout=0.2)
    assert waited.value.offset == 1  # the next value not read: read again from there
    assert api.get_event(store, "submitted-publisher", space, "status", timeout=0, default="-") == "-"
    deliver_all(api.worker([submitted], store=store, queue=queue, clock=clock), queue, clock)
    # Never closed, but its request completed: a reader stops after the last value.
    assert api.read_stream(store, "submitted-publisher", space, "log") == ["accepted", 0, 1]
    assert api.read_stream(store, "submitted-publisher", space, "log", offset=3) == []
    with pytest.raises(StreamClosedError) as past:
        api.read_stream(store, "submitted-publisher", space, "log", offset=5)
    assert past.value.length == 3
    assert api.get_event(store, "submitted-publisher", space, "status") == "finished"


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (lambda: set_event(5, "x"), InvalidNameError),  # type: ignore[arg-type]
        (lambda: set_event("", "x"), InvalidNameError),
        (lambda: write_stream(None, 1), InvalidNameError),  # type: ignore[arg-type]
        (lambda: close_stream("k" * 101), InvalidNameError),
        (lambda: set_event("status", object()), InvalidValueError),  # the codecs refuse it
        (lambda: write_stream("log", {"$$decimal": "1"}), InvalidValueError),  # a reserved key
    ],
    ids=["int-key", "empty-key", "none-key", "long-key", "object-value", "reserved-key"],
)
def test_bad_input_is_refused_before_anything_is_written(
    store: Store, api: Api, step: Any, error: type[Exception]
) -> None:
    space = new_space()

    @workflow("bad-publisher")
    def bad() -> Generator[Any, Any, None]:
        yield step()

    with pytest.raises(error):
        api.run(bad(), request_id=space, store=store)
    assert list(store.scan(RUNS_TABLE, space)) == []


def test_an_oversize_value_and_a_write_after_close_are_refused_before_they_are_written(
    store: Store, api: Api
) -> None:
    space = new_space()
    limit = store.capabilities.max_value_bytes
    unlimited = limit >= 50_000_000  # memory: no backend limit to exceed

    @workflow("oversize-publisher")
    def oversize() -> Generator[Any, Any, None]:
        yield set_event("big", "x" * (100 if unlimited else limit + 10))

    if unlimited:
        api.run(oversize(), request_id=space, store=store)
    else:
        with pytest.raises(LimitExceededError, match="event 'big'"):
            api.run(oversize(), request_id=space, store=store)
        assert published(store, space) == []

    @workflow("closing-publisher")
    def closing() -> Generator[Any, Any, None]:
        yield write_stream("log", 1)
        yield close_stream("log")
        yield write_stream("log", 2)

    closed = space + "closed"
    with pytest.raises(StreamClosedError, match="closed after 1 value"):
        api.run(closing(), request_id=closed, store=store)
    assert api.read_stream(store, "closing-publisher", closed, "log") == [1]
    with pytest.raises(StreamClosedError):  # the same on every replay: nothing more is written
        api.run(closing(), request_id=closed, store=store)
    assert len(published(store, closed)) == 2


@pytest.mark.parametrize(
    "options",
    [{"offset": -1}, {"offset": True}, {"offset": "0"}, {"timeout": -1}, {"poll": 0}],
    ids=["negative", "bool", "text", "timeout", "poll"],
)
def test_a_reader_refuses_bad_arguments_before_it_reads(store: Store, api: Api, options: Any) -> None:
    with pytest.raises(InvalidInputError):
        api.read_stream(store, "publisher", "r", "numbers", **options)
    with pytest.raises(InvalidNameError):
        api.get_event(store, "publisher", "r", "", timeout=0)


@pytest.mark.blocking_api  # show and collect are the operator's, on the blocking store
def test_published_rows_are_shown_expire_with_the_request_and_are_collected(store: Store, api: Api) -> None:
    space = new_space()
    api.run(publisher(2), request_id=space, store=store)
    view = show(store, [publisher], "publisher", space)
    assert [(e.key, e.value) for e in view.events] == [("status", "done")]
    assert [(s.key, s.length, s.closed) for s in view.streams] == [("numbers", 2, True)]
    assert "  stream numbers: 2 value(s), closed at step 5" in view.lines()
    kept = {where: at for where, at in expiries(store).items() if where[1] == space}
    rows = [where for where in kept if where[2].startswith((EVENT, STREAM))]
    assert len(rows) == 4 and all(kept[where] is not None for where in rows)  # expire as memos do
    assert api.get_event(store, "publisher", space, "status", timeout=0) == "done"
    report = collect(store, older_than=0.0, now=lambda: 4e9)
    assert report.published_rows >= 4
    assert published(store, space) == [] and list(store.scan(RUNS_TABLE, space)) == []
    assert api.run(publisher(2), request_id=space, store=store) == 2  # collected: a new request
    assert api.read_stream(store, "publisher", space, "numbers") == [{"i": 0}, {"i": 1}]
    assert show(store, [publisher], "publisher", space).record.status is RunStatus.COMPLETED
