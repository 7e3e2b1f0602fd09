"""Continuations that keep the promise, on every store.

Each test is one of the events a new user met with an order checkout
(debit, checkpoint, ship): a deploy mid-flight, an input larger than the
queue allows, a workflow that changes its own input, a step that keeps
failing, a crash or a queue outage between the commit and the send.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from idemflow import StepRetry, VersionNotHeldError
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.client import RunStatus
from idemflow.errors import (
    BackendError,
    InvalidValueError,
    RequestFailedError,
    TransientError,
    WorkflowAborted,
)
from idemflow.keys import OUTBOX, RUNS_TABLE, outbox_partitions
from idemflow.stores import Store
from idemflow.testing import SimulatedCrash
from idemflow.worker import MemoryQueue
from idemflow.worker import QueueMessage as Message
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api, Handles
from tests.support.checkout_workflows import (
    V1,
    V1_AND_V2,
    V2,
    checkout_noting,
    checkout_refunding,
    checkout_v1,
    checkout_v2,
)
from tests.support.workflows import rows_of

KEY = b"continuation-key"


class Clock:
    """A wall clock the test moves: queue visibility and outbox due times."""

    def __init__(self) -> None:
        self.now = self.began = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def order(space: str, n: int = 0, **extra: Any) -> dict[str, Any]:
    return {"space": space, "id": f"o{n}", "amount": 10, **extra}


def balance(store: Store, space: str) -> Any:
    return rows_of(store, space).get(("tablea", "wallet", "balance"))


def deliver_all(
    worker: Handles,
    queue: MemoryQueue,
    clock: Clock,
    *,
    rounds: int = 20,
    step: float = 120.0,
    settled: Callable[[], bool] | None = None,
) -> None:
    """Hand every message to ``worker``, moving time on ``step`` seconds while only delayed ones
    are left, until the queue is empty (or, with ``settled``, until nothing is visible and it
    says the request got where the test wants it: a request that waits with no known end on a
    store whose rows expire by date keeps a keep-alive timer queued)."""
    for _ in range(rounds):
        received = queue.receive()
        if received:
            worker.handle(received[0])
        elif queue.approximate_size() == 0 or (settled is not None and settled()):
            return
        else:
            clock.now += step
    raise AssertionError(f"{queue.approximate_size()} message(s) still queued")


def outbox_rows(store: Store) -> list[str]:
    return [
        key
        for partition in outbox_partitions()
        for _, key, _ in store.scan(RUNS_TABLE, partition)
        if key[:1] == OUTBOX
    ]


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_a_deploy_of_a_new_version_never_runs_old_requests_on_new_code(
    store: Store, signed: bool, api: Api
) -> None:
    space, clock = new_space(), Clock()
    key = KEY if signed else None
    queue = MemoryQueue(clock=clock)
    api.submit(checkout_v1(order(space)), request_id=space + "old", store=store, queue=queue, signing_key=key)
    assert balance(store, space) == -10
    # Workers restarted with v2 only: the v1 request waits, visibly, and nothing runs twice.
    only_v2 = api.worker(V2, store=store, queue=queue, signing_key=key)
    [message] = queue.receive()
    only_v2.handle(message)
    waiting = api.status(store, "checkout", space + "old")
    assert (waiting.status, waiting.version, only_v2.stats.waiting) == (RunStatus.RUNNING, 1, 1)
    assert waiting.waiting is not None and "version 1" in waiting.waiting
    assert balance(store, space) == -10 and queue.approximate_size() == 1 and queue.dead_letters() == []
    # Workers holding v1 and v2: the old request finishes on v1, a new one runs on v2.
    both = api.worker(V1_AND_V2, store=store, queue=queue, signing_key=key)
    api.submit(
        checkout_v2(order(space, 1)), request_id=space + "new", store=store, queue=queue, signing_key=key
    )
    deliver_all(both, queue, clock)
    old, new = api.status(store, "checkout", space + "old"), api.status(store, "checkout", space + "new")
    assert (old.result, old.version, old.waiting) == ({"version": 1, "shipped": "shipped"}, 1, None)
    assert (new.result, new.version) == ({"version": 2, "shipped": "shipped"}, 2)
    assert balance(store, space) == -20  # one debit each
    assert rows_of(store, space)[("tableb", "fraud", "checked")] == 1  # the v2 request only


def test_a_changed_step_without_a_new_version_waits_instead_of_running(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue)
    # The same name and version, other code: v2's steps registered as version 1.
    mistaken = api.worker([checkout_v2.__class__("checkout", checkout_v2.function)], store=store, queue=queue)
    [message] = queue.receive()
    mistaken.handle(message)
    waiting = api.status(store, "checkout", space)
    assert waiting.status is RunStatus.RUNNING and waiting.waiting is not None
    assert "atomic debit" in waiting.waiting and "atomic fraud" in waiting.waiting
    assert balance(store, space) == -10 and ("tableb", "fraud", "checked") not in rows_of(store, space)


def test_run_finishes_a_request_on_the_version_it_started_with(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue)
    with pytest.raises(VersionNotHeldError, match="started on version 1"):
        api.run(checkout_v2(order(space)), request_id=space, store=store)
    assert balance(store, space) == -10
    result = api.run(checkout_v2(order(space)), request_id=space, store=store, versions=[checkout_v1])
    assert result == {"version": 1, "shipped": "shipped"} and balance(store, space) == -10


def test_an_input_larger_than_the_queue_allows_completes(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock, max_body_bytes=64 * 1024)  # Azure Queue's limit
    big = order(space, items="x" * 70_000)
    pending = api.submit(checkout_v1(big), request_id=space, store=store, queue=queue)
    [message] = queue.receive()
    assert len(message.body) < 200  # a pointer, whatever the input
    queue.nack(message)
    deliver_all(api.worker(V1, store=store, queue=queue), queue, clock)
    assert pending.result(timeout=0) == {"version": 1, "shipped": "shipped"}
    assert rows_of(store, space)[("tableb", "shipments", "o0")] == {"items": 70_000}


def test_an_input_the_store_refuses_fails_before_anything_is_written(store: Store, api: Api) -> None:
    space = new_space()
    bad = [order(space, items={"a", "b"})]  # a set is not JSON
    limit = store.capabilities.max_value_bytes
    if limit < 10_000_000:  # the cloud stores: over the row size limit
        bad.append(order(space, items="x" * (limit + 1)))
    for given in bad:
        with pytest.raises(InvalidValueError, match="input of workflow 'checkout'"):
            api.submit(checkout_v1(given), request_id=space, store=store, queue=MemoryQueue())
    assert rows_of(store, space) == {} and api.status(store, "checkout", space).status is RunStatus.UNKNOWN
    assert not any(space in key for key in outbox_rows(store))


def test_a_workflow_that_changes_its_input_before_its_checkpoint_completes(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    pending = api.submit(
        checkout_noting(order(space, note="gift")), request_id=space, store=store, queue=queue
    )
    deliver_all(api.worker(V1, store=store, queue=queue), queue, clock)
    assert pending.result(timeout=0) == {"note": "gift"} and queue.dead_letters() == []


def test_a_step_that_keeps_failing_ends_failed_with_its_step_and_reason(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    pending = api.submit(checkout_v1(order(space, explode=True)), request_id=space, store=store, queue=queue)
    worker = api.worker(V1, store=store, queue=queue, step_retry=StepRetry(maximum_attempts=3), clock=clock)
    deliver_all(worker, queue, clock)
    failed = api.status(store, "checkout", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert (failed.failure.step, failed.failure.attempts) == (2, 3) and "KeyError" in failed.failure.reason
    assert (worker.stats.retried, worker.stats.failed, queue.dead_letters()) == (2, 1, [])
    assert balance(store, space) == -10  # the debit stays: the default is to keep it for an operator
    with pytest.raises(RequestFailedError, match="step 2"):
        pending.result(timeout=0)


def test_on_failure_compensate_refunds_once_and_ends_aborted(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    pending = api.submit(
        checkout_refunding(order(space, explode=True)), request_id=space, store=store, queue=queue
    )
    queue.send(queue.receive()[0].body)  # a duplicate message: the refund still happens once
    deliver_all(
        api.worker(V1, store=store, queue=queue, step_retry=StepRetry(maximum_attempts=2), clock=clock),
        queue,
        clock,
    )
    with pytest.raises(WorkflowAborted, match="step 2"):
        pending.result(timeout=0)
    assert balance(store, space) == 0 and ("tableb", "shipments", "o0") not in rows_of(store, space)


def test_a_workflow_no_worker_holds_ends_failed(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue)
    deliver_all(api.worker([checkout_noting], store=store, queue=queue, max_deliveries=2), queue, clock)
    failed = api.status(store, "checkout", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert "no worker here holds workflow 'checkout'" in failed.failure.reason


class DownQueue(MemoryQueue):
    """A queue whose sends fail: down, or the process dies in the middle of it."""

    def __init__(self, clock: Clock, error: BaseException) -> None:
        super().__init__(clock=clock)
        self.error = error

    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise self.error


@pytest.mark.parametrize(
    "error", [BackendError("queue down"), SimulatedCrash("after the commit")], ids=["queue down", "crash"]
)
def test_the_relay_sends_what_submit_could_not(store: Store, error: BaseException, api: Api) -> None:
    space, clock = new_space(), Clock()
    down = DownQueue(clock, error)
    try:
        pending = api.submit(
            checkout_v1(order(space)), request_id=space, store=store, queue=down, clock=clock
        )
    except SimulatedCrash:
        pending = None
    else:
        assert pending.status() is RunStatus.RUNNING  # accepted: the relay will send it
    assert balance(store, space) == -10 and len(outbox_rows(store)) >= 1
    queue = MemoryQueue(clock=clock)
    worker = api.worker(V1, store=store, queue=queue, clock=clock)
    assert worker.relay() == 0  # not due yet: a live submit normally sends first
    clock.now += 60
    assert worker.relay() == 1 and worker.relay() == 0  # sent once, then cleared
    deliver_all(worker, queue, clock)
    assert api.status(store, "checkout", space).result == {"version": 1, "shipped": "shipped"}
    assert balance(store, space) == -10 and not any(space in key for key in outbox_rows(store))


def test_a_submitted_request_leaves_no_outbox_entry_behind(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    for n in range(3):
        api.submit(
            checkout_v1(order(space, n)), request_id=f"{space}{n}", store=store, queue=queue, clock=clock
        )
    store.flush()
    deliver_all(api.worker(V1, store=store, queue=queue, clock=clock), queue, clock)
    assert not any(space in key for key in outbox_rows(store))


def test_a_message_of_the_previous_format_still_finishes_its_request(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue)
    queue.ack(queue.receive()[0])
    legacy = {
        "v": 1,
        "workflow": "checkout",
        "request_id": space,
        "input": {"args": [order(space)], "kwargs": {}},
        "recorded": [["s1", "atomic debit", 999]],  # carried values are never trusted
    }
    queue.send(json.dumps(legacy))
    deliver_all(api.worker(V1, store=store, queue=queue), queue, clock)
    assert api.status(store, "checkout", space).result == {"version": 1, "shipped": "shipped"}
    assert balance(store, space) == -10


def test_a_pointer_to_another_version_than_the_request_runs_on_the_recorded_one(
    store: Store, api: Api
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue)
    queue.send(encode_pointer(Pointer("checkout", 2, space), None))  # a forged or stale version
    deliver_all(api.worker(V1_AND_V2, store=store, queue=queue), queue, clock)
    assert api.status(store, "checkout", space).result == {"version": 1, "shipped": "shipped"}
    assert balance(store, space) == -10 and ("tableb", "fraud", "checked") not in rows_of(store, space)


def test_waiting_for_a_version_never_counts_as_an_attempt(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(checkout_v1(order(space, explode=True)), request_id=space, store=store, queue=queue)
    only_v2 = api.worker(V2, store=store, queue=queue, max_deliveries=2, version_wait=1)
    for _ in range(4):  # a long deploy: offered four times to workers without version 1
        [message] = queue.receive()
        only_v2.handle(message)
        clock.now += 2
    assert only_v2.stats.waiting == 4 and api.status(store, "checkout", space).status is RunStatus.RUNNING
    two = StepRetry(maximum_attempts=2)
    deliver_all(api.worker(V1, store=store, queue=queue, step_retry=two, clock=clock), queue, clock)
    failed = api.status(store, "checkout", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None and failed.failure.attempts == 2


def test_a_request_run_first_then_submitted_is_finished_by_workers(store: Store, api: Api) -> None:
    from idemflow.testing import Fault, FaultyStore

    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    dying = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)
    with pytest.raises(SimulatedCrash):  # `run` claims the request and dies after its debit
        api.run(checkout_v1(order(space)), request_id=space, store=dying)
    pending = api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(api.worker(V1, store=store, queue=queue, clock=clock), queue, clock)
    assert pending.result(timeout=0) == {"version": 1, "shipped": "shipped"}
    assert balance(store, space) == -10 and queue.dead_letters() == []


class BlippingQueue(MemoryQueue):
    """A queue whose first receive and first delayed send fail, as a network blip does."""

    def __init__(self) -> None:
        super().__init__()
        self.receive_blips = self.send_blips = 1

    def receive(self, **options: Any) -> list[Message]:
        if self.receive_blips:
            self.receive_blips -= 1
            raise TransientError("connection reset")
        return super().receive(**options)

    def send(self, body: str, *, delay: float = 0.0) -> None:
        if delay and self.send_blips:
            self.send_blips -= 1
            raise TransientError("connection reset")
        super().send(body, delay=delay)


def test_a_queue_that_blips_never_stops_a_worker(store: Store, api: Api) -> None:
    space = new_space()
    queue = BlippingQueue()
    api.submit(checkout_v1(order(space)), request_id=space + "old", store=store, queue=queue)
    # The v2-only worker meets a receive error, then fails to give the v1 request back: it goes on.
    only_v2 = api.worker(V2, store=store, queue=queue, wait=0.01, version_wait=0.01, relay_every=None)
    api.submit(checkout_v2(order(space, 1)), request_id=space + "new", store=store, queue=queue)
    done = threading.Event()

    def stop_once_it_went_on() -> None:  # the worker met both blips and still finished the v2 request
        deadline = time.monotonic() + 60
        while not done.wait(0.05) and time.monotonic() < deadline:
            if queue.send_blips == 0 and api.status(store, "checkout", space + "new").status.final:
                break
        only_v2.stop()

    watcher = threading.Thread(target=stop_once_it_went_on)
    watcher.start()
    try:
        only_v2.run()
    finally:
        done.set()
        watcher.join()
    assert api.status(store, "checkout", space + "new").result == {"version": 2, "shipped": "shipped"}
    assert (queue.receive_blips, queue.send_blips) == (0, 0)


def test_the_relay_drops_an_entry_whose_request_was_never_claimed(store: Store, api: Api) -> None:
    from idemflow.core.policy import resend
    from idemflow.keys import outbox_key, outbox_partition
    from idemflow.records import OutboxEntry
    from idemflow.serialization import encode
    from idemflow.stores.base import Put, RowRef

    space, clock = new_space(), Clock()
    entry = OutboxEntry("checkout", 1, space, clock.now - 1)  # written, then its submitter died
    ref = RowRef(RUNS_TABLE, outbox_partition(space), outbox_key("checkout", space))
    resend(store.commit, [Put(ref, entry.to_json(), encode(entry.to_json()))])  # may meet a conflict
    queue = MemoryQueue(clock=clock)
    assert api.worker(V1, store=store, queue=queue, clock=clock).relay() == 0
    assert queue.approximate_size() == 0 and not any(space in key for key in outbox_rows(store))


def test_an_idle_worker_returns_while_a_request_waits_for_another_version(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    api.submit(checkout_v1(order(space)), request_id=space, store=store, queue=queue)
    stats = api.worker(V2, store=store, queue=queue, wait=0.01, version_wait=0.01, relay_every=None).run(
        idle_timeout=0.3
    )
    assert stats.waiting >= 1 and stats.finished == 0 and queue.approximate_size() == 1
