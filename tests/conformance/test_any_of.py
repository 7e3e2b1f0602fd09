"""``any_of``: the first of several steps to end, decided once, on every store and both APIs.

Which branch ended first is a memo of its own, inserted in the same commit as the winner's, so
a replay (after a crash, or by a racing execution) returns the same index even when another
branch would end first this time; a message, a child's outcome or a timeout (a sleep) race as
the outside calls do, under ``run`` and under workers.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import pytest

from idemflow import (
    StepRetry,
    WorkflowAborted,
    abort,
    any_of,
    checkpoint,
    effect,
    receive,
    send,
    sleep,
    start,
    wait,
    workflow,
)
from idemflow.client import RunStatus
from idemflow.stores import Store
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.together import Service, crash_after, is_memo_of


def first_quote(service: Service, **options: Any) -> Any:
    @workflow("first-quote", **options)
    def quote(space: str) -> Generator[Any, Any, Any]:
        index, got = yield any_of(
            effect(service.quote("slow", 1), compensate=service.refund),
            effect(service.quote("fast", 2), compensate=service.refund),
        )
        if space.endswith("abort"):
            yield abort("changed my mind")
        return [index, got["from"]]

    return quote


def test_the_first_to_end_wins_and_a_rerun_gets_the_same_answer(store: Store, api: Api) -> None:
    space, service = new_space(), Service()
    service.held["slow"] = threading.Event()  # answers only once the test lets it
    quote = first_quote(service)
    try:
        assert api.run(quote(space), request_id=space, store=store) == [1, "fast"]
        service.release()  # the loser's answer comes late: dropped
        assert api.run(quote(space), request_id=space, store=store) == [1, "fast"]
    finally:
        service.release()
    assert service.calls == {"slow": 1, "fast": 1}  # the rerun answered from the memos


def test_a_replay_returns_the_decided_index_whatever_ends_first_then(store: Store, api: Api) -> None:
    """The process dies right after the winner's commit; in the replay the other branch would
    end first (it answers at once, the winner is held): the decision stands, and nothing is
    called again."""
    space, service = new_space(), Service()
    service.held["slow"] = threading.Event()
    quote = first_quote(service)
    dying = FaultyStore(store, crash_after("any_of", 1))
    try:
        with pytest.raises(SimulatedCrash):
            api.run(quote(space), request_id=space, store=dying)
        service.release()
        service.held = {"fast": threading.Event()}  # now "fast" would be the slow one
        assert api.run(quote(space), request_id=space, store=store) == [1, "fast"]
    finally:
        service.release()
    assert service.calls == {"slow": 1, "fast": 1}


def test_racing_executions_agree_on_one_winner(store: Store, api: Api) -> None:
    space, service = new_space(), Service()

    @workflow("race-quote")
    def quote(space: str) -> Generator[Any, Any, Any]:
        return list((yield any_of(*(effect(service.quote(who, n)) for n, who in enumerate("abc")))))

    results: list[Any] = []

    def race() -> None:
        results.append(api.run(quote(space), request_id=space, store=store))

    racers = [threading.Thread(target=race) for _ in range(3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert len(results) == 3 and results[0] == results[1] == results[2], results
    index, value = results[0]
    assert value == {"from": "abc"[index], "price": index}


def test_a_branch_that_fails_first_is_the_steps_error(store: Store, api: Api) -> None:
    space, service = new_space(), Service()
    service.down["fast"] = 10**6
    service.held["slow"] = threading.Event()
    quote = first_quote(service, retry=StepRetry(initial=0.001, maximum_attempts=2))
    try:
        with pytest.raises(ConnectionError, match="fast down"):
            api.run(quote(space), request_id=space, store=store)
    finally:
        service.release()
    assert service.calls["fast"] == 2  # retried under its policy first


def test_an_abort_undoes_the_winner_and_looks_up_the_others(store: Store, api: Api) -> None:
    """The winner is refunded with its charge; the loser, whose call was made but whose answer
    was not kept, is undone with None: the provider looks its key up. Here its call lands just
    as that undo begins (the undo waits for it), so it is found and refunded too."""
    space, service = new_space(), Service()
    service.held["slow"] = threading.Event()

    def refund(key: str, charge: dict[str, Any] | None) -> str:
        if charge is None:  # the loser: let its call land, and look for it once it has
            service.release()
            for _ in range(3000):
                if key in service.charged:
                    break
                threading.Event().wait(0.01)
        return service.refund(key, charge)

    @workflow("undone-quote")
    def quote(space: str) -> Generator[Any, Any, Any]:
        yield any_of(
            effect(service.quote("slow", 1), compensate=refund),
            effect(service.quote("fast", 2), compensate=refund),
        )
        yield abort("changed my mind")

    try:
        for _ in range(2):  # the rerun undoes nothing again
            with pytest.raises(WorkflowAborted, match="changed my mind"):
                api.run(quote(space), request_id=space, store=store)
    finally:
        service.release()
    assert service.calls == {"slow": 1, "fast": 1}
    assert len(service.refunds) == 2 and service.kept() == 0


@workflow("approval")
def approval(space: str, seconds: float) -> Generator[Any, Any, Any]:
    yield checkpoint()
    index, message = yield any_of(receive("approved"), sleep(seconds))
    later = None if index == 0 else (yield receive("approved", timeout=seconds))
    return [index, message, later]


def test_a_message_before_the_timeout_wins_under_a_worker(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(approval(space, 600), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([approval], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # it now waits for either
    waiting = api.status(store, "approval", space)
    assert waiting.status is RunStatus.RUNNING and "waiting for a message on 'approved'" in (
        waiting.waiting or ""
    )
    api.run(send("approval", space, "approved", "yes"), request_id=space + "send", store=store, clock=clock)
    deliver_all(worker, queue, clock, step=60)
    assert api.status(store, "approval", space).result == [0, "yes", None]


def test_the_timeout_wins_when_no_message_comes_and_a_late_one_is_kept(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(approval(space, 600), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([approval], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])
    clock.now += 601  # the timer is due: the any_of ends with its timeout, the receive takes nothing
    worker.handle(queue.receive()[0])
    api.run(send("approval", space, "approved", "late"), request_id=space + "send", store=store, clock=clock)
    deliver_all(worker, queue, clock, step=60)
    assert api.status(store, "approval", space).result == [1, None, "late"]  # kept for the next receive


@workflow("approval-timer-first")
def timer_first(space: str, seconds: float) -> Generator[Any, Any, Any]:
    """:func:`approval` with its branches the other way round (the timer's index is 0)."""
    yield checkpoint()
    index, message = yield any_of(sleep(seconds), receive("approved"))
    later = None if index == 1 else (yield receive("approved", timeout=seconds))
    return [1 - index, message, later]


@pytest.mark.parametrize(
    ("sent", "taken", "expected", "flow"),
    [
        (300, 700, [0, "yes", None], approval),
        (300, 700, [0, "yes", None], timer_first),  # a due timer ends at once: the receive looks first
        (700, 800, [1, None, "yes"], approval),
    ],
)
def test_a_message_taken_late_wins_only_if_it_was_sent_before_the_timeout(
    store: Store, api: Api, sent: float, taken: float, expected: Any, flow: Any
) -> None:
    """The workers are down past the timeout (600 s), so the request runs again only after it: a
    message sent before the timeout ended wins, whichever branch comes first; one sent after it
    loses to the timeout (its time came first) and is kept for the next receive, as if a worker
    had been there on time."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(flow(space, 600), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([flow], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # it now waits for either
    start = clock.now
    clock.now = start + sent
    api.run(send(flow.name, space, "approved", "yes"), request_id=space + "send", store=store, clock=clock)
    clock.now = start + taken  # the first worker back takes the wake-up (or the timer) only now
    deliver_all(worker, queue, clock, step=60)
    assert api.status(store, flow.name, space).result == expected


def test_a_store_error_on_the_message_s_take_does_not_let_the_timeout_win(store: Store, api: Api) -> None:
    """The request runs again after its timeout with a message sent before it, and the store
    refuses the receive's commit twice (DynamoDB transaction conflicts): the commit is tried again
    in line, after a backoff the second time, and the message still wins (the timer does not end
    first while the receive waits out its backoff)."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    refusing = {"left": 0}

    def plan(point: FaultPoint) -> Fault | None:
        if refusing["left"] and any(is_memo_of(op, "receive") for op in point.ops):
            refusing["left"] -= 1
            return Fault.TRANSIENT
        return None

    faulty = FaultyStore(store, plan)
    api.submit(approval(space, 600), request_id=space, store=faulty, queue=queue, clock=clock)
    worker = api.worker([approval], store=faulty, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # it now waits for either
    start = clock.now
    clock.now = start + 300
    api.run(send("approval", space, "approved", "yes"), request_id=space + "send", store=store, clock=clock)
    clock.now, refusing["left"] = start + 700, 2
    deliver_all(worker, queue, clock, step=60)
    assert [fault for _, fault in faulty.injected] == [Fault.TRANSIENT] * 2
    assert api.status(store, "approval", space).result == [0, "yes", None]


def test_under_run_a_message_or_a_timeout_ends_the_wait(store: Store, api: Api) -> None:
    @workflow("quick-approval")
    def quick(space: str) -> Generator[Any, Any, Any]:
        return list((yield any_of(receive("approved"), sleep(0.2))))

    space, other = new_space(), new_space()
    api.run(send("quick-approval", space, "approved", "yes"), request_id=space + "send", store=store)
    assert api.run(quick(space), request_id=space, store=store) == [0, "yes"]
    assert api.run(quick(other), request_id=other, store=store) == [1, None]
    assert api.run(quick(other), request_id=other, store=store) == [1, None]


@workflow("napping-kid")
def napping_kid(space: str, seconds: float) -> Generator[Any, Any, Any]:
    yield sleep(seconds)
    return "up"


@workflow("minder")
def minder(space: str, seconds: float) -> Generator[Any, Any, Any]:
    kid = yield start(napping_kid(space, seconds), request_id=space + "kid")
    return list((yield any_of(wait(kid), sleep(100))))


@pytest.mark.parametrize(("seconds", "expected"), [(10, [0, "up"]), (1000, [1, None])])
def test_a_child_or_a_timeout_under_a_worker(store: Store, api: Api, seconds: float, expected: Any) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(minder(space, seconds), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(
        api.worker([minder, napping_kid], store=store, queue=queue, clock=clock),
        queue,
        clock,
        rounds=400,
        step=5,
        settled=lambda: api.status(store, "minder", space).status is RunStatus.COMPLETED,
    )
    assert api.status(store, "minder", space).result == expected


def test_an_operators_abort_of_a_request_waiting_in_any_of_undoes_it(store: Store, api: Api) -> None:
    space, service, clock = new_space(), Service(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("held-booking")
    def held(space: str) -> Generator[Any, Any, Any]:
        yield effect(service.quote("hold", 9), compensate=service.refund)
        yield checkpoint()
        index, _ = yield any_of(receive("confirm"), sleep(3600))
        return index

    api.submit(held(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([held], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # it now waits for a confirmation or its timeout
    assert api.status(store, "held-booking", space).status is RunStatus.RUNNING and service.kept() == 9
    record = api.abort_request(store, [held], "held-booking", space, reason="operator", clock=clock)
    assert record.status is RunStatus.ABORTED and service.kept() == 0
    api.run(send("held-booking", space, "confirm", "too late"), request_id=space + "send", store=store)
    deliver_all(worker, queue, clock, step=600)  # its timer's continuation finds it ended
    assert api.status(store, "held-booking", space).status is RunStatus.ABORTED
    assert service.calls == {"hold": 1} and len(service.refunds) == 1


def test_a_worker_takes_the_first_answer_once(store: Store, api: Api) -> None:
    space, service, clock = new_space(), Service(), Clock()
    queue = MemoryQueue(clock=clock)
    service.held["slow"] = threading.Event()

    @workflow("worker-first")
    def first(space: str) -> Generator[Any, Any, Any]:
        yield checkpoint()
        index, got = yield any_of(effect(service.quote("slow", 1)), effect(service.quote("fast", 2)))
        return [index, got["from"]]

    try:
        for _ in range(2):  # a copy of the request: answered from its record
            api.submit(first(space), request_id=space, store=store, queue=queue, clock=clock)
        deliver_all(api.worker([first], store=store, queue=queue, clock=clock), queue, clock)
    finally:
        service.release()
    assert api.status(store, "worker-first", space).result == [1, "fast"]
    assert service.calls == {"slow": 1, "fast": 1}


def test_a_request_waiting_in_any_of_is_cancelled_at_once_and_resumed_where_it_stopped(
    store: Store, api: Api
) -> None:
    from idemflow.admin import retry
    from idemflow.client import send_message
    from idemflow.errors import RequestCancelledError

    space, service, clock = new_space(), Service(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("cancelled-wait")
    def waiting(space: str) -> Generator[Any, Any, Any]:
        yield checkpoint()
        index, word = yield any_of(receive("word"), sleep(3600))
        yield effect(service.quote("after", 1))
        return [index, word]

    api.submit(waiting(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([waiting], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # waiting for a word or its hour
    assert api.cancel(store, "cancelled-wait", space, reason="gave up") is RunStatus.RUNNING
    with pytest.raises(RequestCancelledError, match="gave up"):
        api.result(store, "cancelled-wait", space)
    send_message(store, "cancelled-wait", space, "word", "hello", key=space + "m", queue=queue)

    def stopped() -> bool:
        return api.status(store, "cancelled-wait", space).status is RunStatus.CANCELLED

    deliver_all(worker, queue, clock, step=600, settled=stopped)  # the word's wake-up, the hour's end
    assert stopped() and service.calls == {}
    retry(store, queue, "cancelled-wait", space)
    deliver_all(worker, queue, clock, step=600)
    assert api.status(store, "cancelled-wait", space).result == [0, "hello"] and service.calls == {"after": 1}
