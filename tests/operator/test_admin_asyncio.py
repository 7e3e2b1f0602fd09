"""The operator's asyncio commands (``idemflow.admin``'s ``a`` functions) take the blocking ones'
steps on the event loop: the same answers, the same rows, on every store's asynchronous twin."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from idemflow import InvalidInputError, StepRetry, run
from idemflow.admin import (
    aabort_request,
    acancel,
    acollect,
    arelay,
    aretry,
    aruns,
    ashow,
    collect,
    runs,
    show,
)
from idemflow.client import RunStatus, status, submit
from idemflow.stores import Store
from idemflow.worker import MemoryQueue, Worker
from tests.conformance.test_continuations import Clock, deliver_all, order
from tests.conformance.test_workflow_contract import new_space
from tests.support.checkout_workflows import V1, checkout_v1


def failed(store: Store, space: str, clock: Clock, queue: MemoryQueue) -> str:
    submit(checkout_v1(order(space, explode=True)), request_id=space + "bad", store=store, queue=queue)
    deliver_all(
        Worker(V1, store=store, queue=queue, step_retry=StepRetry(maximum_attempts=2), clock=clock),
        queue,
        clock,
    )
    assert status(store, "checkout", space + "bad").status is RunStatus.FAILED
    return space + "bad"


def test_aruns_and_ashow_answer_what_runs_and_show_answer(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    bad = failed(store, space, clock, queue)
    submit(checkout_v1(order(space, 1)), request_id=space + "queued", store=store, queue=queue, clock=clock)
    store.flush()

    def mine(page: Any) -> list[tuple[str, RunStatus]]:
        return [(found.request_id, found.status) for found in page.runs if found.request_id.startswith(space)]

    for query in ({"workflow": "checkout"}, {"workflow": "checkout", "status": RunStatus.FAILED}):
        blocking, awaited = runs(store, **query), asyncio.run(aruns(store, **query))
        assert sorted(mine(awaited)) == sorted(mine(blocking)) and bad in dict(mine(awaited))
    first = asyncio.run(aruns(store, workflow="checkout", limit=1))
    assert len(first.runs) == 1 and first.next is not None
    assert asyncio.run(ashow(store, V1, "checkout", bad)) == show(store, V1, "checkout", bad)
    queued = asyncio.run(ashow(store, V1, "checkout", space + "queued"))
    assert queued == show(store, V1, "checkout", space + "queued") and queued.steps


def test_acancel_aretry_and_aabort_request_move_a_request_as_the_blocking_ones_do(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    bad = failed(store, space, clock, queue)
    assert asyncio.run(acancel(store, "checkout", bad, reason="hold on")) is RunStatus.FAILED
    assert status(store, "checkout", bad).status is RunStatus.CANCELLED
    assert asyncio.run(aretry(store, queue, "checkout", bad)) is RunStatus.CANCELLED
    assert status(store, "checkout", bad).status is RunStatus.RUNNING
    assert queue.approximate_size() == 1  # the pointer the workers resume it from
    ended = asyncio.run(aabort_request(store, V1, "checkout", bad, reason="given up", clock=clock))
    assert ended.status is RunStatus.ABORTED and ended.reason == "given up"
    assert asyncio.run(aretry(store, queue, "checkout", bad)) is RunStatus.ABORTED  # final: left alone
    with pytest.raises(InvalidInputError, match="no request"):
        asyncio.run(acancel(store, "checkout", space + "never"))


def test_arelay_sends_a_continuation_submit_could_not(store: Store) -> None:
    space, clock = new_space(), Clock()
    sent: list[str] = []

    class Down(MemoryQueue):
        def send(self, body: str, *, delay: float = 0.0) -> None:
            raise ConnectionError("the queue is down")

    with pytest.raises(ConnectionError):
        submit(checkout_v1(order(space, 1)), request_id=space + "r", store=store, queue=Down(), clock=clock)
    up = MemoryQueue(clock=clock)
    assert asyncio.run(arelay(store, up, clock=clock)) == 0  # not due: submit may still send it
    clock.now += 3600
    assert asyncio.run(arelay(store, up, clock=clock)) >= 1
    sent.extend(message.body for message in up.receive(max_messages=10))
    assert sent and asyncio.run(arelay(store, up, clock=clock)) == 0  # sent once


def test_acollect_removes_what_collect_would(store: Store) -> None:
    space, clock = new_space(), Clock()
    run(checkout_v1(order(space, 1)), request_id=space + "done", store=store, clock=clock)
    store.flush()
    kept = asyncio.run(acollect(store, older_than=3600.0, now=clock))
    assert kept.memo_rows == 0
    gone = asyncio.run(acollect(store, older_than=0.0, now=lambda: 4e9))
    assert gone.requests >= 1 and gone.run_records >= 1 and gone.memo_rows >= 1
    assert collect(store, older_than=0.0, now=lambda: 4e9).requests == 0  # nothing left to collect


def test_the_commands_run_on_each_stores_asynchronous_client(store: Store) -> None:
    """On aiobotocore and ``azure.data.tables.aio`` (and an awaited memory store): no paged listing
    there, so ``aruns`` pages one awaited scan; ``acollect`` lists the tables the client holds."""
    from tests.support.apis import LOOP, async_twin, close_twins

    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    bad = failed(store, space, clock, queue)
    run(checkout_v1(order(space, 1)), request_id=space + "done", store=store, clock=clock)
    store.flush()
    twin = async_twin(store)
    try:
        listed = LOOP.run(aruns(twin, workflow="checkout", status=RunStatus.FAILED))
        assert bad in [found.request_id for found in listed.runs]
        assert LOOP.run(ashow(twin, V1, "checkout", bad)) == show(store, V1, "checkout", bad)
        assert LOOP.run(acancel(twin, "checkout", bad)) is RunStatus.FAILED
        assert status(store, "checkout", bad).status is RunStatus.CANCELLED
        gone = LOOP.run(acollect(twin, older_than=0.0, now=lambda: 4e9))
        assert gone.requests >= 1 and status(store, "checkout", space + "done").status is RunStatus.UNKNOWN
    finally:
        close_twins()
