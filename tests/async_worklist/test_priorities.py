"""Priorities (``submit(priority=)``): lanes of one queue, drained highest first.

Every queue backend runs these, on both APIs: a :class:`LanedQueue` of three queues of the kind
(``?lanes=true`` opens the same from a URL). The backlog test is the guarantee users rely on: with
50 low requests queued before 5 high ones, one worker thread finishes the 5 high first.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemflow import Tx, atomic, checkpoint, start, wait, workflow
from idemflow.async_worklist.queues.lanes import LANES, in_async_lane, lane_of
from idemflow.async_worklist.queues.registry import QUEUES
from idemflow.aws_lambda import sqs_handler
from idemflow.client import RunStatus, status, submit
from idemflow.errors import ConfigurationError, InvalidValueError, QueueError
from idemflow.keys import RUNS_TABLE, run_key
from idemflow.serialization import encode
from idemflow.stores import MemoryStore
from idemflow.stores.base import Put, RowRef
from idemflow.stores.registry import Feature
from idemflow.worker import LanedQueue, MemoryQueue, SqliteQueue, Worker, open_async_queue, open_queue
from tests.conformance import conftest as api_dimension
from tests.conformance import test_queue_contract as queue_contract
from tests.conformance.test_queue_contract import QueueFactory
from tests.support.apis import LOOP, Api
from tests.support.selection import kinds

api = api_dimension.api  # both APIs, as in the conformance suite
pytest_generate_tests = api_dimension.pytest_generate_tests
queue_factory = queue_contract.queue_factory  # every queue backend

T0 = 1_800_000_000.0


def take_turn(tx: Tx) -> int:
    turn: int = (tx.get("turns") or 0) + 1
    tx.put("turns", turn)
    return turn


@workflow("prioritised")
def prioritised(lane: str, n: int) -> Generator[Any, Any, int]:
    yield checkpoint()  # the turn is taken by a worker, in the order it takes the requests
    turn: int = yield atomic("tablea", "order", take_turn)
    return turn


def laned(factory: QueueFactory) -> LanedQueue:
    return LanedQueue({lane: factory() for lane in LANES})


def test_under_a_backlog_one_worker_finishes_the_high_lane_first(
    queue_factory: QueueFactory, api: Api
) -> None:
    store, queue = MemoryStore(), laned(queue_factory)
    for n in range(50):
        api.submit(prioritised("low", n), request_id=f"low-{n}", store=store, queue=queue, priority="low")
    for n in range(5):
        api.submit(prioritised("high", n), request_id=f"high-{n}", store=store, queue=queue, priority="high")
    worker = api.worker([prioritised], store=store, queue=queue, concurrency=1, wait=0.1, relay_every=None)
    deadline = time.monotonic() + 120
    while any(not status(store, "prioritised", f"low-{n}").status.final for n in range(50)):
        assert time.monotonic() < deadline, "the backlog was not drained"
        worker.run(idle_timeout=1.0)
    turns = {f"{lane}-{n}": status(store, "prioritised", f"{lane}-{n}").result for lane, n in _ids()}
    assert sorted(turns[f"high-{n}"] for n in range(5)) == [1, 2, 3, 4, 5]
    assert sorted(turns.values()) == list(range(1, 56))  # each ran once


def _ids() -> list[tuple[str, int]]:
    return [("low", n) for n in range(50)] + [("high", n) for n in range(5)]


def test_dead_letters_stay_in_their_lane_and_go_back_to_it(queue_factory: QueueFactory) -> None:
    queue = laned(queue_factory)
    queue.lane("low").send("not a pointer")
    [message] = queue_factory.receive_within(queue)
    assert message.id.startswith("low:") and lane_of(message) == "low"
    queue.dead_letter(message, "rejected: not JSON")
    assert queue.lanes["low"].approximate_size() == 0
    deadline = time.monotonic() + 15
    while not (dead := queue.list_dead_letters()):
        assert time.monotonic() < deadline
    assert [(d.id.split(":")[0], d.body, d.reason) for d in dead] == [
        ("low", "not a pointer", "rejected: not JSON")
    ]
    assert queue.redrive([dead[0].id]) == 1
    [again] = queue_factory.receive_within(queue)
    assert again.id.startswith("low:") and again.body == "not a pointer" and again.deliveries == 1
    queue.ack(again)


def test_acks_and_extensions_reach_the_lane_a_message_came_from(queue_factory: QueueFactory) -> None:
    queue = laned(queue_factory)
    queue.lane("high").send("h")
    queue.send("n")  # a plain send: the normal lane, the queue itself
    [first] = queue_factory.receive_within(queue)
    assert first.body == "h" and lane_of(first) == "high"
    held = queue.extend(first, queue.visibility_timeout)
    assert lane_of(held) == "high"
    queue.ack(held)
    [second] = queue_factory.receive_within(queue)
    assert second.body == "n" and second.id.startswith("normal:") and lane_of(second) is None
    queue.ack(second)
    with pytest.raises(InvalidValueError, match="names no lane"):
        queue.ack(type(second)(id="nowhere", body="", deliveries=1, receipt="r"))


@settings(max_examples=50)
@given(st.lists(st.sampled_from(LANES), min_size=1, max_size=20))
def test_a_receive_never_takes_a_lower_lane_while_a_higher_one_has_a_message(lanes: list[str]) -> None:
    queue = LanedQueue({lane: MemoryQueue() for lane in LANES})
    for n, lane in enumerate(lanes):
        queue.lane(lane).send(str(n))
    left = {lane: lanes.count(lane) for lane in LANES}
    while any(left.values()):
        [message] = queue.receive()
        lane = message.id.split(":")[0]
        assert lane == next(name for name in LANES if left[name]), (lane, left)
        left[lane] -= 1
        queue.ack(message)


def test_the_relay_and_the_workers_keep_a_request_in_its_lane(api: Api) -> None:
    """A request's lane is stored with it: the relay's pointer and a worker's early re-send of a
    delayed request go to that lane, whichever lane the pointer they act on came from."""
    now, queue_now = [T0], [T0]
    clock = lambda: now[0]  # noqa: E731
    store = MemoryStore()
    queue = LanedQueue({lane: MemoryQueue(clock=lambda: queue_now[0]) for lane in LANES})
    down = LanedQueue({lane: _Refusing() for lane in LANES})
    options: dict[str, Any] = {"clock": clock, "priority": "high", "delay": 600}
    api.submit(prioritised("high", 0), request_id="p-1", store=store, queue=down, **options)
    worker = api.worker([prioritised], store=store, queue=queue, clock=clock, relay_every=None)
    now[0] = T0 + 600
    assert worker.relay() == 1
    assert queue.lanes["high"].approximate_size() == 1 and queue.approximate_size() == 1
    now[0] = T0 + 300  # a worker whose clock runs behind: the pointer is early for it
    [message] = queue.receive()
    assert lane_of(message) == "high"
    worker.handle(message)
    assert queue.lanes["high"].approximate_size() == 1 and queue.approximate_size() == 1  # re-sent there
    now[0], queue_now[0] = T0 + 600, T0 + 300
    [message] = queue.receive()
    assert lane_of(message) == "high"
    worker.handle(message)
    assert status(store, "prioritised", "p-1").status is RunStatus.COMPLETED


def test_a_lane_this_release_does_not_know_is_the_normal_lane() -> None:
    """A run record naming a lane a later release added (read after a rollback) runs in the normal
    lane: the relay sends it there and goes on to the next entry, and its early pointer hops
    there, instead of a failed lane lookup stopping the relay pass or counting as an error."""
    now, queue_now = [T0], [T0 + 600]
    clock = lambda: now[0]  # noqa: E731
    store = MemoryStore()
    queue = LanedQueue({lane: MemoryQueue(clock=lambda: queue_now[0]) for lane in LANES})
    down = LanedQueue({lane: _Refusing() for lane in LANES})
    options: dict[str, Any] = {"clock": clock, "priority": "high", "delay": 600}
    for n in range(2):
        submit(prioritised("high", n), request_id=f"p-{n}", store=store, queue=down, **options)
    ref = RowRef(RUNS_TABLE, "p-0", run_key("prioritised"))
    record = store.read(ref)
    assert record is not None and isinstance(record.value, dict) and isinstance(record.value["in"], dict)
    stored: dict[str, Any] = {**record.value, "in": {**record.value["in"], "ln": "critical"}}
    store.commit([Put(ref, stored, encode(stored))])
    worker = Worker([prioritised], store=store, queue=queue, clock=clock, relay_every=None)
    now[0] = T0 + 600
    assert worker.relay() == 2
    sizes = {lane: queue.lane(lane).approximate_size() for lane in LANES}
    assert sizes == {"high": 1, "normal": 1, "low": 0}  # p-1 stays high
    now[0] = T0 + 300  # a worker whose clock runs behind: both pointers are early for it
    for _ in range(2):
        [message] = queue.receive()
        worker.handle(message)
    assert {lane: queue.lane(lane).approximate_size() for lane in LANES} == sizes
    assert worker.stats.retried == 0
    now[0] = queue_now[0] = T0 + 900
    while received := queue.receive():
        worker.handle(received[0])
    assert [status(store, "prioritised", f"p-{n}").status for n in range(2)] == [RunStatus.COMPLETED] * 2


class _Refusing(MemoryQueue):
    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise QueueError("down", backend="memory")


def test_a_url_with_lanes_opens_three_queues_of_the_kind(tmp_path: Path) -> None:
    queue = open_queue(f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs&lanes=true")
    assert isinstance(queue, LanedQueue)
    assert [inner.name for inner in queue.lanes.values()] == ["jobs-high", "jobs", "jobs-low"]  # type: ignore[attr-defined]
    plain = open_queue(f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs")
    plain.send("from a deployment without lanes")
    [message] = queue.receive()
    assert message.body == "from a deployment without lanes" and lane_of(message) is None
    queue.close()
    plain.close()


def test_a_priority_on_a_queue_without_lanes_is_refused_before_anything_is_written() -> None:
    store, queue = MemoryStore(), MemoryQueue()
    with pytest.raises(InvalidValueError, match="lanes"):
        submit(prioritised("high", 0), request_id="x", store=store, queue=queue, priority="low")
    assert status(store, "prioritised", "x").status is RunStatus.UNKNOWN and queue.approximate_size() == 0
    Worker([prioritised], store=store, queue=queue)  # a worker needs nothing to know of lanes


@pytest.mark.parametrize("kind", kinds(*[bed.kind for _, bed in QUEUES.beds(Feature.SHARED)]))
def test_both_openers_give_lanes_from_the_url(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``open_queue`` and ``open_async_queue`` (``idemflow worker`` and ``--asyncio``) read
    ``lanes=true``: a message sent to a lane through one is taken from that lane through the other."""
    _, bed = QUEUES.bed(kind)
    server = request.getfixturevalue("backend_servers").get(bed.server)
    url = server.queue_url(f"q{uuid.uuid4().hex[:12]}", tmp_path, visibility_timeout=5) + "&lanes=true"
    blocking = open_queue(url)
    assert isinstance(blocking, LanedQueue)

    async def round_trip() -> list[str]:
        queue = open_async_queue(url)
        try:
            await in_async_lane(queue, "low").send("to the low lane")
            deadline = time.monotonic() + 15
            while not (got := await queue.receive(wait=0.5)):
                assert time.monotonic() < deadline
            for message in got:
                await queue.ack(message)
            return [message.id.split(":")[0] + " " + message.body for message in got]
        finally:
            await queue.close()

    assert LOOP.run(round_trip()) == ["low to the low lane"]
    blocking.lane("high").send("to the high lane")
    [message] = queue_contract_receive(blocking)
    assert lane_of(message) == "high"
    blocking.ack(message)
    blocking.close()


def queue_contract_receive(queue: LanedQueue) -> list[Any]:
    deadline = time.monotonic() + 15
    while not (got := queue.receive(wait=0.5)):
        assert time.monotonic() < deadline
    return got


CONTRACT = [
    test
    for name, test in sorted(vars(queue_contract).items())
    if name.startswith("test_") and list(inspect.signature(test).parameters) == ["queue_factory"]
]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("contract", CONTRACT, ids=lambda test: test.__name__)
def test_a_laned_queue_keeps_the_queue_contract(kind: str, contract: Any, tmp_path: Path) -> None:
    """A :class:`LanedQueue` is a queue: the contract every backend passes, on local lanes."""
    clock = queue_contract.FakeTime()

    def build(name: str, visibility_timeout: float) -> LanedQueue:
        if kind == "memory":
            return LanedQueue(
                {lane: MemoryQueue(visibility_timeout=visibility_timeout, clock=clock.time) for lane in LANES}
            )
        options: dict[str, Any] = {
            "visibility_timeout": visibility_timeout,
            "clock": clock.time,
            "sleep": clock.sleep,
        }
        return LanedQueue(
            {lane: SqliteQueue(tmp_path / "q.sqlite3", name=f"{name}-{lane}", **options) for lane in LANES}
        )

    names = (f"q{uuid.uuid4().hex[:12]}" for _ in iter(int, 1))
    factory = QueueFactory(kind, build, clock, names, shared=kind == "sqlite")
    try:
        contract(factory)
    finally:
        for queue in factory.opened:
            queue.close()


def test_a_lambda_handler_refuses_a_laned_queue(tmp_path: Path) -> None:
    queue = open_queue(f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs&lanes=true")
    with pytest.raises(ConfigurationError, match=r"\(jobs-high, jobs, jobs-low\)"):  # when built
        sqs_handler([prioritised], store=MemoryStore(), queue=queue)
    queue.close()


@workflow("lane-child")
def lane_child(n: int) -> Generator[Any, Any, int]:
    yield checkpoint()
    return n


@workflow("lane-parent")
def lane_parent(n: int) -> Generator[Any, Any, int]:
    yield checkpoint()
    child = yield start(lane_child(n), request_id=f"child-{n}")
    got: int = yield wait(child)
    return got


def test_a_child_inherits_its_parents_lane_and_wakes_it_there(api: Api) -> None:
    """Every continuation of a high request's family stays in the high lane: the child's own,
    started by the parent's step, and the parent's wake-up when the child ends."""
    store = MemoryStore()
    queue = LanedQueue({lane: MemoryQueue() for lane in LANES})
    api.submit(lane_parent(7), request_id="parent", store=store, queue=queue, priority="high")
    worker = api.worker([lane_parent, lane_child], store=store, queue=queue, relay_every=None)
    lanes = []
    for _ in range(20):
        got = queue.receive()
        if not got:
            break
        lanes.append(got[0].id.split(":")[0])
        worker.handle(got[0])
    assert status(store, "lane-parent", "parent").result == 7
    assert set(lanes) == {"high"} and len(lanes) >= 3  # the parent, the child, the wake-up
    assert worker.relay() == 0


def test_a_laned_queue_reports_its_lanes_backlog_as_one(queue_factory: QueueFactory) -> None:
    """``idemflow queue stats``, the pool and the gauges read a laned queue as the one queue its
    workers drain: every lane's messages counted, on every queue, blocking and asyncio."""
    from idemflow.async_worklist.queues.lanes import AsyncLanedQueue
    from idemflow.worker import aqueue_stats, queue_stats
    from tests.support.apis import async_queue_twin

    queue = laned(queue_factory)
    queue.lane("high").send("h")
    queue.lane("low").send("l1")
    queue.lane("low").send("l2", delay=600)
    queue.send("n")
    twin = AsyncLanedQueue({lane: async_queue_twin(lane_queue) for lane, lane_queue in queue.lanes.items()})
    try:
        readings = [queue_stats(queue), LOOP.run(aqueue_stats(twin))]
    finally:
        for lane_twin in twin.lanes.values():
            LOOP.run(lane_twin.close())
    for reading in readings:
        assert reading.total == 4
        assert reading.visible in (None, 3) and reading.delayed in (None, 1), reading
