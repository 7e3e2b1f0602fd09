"""``all_of``: a workflow's outside calls, children and receives side by side, on every store
and both APIs (issue 43).

Concurrency is shown without timing: the service's calls wait for each other on a barrier, so
they can only answer if they were all made at once (a sequential run breaks the barrier). Each
branch is a step of its own: a crash after any branch's memo replays it without its call, a
failing branch is retried under its policy, and an undo refunds every branch that charged.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from idemflow import (
    InvalidInputError,
    LimitGroup,
    NonDeterminismError,
    StepRetry,
    WorkflowAborted,
    abort,
    all_of,
    any_of,
    atomic,
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
from idemflow.testing import FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.together import Service, crash_after, kept_memos

FAST = StepRetry(initial=0.001, maximum_interval=0.002, maximum_attempts=4)


def three_quotes(
    service: Service, *, name: str = "quotes", lease: float | None = None, **options: Any
) -> Any:
    @workflow(name, **options)
    def quotes(space: str) -> Generator[Any, Any, Any]:
        got = yield all_of(
            *(
                effect(service.quote(who, price), lease=lease, compensate=service.refund)
                for who, price in (("a", 30), ("b", 20), ("c", 25))
            )
        )
        return {"cheapest": min(quote["price"] for quote in got), "from": [quote["from"] for quote in got]}

    return quotes


def test_all_of_makes_its_calls_at_once_and_returns_their_results_in_order(store: Store, api: Api) -> None:
    space, service = new_space(), Service(together=3)
    quotes = three_quotes(service)
    for _ in range(3):  # the first run, then duplicates: answered from the memos
        assert api.run(quotes(space), request_id=space, store=store) == {
            "cheapest": 20,
            "from": ["a", "b", "c"],
        }
    assert service.calls == {"a": 1, "b": 1, "c": 1}
    assert len(service.keys) == 3  # each call its own idempotency key


def test_coroutine_calls_run_side_by_side(store: Store, api: Api) -> None:
    space, service = new_space(), Service(together=3)

    @workflow("async-quotes")
    async def quotes(space: str) -> Any:
        got = await all_of(*(effect(service.async_quote(who, 10)) for who in ("a", "b", "c")))
        return [quote["from"] for quote in got]

    assert api.run(quotes(space), request_id=space, store=store) == ["a", "b", "c"]
    assert service.calls == {"a": 1, "b": 1, "c": 1}


@pytest.mark.parametrize("memos", [1, 2, 3])
def test_a_crash_after_a_branch_memo_replays_it_without_its_call(store: Store, api: Api, memos: int) -> None:
    """The process dies right after the commit of the ``memos``-th branch: the replay calls only
    the branches whose answer was not kept (their first call's answer died with the process)."""
    space, service = new_space(), Service(together=3)  # all three in progress before any answers
    quotes = three_quotes(service)
    with pytest.raises(SimulatedCrash):
        api.run(quotes(space), request_id=space, store=FaultyStore(store, crash_after("effect", memos)))
    before = sum(service.calls.values())
    assert before == 3  # every call was made at once, before any memo
    # The memos-th landed; an earlier branch's commit may have been still resending after a
    # transaction conflict when the process died, its memo lost with it.
    kept = kept_memos(store, space, "effect")
    assert 1 <= kept <= memos, kept
    service.barrier = None  # the replay makes fewer calls: none waits for the others
    assert api.run(quotes(space), request_id=space, store=store)["cheapest"] == 20
    assert sum(service.calls.values()) - before == 3 - kept
    assert max(service.keys.values()) <= 2 and len(service.keys) == 3  # a repeat has the same key


def test_racing_executions_make_each_leased_call_once(store: Store, api: Api) -> None:
    import threading

    space, service = new_space(), Service()
    quotes = three_quotes(service, lease=30)
    results: list[Any] = []

    def race() -> None:
        results.append(api.run(quotes(space), request_id=space, store=store))

    racers = [threading.Thread(target=race) for _ in range(3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert results == [{"cheapest": 20, "from": ["a", "b", "c"]}] * 3
    assert service.calls == {"a": 1, "b": 1, "c": 1}


def test_a_failing_branch_is_retried_under_its_policy_then_fails_the_step(store: Store, api: Api) -> None:
    space, service = new_space(), Service()
    service.down["b"] = 2  # fails twice, then answers: retried in place
    quotes = three_quotes(service, retry=FAST)
    assert api.run(quotes(space), request_id=space, store=store)["cheapest"] == 20
    assert service.calls == {"a": 1, "b": 3, "c": 1}

    other, failing = new_space(), Service()
    failing.down["c"] = 10**6
    doomed = three_quotes(failing, name="doomed", retry=FAST)
    with pytest.raises(ConnectionError, match="c down"):  # as a lone effect would fail
        api.run(doomed(other), request_id=other, store=store)
    assert failing.calls == {"a": 1, "b": 1, "c": 4}
    failing.down["c"] = 0  # the service is back: a rerun calls only the branch that failed
    assert api.run(doomed(other), request_id=other, store=store)["cheapest"] == 20
    assert failing.calls == {"a": 1, "b": 1, "c": 5}


def test_a_worker_retries_a_failing_branch_and_fails_the_request_naming_it(store: Store, api: Api) -> None:
    space, service, clock = new_space(), Service(), Clock()
    queue = MemoryQueue(clock=clock)
    service.down["b"] = 10**6
    policy = StepRetry(initial=10, maximum_attempts=3)

    @workflow("worker-quotes", retry=policy)
    def quotes(space: str) -> Generator[Any, Any, Any]:
        yield checkpoint()
        return (yield all_of(*(effect(service.quote(who, 5)) for who in ("a", "b", "c"))))

    api.submit(quotes(space), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(api.worker([quotes], store=store, queue=queue, clock=clock), queue, clock, rounds=100)
    failed = api.status(store, "worker-quotes", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert (failed.failure.step, failed.failure.identity, failed.failure.attempts) == (2, "effect b", 3)
    assert service.calls == {"a": 1, "b": 3, "c": 1}  # the others' answers kept from the first delivery


def test_an_abort_refunds_every_branch_that_charged(store: Store, api: Api) -> None:
    space, service = new_space(), Service()

    @workflow("book-all")
    def book(space: str) -> Generator[Any, Any, Any]:
        yield all_of(*(effect(service.quote(who, 10), compensate=service.refund) for who in "abc"))
        yield abort("no room")

    for _ in range(2):
        with pytest.raises(WorkflowAborted, match="no room"):
            api.run(book(space), request_id=space, store=store)
    assert service.calls == {"a": 1, "b": 1, "c": 1} and len(service.refunds) == 3 and service.kept() == 0


def test_a_request_compensated_after_a_failing_branch_refunds_the_others(store: Store, api: Api) -> None:
    space, service, clock = new_space(), Service(), Clock()
    queue = MemoryQueue(clock=clock)
    service.down["c"] = 10**6

    @workflow("saga-all", on_failure="compensate", retry=StepRetry(initial=5, maximum_attempts=2))
    def saga(space: str) -> Generator[Any, Any, Any]:
        yield checkpoint()
        return (yield all_of(*(effect(service.quote(who, 7), compensate=service.refund) for who in "abc")))

    api.submit(saga(space), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(api.worker([saga], store=store, queue=queue, clock=clock), queue, clock, rounds=100)
    assert api.status(store, "saga-all", space).status is RunStatus.ABORTED
    assert service.kept() == 0 and len(service.refunds) == 2  # c never charged: nothing to refund


@workflow("pricer")
def pricer(space: str, price: int) -> Generator[Any, Any, Any]:
    return (yield effect(SERVICES[space].quote(f"kid-{price}", price), name="price"))


SERVICES: dict[str, Service] = {}


@workflow("shop")
def shop(space: str) -> Generator[Any, Any, Any]:
    kids = []
    for price in (3, 4):
        kids.append((yield start(pricer(space, price), request_id=f"{space}{price}")))
    return [quote["price"] for quote in (yield all_of(*(wait(kid) for kid in kids)))]


def test_under_run_children_waited_for_together_run_side_by_side(store: Store, api: Api) -> None:
    space = new_space()
    SERVICES[space] = Service(together=2)  # each child's call waits for the other's
    assert api.run(shop(space), request_id=space, store=store) == [3, 4]
    assert api.run(shop(space), request_id=space, store=store) == [3, 4]
    assert SERVICES[space].calls == {"kid-3": 1, "kid-4": 1}


def test_under_a_worker_a_parent_waits_for_its_children_together(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    SERVICES[space] = Service()
    queue = MemoryQueue(clock=clock)
    api.submit(shop(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([shop, pricer], store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock, rounds=100)
    assert api.status(store, "shop", space).result == [3, 4]
    assert SERVICES[space].calls == {"kid-3": 1, "kid-4": 1}


def test_branches_before_a_checkpoint_are_journaled_for_the_worker(store: Store, api: Api) -> None:
    space, service, clock = new_space(), Service(together=2), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("early-quotes")
    def quotes(space: str) -> Generator[Any, Any, Any]:
        got = yield all_of(effect(service.quote("a", 1)), receive("go"), effect(service.quote("b", 2)))
        yield checkpoint()
        yield atomic("tablea", space + "done", lambda tx: tx.put("n", 1), name="done")
        return [got[0]["price"], got[1], got[2]["price"]]

    api.run(send("early-quotes", space, "go", "now"), request_id=space + "send", store=store)
    pending = api.submit(quotes(space), request_id=space, store=store, queue=queue, clock=clock)
    assert pending.status() is RunStatus.RUNNING
    deliver_all(api.worker([quotes], store=store, queue=queue, clock=clock), queue, clock)
    assert api.status(store, "early-quotes", space).result == [1, "now", 2]
    assert service.calls == {"a": 1, "b": 1}


def test_a_branch_changed_under_a_request_is_non_determinism(store: Store, api: Api) -> None:
    space, service = new_space(), Service()

    def changing(second: str) -> Any:
        @workflow("changing")
        def flow(space: str) -> Generator[Any, Any, Any]:
            return (yield all_of(effect(service.quote("a", 1)), effect(service.quote(second, 2))))

        return flow

    with pytest.raises(SimulatedCrash):  # both memos kept, the request left unfinished
        api.run(changing("b")(space), request_id=space, store=FaultyStore(store, crash_after("effect", 2)))
    with pytest.raises(NonDeterminismError, match="effect z"):
        api.run(changing("z")(space), request_id=space, store=store)
    assert service.calls == {"a": 1, "b": 1}


BAD: list[tuple[str, Any]] = [
    ("nothing", lambda: all_of()),
    ("nothing to race", lambda: any_of()),
    ("not a step", lambda: all_of(effect(lambda key: 1), "later")),
    ("a list", lambda: all_of([effect(lambda key: 1)])),
    ("an atomic step", lambda: all_of(atomic("tablea", "p", lambda tx: 1))),
    ("a start", lambda: any_of(start(pricer("x", 1), request_id="kid"))),
    ("a sleep in all_of", lambda: all_of(effect(lambda key: 1), sleep(1))),
    ("a block in a block", lambda: any_of(all_of(effect(lambda key: 1)), sleep(1))),
    ("a chain of steps", lambda: all_of(effect(lambda key: 1).map(str))),
    ("a bare value", lambda: any_of(None)),
]


@pytest.mark.parametrize("make", [make for _, make in BAD], ids=[name for name, _ in BAD])
def test_bad_branches_are_refused_before_anything_is_written(store: Store, api: Api, make: Any) -> None:
    with pytest.raises(InvalidInputError):
        make()

    @workflow("bad-together")
    def bad(space: str) -> Generator[Any, Any, Any]:
        return (yield make())

    space = new_space()
    with pytest.raises(InvalidInputError):
        api.run(bad(space), request_id=space, store=store)
    assert api.status(store, "bad-together", space).status is RunStatus.UNKNOWN


@workflow("sleepy-kid")
def sleepy_kid(space: str, n: int) -> Generator[Any, Any, Any]:
    yield sleep(10_000)
    return n


@workflow("waiting-parent")
def waiting_parent(space: str) -> Generator[Any, Any, Any]:
    kids = []
    for n in (1, 2):
        kids.append((yield start(sleepy_kid(space, n), request_id=f"{space}kid{n}")))
    return (yield all_of(*(wait(kid) for kid in kids), receive("go")))


def test_an_operators_abort_of_a_parent_waiting_for_all_aborts_its_children(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(waiting_parent(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([waiting_parent, sleepy_kid], store=store, queue=queue, clock=clock)
    while received := queue.receive():  # each child's first delivery: asleep now
        worker.handle(received[0])
    assert api.status(store, "waiting-parent", space).status is RunStatus.RUNNING
    flows = [waiting_parent, sleepy_kid]
    record = api.abort_request(store, flows, "waiting-parent", space, reason="operator", clock=clock)
    assert record.status is RunStatus.ABORTED
    for n in (1, 2):
        assert api.status(store, "sleepy-kid", f"{space}kid{n}").status is RunStatus.ABORTED


def test_a_limit_group_holds_across_the_branches(store: Store, api: Api) -> None:
    """Three branches calling one provider of one call at a time: each waits for the group's slot
    (beside the others, holding none), and no two calls overlap."""
    import threading

    space, one = new_space(), LimitGroup(new_space().rstrip("-"), concurrency=1)
    inside, most, lock = [0], [0], threading.Lock()

    def call(n: int) -> Any:
        def made(key: str) -> int:
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            threading.Event().wait(0.05)
            with lock:
                inside[0] -= 1
            return n

        made.__qualname__ = f"call-{n}"
        return made

    @workflow("grouped")
    def grouped(space: str) -> Generator[Any, Any, Any]:
        return (yield all_of(*(effect(call(n), group=one, timeout=10) for n in range(3))))

    assert api.run(grouped(space), request_id=space, store=store) == [0, 1, 2]
    assert most == [1]
