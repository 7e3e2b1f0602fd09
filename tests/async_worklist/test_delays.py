"""Delayed requests (``submit(delay=, not_before=)``): recorded at once, never started early.

Every queue runs these (memory and SQLite on a fake clock moved by hand; moto's SQS and Azurite on
real time, with delays of a second or two), on both APIs. A workflow's first step records the
run's clock (``now()``), and each test compares it with the time the request was due: a request
started early, a step run in the submitter, or an early pointer obeyed fails them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Generator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from idemflow import atomic, checkpoint, now, workflow
from idemflow.admin import cancel, retry, show
from idemflow.asgi import Idempotency
from idemflow.async_worklist import _scheduling
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.aws_lambda import FixedContext, sqs_handler
from idemflow.client import RunStatus, rows, status, submit
from idemflow.errors import InvalidInputError, InvalidValueError, LimitExceededError, QueueError
from idemflow.keys import RUNS_TABLE, outbox_partitions
from idemflow.records import RunRecord
from idemflow.running.runner import run_status
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import Store
from idemflow.worker import MemoryQueue, Queue, SqliteQueue, Worker
from tests.conformance import conftest as api_dimension
from tests.conformance import test_queue_contract as queue_contract
from tests.conformance.test_queue_contract import QueueFactory
from tests.integrations.test_aws_lambda import local_event
from tests.support.apis import Api

api = api_dimension.api  # both APIs, as in the conformance suite
pytest_generate_tests = api_dimension.pytest_generate_tests
queue_factory = queue_contract.queue_factory  # every queue backend

T0 = 1_800_000_000.0


@workflow("delayed")
def delayed(key: str) -> Generator[Any, Any, float]:
    started: float = yield now()  # the first step: the run's clock when it began
    yield atomic("tablea", key, lambda tx: tx.put("started", started))
    yield checkpoint()
    yield atomic("tablea", key, lambda tx: tx.increment("finished"))
    return started


@workflow("delayed-timeout", timeout=10)
def with_timeout(key: str) -> Generator[Any, Any, None]:
    yield checkpoint()
    yield atomic("tablea", key, lambda tx: tx.increment("finished"))


def _clock(factory: QueueFactory) -> Callable[[], float]:
    return factory.clock.time if factory.clock is not None else time.time


def _record(store: Store, workflow: str, request_id: str) -> RunRecord:
    record = run_status(store, workflow, request_id)
    assert record is not None
    return record


def deliver(
    factory: QueueFactory, queue: Queue, worker: Any, done: Callable[[], bool], *, step: float
) -> None:
    """Hand messages to ``worker`` until ``done()``: local queues move their fake clock ``step``
    seconds per empty poll; cloud queues long-poll in real time (at most 30 s in all)."""
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "the request never finished"
        got = queue.receive(wait=0.5 if factory.cloud else 0.0)
        for message in got:
            worker.handle(message)
        if not got:
            factory.let_pass(step)


def test_a_delayed_request_runs_nothing_inline_and_starts_no_earlier_than_due(
    queue_factory: QueueFactory, api: Api
) -> None:
    store, queue, clock = MemoryStore(), queue_factory(), _clock(queue_factory)
    delay = 1.5 if queue_factory.cloud else 600.0
    submitted = clock()
    pending = api.submit(delayed("k"), request_id="d-1", store=store, queue=queue, clock=clock, delay=delay)
    assert pending.status() is RunStatus.RUNNING
    assert rows(store, "tablea") == {}  # not even the steps before the checkpoint ran
    not_before = _record(store, "delayed", "d-1").not_before
    assert not_before is not None and not_before >= submitted + delay
    waiting = api.status(store, "delayed", "d-1").waiting
    assert waiting is not None and waiting.startswith("waiting until ")
    worker = api.worker([delayed], store=store, queue=queue, clock=clock, relay_every=None)
    deliver(queue_factory, queue, worker, lambda: status(store, "delayed", "d-1").status.final, step=30.0)
    assert status(store, "delayed", "d-1").result >= not_before
    assert rows(store, "tablea")[("k", "finished")] == 1


def test_an_early_pointer_is_queued_again_and_not_counted_as_an_attempt(
    queue_factory: QueueFactory, api: Api
) -> None:
    """A pointer that arrives before the request is due (a stray one here; a relay, a copy or a
    worker whose clock runs ahead alike) is sent again with the time left."""
    store, queue, clock = MemoryStore(), queue_factory(), _clock(queue_factory)
    delay = 5.0 if queue_factory.cloud else 600.0  # real seconds on a cloud queue: room for a loaded machine
    api.submit(delayed("k"), request_id="d-2", store=store, queue=queue, clock=clock, delay=delay)
    not_before = _record(store, "delayed", "d-2").not_before
    assert not_before is not None
    queue.send(encode_pointer(Pointer("delayed", 1, "d-2"), None))  # a pointer visible at once
    worker = api.worker([delayed], store=store, queue=queue, clock=clock, relay_every=None)
    [early] = queue_factory.receive_within(queue)
    assert clock() < not_before
    worker.handle(early)
    assert rows(store, "tablea") == {}
    assert worker.stats.suspended == 1 and worker.stats.retried == 0
    deliver(queue_factory, queue, worker, lambda: status(store, "delayed", "d-2").status.final, step=30.0)
    assert status(store, "delayed", "d-2").result >= not_before
    record = _record(store, "delayed", "d-2")
    assert record.attempts is None and record.failure is None


def test_a_delay_longer_than_the_queues_longest_hops_until_due(
    queue_factory: QueueFactory, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS delays a message 900 s at most: a longer delay is several hops, each a fresh message
    re-sent by the worker that received it early. The cloud queues run with the cap lowered to
    one second; the local ones with SQS's own."""
    if queue_factory.cloud:
        monkeypatch.setattr(_scheduling, "MAX_HOP", 1.0)
    cap = _scheduling.MAX_HOP
    store, queue, clock = MemoryStore(), queue_factory(), _clock(queue_factory)
    delay = 2.5 * cap
    api.submit(delayed("k"), request_id="d-3", store=store, queue=queue, clock=clock, delay=delay)
    not_before = _record(store, "delayed", "d-3").not_before
    assert not_before is not None
    worker = api.worker([delayed], store=store, queue=queue, clock=clock, relay_every=None)
    deliver(queue_factory, queue, worker, lambda: status(store, "delayed", "d-3").status.final, step=cap / 9)
    assert status(store, "delayed", "d-3").result >= not_before
    # On a fake clock exactly two hops (at one cap, then two; the third arrival is due); on a real
    # one at least one (the first arrival, after one capped delay, is early).
    assert worker.stats.suspended >= 1 if queue_factory.cloud else worker.stats.suspended == 2


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"delay": -1}, InvalidValueError),
        ({"delay": float("nan")}, InvalidValueError),
        ({"delay": float("inf")}, InvalidValueError),
        ({"delay": True}, InvalidValueError),
        ({"delay": "10"}, InvalidValueError),
        ({"not_before": float("-inf")}, InvalidValueError),
        ({"delay": 5, "not_before": T0 + 5}, InvalidValueError),
        ({"delay": 8 * 86400}, LimitExceededError),  # past the default retention of 7 days
        ({"not_before": T0 + 1e12}, LimitExceededError),
        ({"delay": 60, "deadline": T0 + 30}, InvalidInputError),  # due after its deadline
        ({"not_before": datetime(2027, 1, 1)}, InvalidValueError),  # naive: which zone?
        ({"priority": "urgent"}, InvalidValueError),
        ({"priority": "high"}, InvalidValueError),  # a queue without lanes
    ],
)
def test_bad_timing_is_refused_before_anything_is_written(options: dict[str, Any], error: type) -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: T0)
    with pytest.raises(error):
        submit(delayed("k"), request_id="bad", store=store, queue=queue, clock=lambda: T0, **options)
    assert status(store, "delayed", "bad").status is RunStatus.UNKNOWN
    assert queue.approximate_size() == 0
    assert [row for part in outbox_partitions() for row in store.scan(RUNS_TABLE, part)] == []


def test_a_time_already_past_is_an_ordinary_submission() -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: T0)
    submit(delayed("k"), request_id="past", store=store, queue=queue, clock=lambda: T0, not_before=T0 - 5)
    assert rows(store, "tablea")[("k", "started")] == T0  # ran to its checkpoint inline, as usual
    assert _record(store, "delayed", "past").not_before is None


def test_a_timeout_counts_from_when_the_request_may_start() -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: T0)
    submit(with_timeout("k"), request_id="t", store=store, queue=queue, clock=lambda: T0, delay=60)
    assert _record(store, "delayed-timeout", "t").deadline == T0 + 60 + 10


def test_a_copy_with_another_delay_keeps_the_first_ones(api: Api) -> None:
    """First one wins: a copy of a delayed request neither runs it nor moves its time, and a
    delayed copy of a request already under way changes nothing either."""
    now_ = [T0]
    clock = lambda: now_[0]  # noqa: E731
    store, queue = MemoryStore(), MemoryQueue(clock=clock)
    api.submit(delayed("a"), request_id="c-1", store=store, queue=queue, clock=clock, delay=600)
    copy = api.submit(delayed("a"), request_id="c-1", store=store, queue=queue, clock=clock)
    assert copy.outcome is None and rows(store, "tablea") == {}
    assert _record(store, "delayed", "c-1").not_before == T0 + 600
    now_[0] += 60  # past the takeover time: a copy would send the continuation a dead first left
    api.submit(delayed("a"), request_id="c-1", store=store, queue=queue, clock=clock, delay=5)
    assert rows(store, "tablea") == {} and queue.approximate_size() == 1
    api.submit(delayed("b"), request_id="c-2", store=store, queue=queue, clock=clock)
    api.submit(delayed("b"), request_id="c-2", store=store, queue=queue, clock=clock, delay=600)
    record = _record(store, "delayed", "c-2")
    assert record.not_before is None and record.waiting is None
    assert rows(store, "tablea")[("b", "started")] == T0 + 60


def test_admin_show_says_what_a_delayed_request_waits_for() -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: T0)
    submit(delayed("k"), request_id="s", store=store, queue=queue, clock=lambda: T0, delay=90)
    view = show(store, [delayed], "delayed", "s")
    assert "waits for: waiting until 2027-01-15T08:01:30.000+00:00" in view.lines()[-1]


class _Failing(MemoryQueue):
    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise QueueError("the queue is down", backend="memory")


def test_the_relay_sends_a_delayed_request_only_once_it_is_due(store: Store) -> None:
    """``submit`` could not send (its queue was down, or it died): the outbox entry it committed
    with the claim is due at the request's time, so no relay sends it sooner."""
    now_ = [T0]
    clock = lambda: now_[0]  # noqa: E731
    queue = MemoryQueue(clock=clock)
    submit(delayed("k"), request_id="r-1", store=store, queue=_Failing(), clock=clock, delay=300)
    worker = Worker([delayed], store=store, queue=queue, clock=clock, relay_every=None)
    now_[0] = T0 + 299
    assert worker.relay() == 0 and queue.approximate_size() == 0
    now_[0] = T0 + 300
    assert worker.relay() == 1
    [message] = queue.receive()
    worker.handle(message)
    assert status(store, "delayed", "r-1").result == T0 + 300


SUBMITTER = textwrap.dedent(
    """
    import os, signal, sys
    from idemflow.client import submit
    from idemflow.stores import SqliteStore
    from idemflow.worker import SqliteQueue
    from tests.async_worklist.test_delays import delayed

    class Dying(SqliteQueue):
        def send(self, body, *, delay=0.0):  # killed between the claim and the send
            os.kill(os.getpid(), signal.SIGKILL)

    store, queue = SqliteStore(sys.argv[1]), Dying(sys.argv[2])
    submit(delayed("k"), request_id="killed", store=store, queue=queue, delay=float(sys.argv[3]))
    """
)


def test_a_submitter_killed_before_its_send_leaves_the_relay_a_request_it_sends_when_due(
    tmp_path: Path,
) -> None:
    store_path, queue_path = tmp_path / "s.sqlite3", tmp_path / "q.sqlite3"
    before = time.time()
    child = subprocess.run(
        [sys.executable, "-c", SUBMITTER, str(store_path), str(queue_path), "3600"],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    store, queue = SqliteStore(store_path), SqliteQueue(queue_path)
    record = _record(store, "delayed", "killed")
    assert record.not_before is not None and record.not_before >= before + 3600
    assert rows(store, "tablea") == {}
    assert Worker([delayed], store=store, queue=queue, relay_every=None).relay() == 0  # not due
    due = record.not_before
    late = Worker([delayed], store=store, queue=queue, clock=lambda: due, relay_every=None)
    assert late.relay() == 1
    [message] = queue.receive()
    late.handle(message)
    assert status(store, "delayed", "killed").result == due
    store.close()
    queue.close()


def test_an_operators_resume_starts_a_delayed_request_now_and_a_cancel_keeps_it_from_running() -> None:
    now_ = [T0]
    clock = lambda: now_[0]  # noqa: E731
    store, queue = MemoryStore(), MemoryQueue(clock=clock)
    submit(delayed("a"), request_id="now", store=store, queue=queue, clock=clock, delay=3600)
    submit(delayed("b"), request_id="never", store=store, queue=queue, clock=clock, delay=3600)
    assert retry(store, queue, "delayed", "now") is RunStatus.RUNNING
    assert _record(store, "delayed", "now").not_before is None
    assert api_status_waiting(store, "now") is None
    cancel(store, "delayed", "never")
    worker = Worker([delayed], store=store, queue=queue, clock=clock, relay_every=None)
    worker.run(idle_timeout=0.2)
    assert status(store, "delayed", "now").result == T0
    now_[0] += 3600
    later = Worker([delayed], store=store, queue=queue, clock=clock, relay_every=None)
    later.run(idle_timeout=0.2)
    assert status(store, "delayed", "never").status is RunStatus.CANCELLED
    assert ("b", "started") not in rows(store, "tablea") and later.stats.cancelled == 1


def api_status_waiting(store: Store, request_id: str) -> str | None:
    return status(store, "delayed", request_id).waiting


def test_a_timedelta_or_an_aware_datetime_gives_the_time() -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: T0)
    submit(
        delayed("a"), request_id="td", store=store, queue=queue, clock=lambda: T0, delay=timedelta(minutes=2)
    )
    at = datetime.fromtimestamp(T0 + 300, UTC)
    submit(delayed("b"), request_id="dt", store=store, queue=queue, clock=lambda: T0, not_before=at)
    assert _record(store, "delayed", "td").not_before == T0 + 120
    assert _record(store, "delayed", "dt").not_before == T0 + 300


def test_a_lambda_handler_sends_an_early_record_back_with_the_time_left(tmp_path: Path) -> None:
    """On Lambda the batch is the queue: an early record is re-sent and acked (no batch item
    failure, no attempt), and runs once due."""
    now_ = [T0]
    clock = lambda: now_[0]  # noqa: E731
    store = SqliteStore(tmp_path / "s.sqlite3")
    queue = SqliteQueue(tmp_path / "q.sqlite3", name="jobs", clock=clock)
    submit(delayed("k"), request_id="l-1", store=store, queue=queue, clock=clock, delay=600)
    handler = sqs_handler([delayed], store=store, queue=queue, clock=clock)
    queue.send(encode_pointer(Pointer("delayed", 1, "l-1"), None))  # a stray pointer, early
    assert handler(local_event(queue), FixedContext(60_000)) == {"batchItemFailures": []}
    assert rows(store, "tablea") == {} and queue.approximate_size() == 2  # the first's and the re-sent
    now_[0] = T0 + 600
    handler(local_event(queue), FixedContext(60_000))
    assert status(store, "delayed", "l-1").result == T0 + 600
    store.close()
    queue.close()


def test_an_asgi_submission_may_be_delayed() -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: T0)
    idem = Idempotency(store, queue=queue, clock=lambda: T0)
    answer = asyncio.run(idem.submit(delayed("k"), request_id="web-1", delay=60))
    assert answer.status_code == 202 and rows(store, "tablea") == {}
    assert _record(store, "delayed", "web-1").not_before == T0 + 60
