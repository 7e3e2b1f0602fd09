"""Outside calls as steps, on every store and both APIs: undone when the request is undone,
retried under a policy (in place under ``run``, as counted delayed continuations under workers),
bounded in time.

The outside service is a fake payment provider that keeps its own ledger by idempotency key, as
real ones do; each test counts what it charged and refunded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

from idemflow import Idem, StepRetry, abort, atomic, checkpoint, effect, receive, send, sleep, workflow
from idemflow.admin import retry
from idemflow.client import RunStatus
from idemflow.core.effect_keys import idempotency_key
from idemflow.errors import CompensationError, EffectTimeoutError, InvalidInputError, WorkflowAborted
from idemflow.keys import RUNS_TABLE, lease_tag, memo_key
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Insert, RowRef
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.workflows import rows_of

FAST = StepRetry(initial=0.001, maximum_interval=0.002, maximum_attempts=6)
"""In-place retries that wait (almost) nothing."""


class Payments:
    """A payment provider: one charge per idempotency key, refunds by key; ``down`` calls fail."""

    def __init__(self) -> None:
        self.charges: dict[str, int] = {}
        self.refunds: dict[str, str] = {}
        self.calls = 0
        self.down = 0
        self.refunds_down = 0
        self.lock = threading.Lock()

    def charge(self, amount: int) -> Any:
        def charge(key: str) -> dict[str, Any]:
            with self.lock:
                self.calls += 1
                if self.down:
                    self.down -= 1
                    raise ConnectionError("payments down")
                self.charges.setdefault(key, amount)
                return {"charge": key, "amount": amount}

        return charge

    def refund(self, key: str, charge: dict[str, Any] | None) -> str:
        """Refund the charge made under ``key`` (the charge's own key), under the refund's own key
        derived from it; ``charge`` is None when the charge's outcome is unknown."""
        with self.lock:
            if self.refunds_down:
                self.refunds_down -= 1
                raise ConnectionError("refunds down")
            assert charge is None or charge["charge"] == key
            if key not in self.charges:
                return "nothing to refund"  # an outcome-unknown charge that never went through
            self.refunds.setdefault("refund-" + key, key)
            return "refunded"

    def kept(self) -> int:
        """Money charged and not refunded."""
        refunded = set(self.refunds.values())
        return sum(amount for key, amount in self.charges.items() if key not in refunded)


def hold(key: str) -> Any:
    def body(tx: Any) -> int:
        tx.increment(key)
        return 1

    return body


def release(key: str) -> Any:
    def body(tx: Any, _result: object) -> None:
        tx.increment(key, -1)

    return body


def booking(pay: Payments, *, retry: StepRetry | None = None, wait: bool = False) -> Any:
    """Hold a seat, charge the card (undone by a refund), then abort, or wait for a message."""

    @workflow("booking", retry=retry)
    def book(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        space = req["space"]
        yield atomic("tablea", space + "seats", hold("held"), compensate=release("held"))
        paid = yield effect(pay.charge(req["amount"]), compensate=pay.refund, name="charge")
        if wait:
            yield checkpoint()
            confirmed = yield receive("confirm", timeout=3600)
            if confirmed is None:
                yield abort("not confirmed")
            return paid
        yield atomic("tablea", space + "rooms", hold("held"), compensate=release("held"))
        if req.get("abort"):
            yield abort("no room")
        return paid

    return book


def test_an_abort_refunds_the_charge_once_in_reverse_order(store: Store, api: Api) -> None:
    space, pay = new_space(), Payments()
    book = booking(pay)
    for _ in range(3):  # the first run and two duplicates
        with pytest.raises(WorkflowAborted, match="no room"):
            api.run(book({"space": space, "amount": 30, "abort": True}), request_id=space, store=store)
    assert pay.calls == 1 and len(pay.refunds) == 1 and pay.kept() == 0
    [(undo_key, charged)] = pay.refunds.items()
    assert undo_key == "refund-" + charged  # the refund's own key, derived from the charge's
    assert rows_of(store, space) == {("tablea", "seats", "held"): 0, ("tablea", "rooms", "held"): 0}


def test_a_completed_request_keeps_its_charge(store: Store, api: Api) -> None:
    space, pay = new_space(), Payments()
    paid = api.run(booking(pay)({"space": space, "amount": 5}), request_id=space, store=store)
    assert paid["amount"] == 5 and pay.refunds == {} and pay.kept() == 5


def test_a_failing_refund_is_retried_in_place_under_its_policy(store: Store, api: Api) -> None:
    space, pay = new_space(), Payments()
    pay.down, pay.refunds_down = 2, 3  # the charge and the refund each fail a few times
    with pytest.raises(WorkflowAborted):
        api.run(
            booking(pay, retry=FAST)({"space": space, "amount": 7, "abort": True}),
            request_id=space,
            store=store,
        )
    assert pay.calls == 3 and pay.kept() == 0 and len(pay.refunds) == 1


def test_a_refund_that_cannot_complete_is_never_dropped(store: Store, api: Api) -> None:
    space, pay = new_space(), Payments()
    pay.refunds_down = 10**6
    book = booking(pay, retry=StepRetry(initial=0.001, maximum_attempts=2))
    with pytest.raises(CompensationError, match="compensate effect charge"):
        api.run(book({"space": space, "amount": 9, "abort": True}), request_id=space, store=store)
    assert pay.kept() == 9  # not refunded yet, and not reported aborted either
    pay.refunds_down = 0  # the provider is back: running the request again finishes the undo
    with pytest.raises(WorkflowAborted, match="no room"):
        api.run(book({"space": space, "amount": 9, "abort": True}), request_id=space, store=store)
    assert pay.kept() == 0 and pay.calls == 1


def test_an_effect_that_answers_too_late_fails_its_attempt(store: Store, api: Api) -> None:
    """The late calls block until the test ends (never on a sleep), so the timeout is met however
    loaded the machine is; the prompt call has a second to answer."""
    space = new_space()
    calls: list[str] = []
    released = threading.Event()

    def slow(key: str) -> str:
        calls.append(key)
        if len(calls) == 1:
            released.wait(30)  # past the timeout: this attempt counts as failed
        return "ok"

    @workflow("late")
    def late(req: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(slow, timeout=1.0, retry=FAST))

    @workflow("late-once")
    def late_once(req: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(lambda key: released.wait(30), timeout=0.05))

    try:
        assert api.run(late(space), request_id=space, store=store) == "ok"
        assert len(calls) == 2 and calls[0] == calls[1]  # the repeat carries the same key
        with pytest.raises(EffectTimeoutError, match=r"did not answer within 0\.05 s"):
            api.run(late_once(space), request_id=space + "once", store=store)
    finally:
        released.set()


def test_a_worker_retries_an_outage_for_as_long_as_the_policy_says(store: Store, api: Api) -> None:
    """Twelve failed attempts over about two simulated hours: the request still completes, and
    three copies of every message neither multiply the calls nor spend the budget faster."""
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    policy = StepRetry(initial=60, maximum_interval=900, maximum_attempts=20)

    @workflow("outage", retry=policy)
    def outage(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        return (yield effect(pay.charge(req["amount"]), name="charge"))

    pay.down = 12
    api.submit(outage({"amount": 3}), request_id=space, store=store, queue=queue, clock=clock)
    body = queue.receive()[0].body
    queue.send(body)
    queue.send(body)  # three copies of the continuation in all
    worker = api.worker([outage], store=store, queue=queue, clock=clock, max_deliveries=2)
    deliver_all(worker, queue, clock, rounds=400, step=300)
    done = api.status(store, "outage", space)
    assert done.status is RunStatus.COMPLETED and done.result == {
        "charge": done.result["charge"],
        "amount": 3,
    }
    assert pay.calls <= 13 + 2  # one call per attempt, plus at most the copies' first race
    assert pay.kept() == 3


def test_a_worker_fails_a_request_once_its_policy_ends_and_names_the_attempts(store: Store, api: Api) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("doomed", retry=StepRetry(initial=10, maximum_attempts=4))
    def doomed(req: int) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        return (yield effect(pay.charge(req), name="charge"))

    pay.down = 10**6
    pending = api.submit(doomed(1), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(api.worker([doomed], store=store, queue=queue, clock=clock), queue, clock, rounds=100)
    failed = api.status(store, "doomed", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert (failed.failure.attempts, pay.calls) == (4, 4) and "payments down" in failed.failure.reason
    assert pending.status() is RunStatus.FAILED


def test_a_non_retryable_error_fails_at_once(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    calls: list[int] = []

    def declined(key: str) -> None:
        calls.append(1)
        raise PermissionError("card declined")

    @workflow("declined", retry=StepRetry(non_retryable=(PermissionError,)))
    def decline(req: int) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        return (yield effect(declined))

    api.submit(decline(1), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(api.worker([decline], store=store, queue=queue, clock=clock), queue, clock)
    failed = api.status(store, "declined", space)
    assert failed.failure is not None and failed.failure.attempts == 1 and calls == [1]


def test_on_failure_compensate_refunds_through_a_refund_outage(store: Store, api: Api) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("saga", on_failure="compensate", retry=StepRetry(initial=5, maximum_attempts=3))
    def saga(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        yield effect(pay.charge(req["amount"]), compensate=pay.refund, name="charge")
        yield atomic("tablea", req["space"] + "rooms", lambda tx: tx.get("missing")["boom"], name="room")
        return "booked"

    pay.refunds_down = 2  # the refund fails twice: its third and last attempt refunds
    api.submit(saga({"space": space, "amount": 12}), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([saga], store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock, rounds=100)
    ended = api.status(store, "saga", space)
    assert ended.status is RunStatus.ABORTED, ended
    assert pay.kept() == 0 and len(pay.refunds) == 1
    pay.refunds_down = 10**6  # a refund that never succeeds: failed, naming it, never "aborted"
    again = saga({"space": space, "amount": 6})
    api.submit(again, request_id=space + "x", store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock, rounds=100)
    stuck = api.status(store, "saga", space + "x")
    assert stuck.status is RunStatus.FAILED and stuck.failure is not None
    assert stuck.failure.reason == (
        "compensation of step 1 (compensate effect charge) failed: ConnectionError: refunds down"
    )
    assert pay.kept() == 6


@pytest.mark.blocking_api
def test_an_operators_abort_refunds_a_waiting_booking(store: Store, api: Api) -> None:
    from idemflow import admin

    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    book = booking(pay, wait=True)
    api.submit(book({"space": space, "amount": 40}), request_id=space, store=store, queue=queue, clock=clock)
    api.worker([book], store=store, queue=queue, clock=clock).handle(queue.receive()[0])  # it now waits
    assert api.status(store, "booking", space).status is RunStatus.RUNNING and pay.kept() == 40
    pay.refunds_down = 1
    with pytest.raises(CompensationError):  # the refund failed: the record says so, never aborted
        admin.abort_request(store, [book], "booking", space, reason="operator", clock=clock)
    failed = api.status(store, "booking", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert "compensate effect charge" in failed.failure.reason
    record = admin.abort_request(store, [book], "booking", space, reason="operator", clock=clock)
    assert record.status is RunStatus.ABORTED and pay.kept() == 0 and len(pay.refunds) == 1
    assert rows_of(store, space) == {("tablea", "seats", "held"): 0}


def test_an_operators_abort_waits_for_a_refund_no_longer_than_told(store: Store, api: Api) -> None:
    """Under a policy that retries for an hour, an operator's abort gives the undo back after its
    wait: the request ends failed naming it, and a retry lets workers finish the refund."""
    from idemflow import admin
    from idemflow.admin import retry as retry_request

    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    book = booking(pay, wait=True, retry=StepRetry(initial=3600, expiry=7200))
    api.submit(book({"space": space, "amount": 40}), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([book], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # it now waits for its confirmation
    pay.refunds_down = 10**6
    started = time.monotonic()
    with pytest.raises(CompensationError):
        admin.abort_request(store, [book], "booking", space, reason="operator", clock=clock, wait=5)
    assert time.monotonic() - started < 60  # not the policy's hour between attempts
    failed = api.status(store, "booking", space)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert "compensate effect charge" in failed.failure.reason and pay.kept() == 40
    pay.refunds_down = 0
    retry_request(store, queue, "booking", space)
    deliver_all(worker, queue, clock)
    assert api.status(store, "booking", space).status is RunStatus.ABORTED
    assert pay.kept() == 0 and len(pay.refunds) == 1


@pytest.mark.blocking_api
@pytest.mark.parametrize("wait", [-1, float("nan"), "30"])
def test_an_abort_wait_that_is_not_seconds_is_refused(wait: Any) -> None:
    from idemflow import admin
    from idemflow.stores import MemoryStore

    with pytest.raises(InvalidInputError, match="abort wait"):
        admin.abort_request(MemoryStore(), [], "booking", "r-1", reason="operator", wait=wait)


@pytest.mark.blocking_api
@pytest.mark.parametrize(
    "options",
    [
        {"initial": 0},
        {"initial": float("nan")},
        {"backoff": 0.5},
        {"maximum_attempts": 0},
        {"maximum_attempts": True},
        {"expiry": -1},
        {"non_retryable": [ValueError]},
        {"non_retryable": (int,)},
    ],
)
def test_a_bad_policy_is_refused_before_anything_runs(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match="StepRetry"):
        StepRetry(**options)


@pytest.mark.blocking_api
def test_bad_effect_options_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="timeout"):
        effect(lambda key: None, timeout=0)
    with pytest.raises(InvalidInputError, match="compensate"):
        effect(lambda key: None, compensate="refund")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="retry"):
        effect(lambda key: None, retry=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="retry"):
        workflow("w", retry={"attempts": 3})  # type: ignore[arg-type]


def test_copies_of_a_submit_cost_the_workers_one_execution(store: Store, api: Api) -> None:
    """Four copies of a request, two of them racing the first: one continuation is queued, one
    worker execution finishes it, and every copy answers from the run record."""
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("copied")
    def copied(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req["space"] + "seats", hold("held"))
        yield checkpoint()
        return (yield effect(pay.charge(req["amount"]), name="charge"))

    def copy() -> None:
        api.submit(
            copied({"space": space, "amount": 8}), request_id=space, store=store, queue=queue, clock=clock
        )

    copy()
    racers = [threading.Thread(target=copy) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    copy()
    assert queue.approximate_size() == 1
    worker = api.worker([copied], store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock)
    assert (worker.stats.completed, worker.stats.duplicates) == (1, 0)
    assert api.status(store, "copied", space).result == {
        "charge": next(iter(pay.charges)),
        "amount": 8,
    }
    assert rows_of(store, space) == {("tablea", "seats", "held"): 1} and pay.calls == 1


@pytest.mark.blocking_api
def test_an_abort_that_lands_while_the_charge_is_in_flight_refunds_it(store: Store, api: Api) -> None:
    """The operator aborts while a worker's charge is on its way: the charge goes through after
    the abort memo was written. Whoever compensates refunds it by its key, exactly once."""
    from idemflow import admin

    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    in_flight, release_call = threading.Event(), threading.Event()

    def slow_charge(key: str) -> dict[str, Any]:
        in_flight.set()
        release_call.wait(10)
        return pay.charge(15)(key)

    @workflow("in-flight", retry=StepRetry(initial=1, maximum_attempts=3))
    def in_flight_booking(req: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        yield effect(slow_charge, compensate=pay.refund, name="charge")
        return "booked"

    api.submit(in_flight_booking(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([in_flight_booking], store=store, queue=queue, clock=clock)
    message = queue.receive()[0]
    running = threading.Thread(target=worker.handle, args=(message,))
    running.start()
    assert in_flight.wait(10)
    record = admin.abort_request(
        store, [in_flight_booking], "in-flight", space, reason="operator", clock=clock
    )
    assert record.status is RunStatus.ABORTED
    release_call.set()  # the charge goes through now, after the abort
    running.join(10)
    assert pay.calls == 1 and len(pay.charges) == 1
    assert pay.kept() == 0 and len(pay.refunds) == 1  # refunded once, though the abort came first
    assert api.status(store, "in-flight", space).status is RunStatus.ABORTED


def test_a_copy_on_another_version_enqueues_nothing_and_answers_from_the_record(
    store: Store, api: Api
) -> None:
    """During a rolling deploy a copy may reach a server holding the other version: it cannot
    replay that code, so it answers from the run record and leaves the continuation to the first."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)

    def flow(version: int) -> Any:
        @workflow("rolling", version=version)
        def rolling(req: str) -> Generator[Idem[Any], Any, Any]:
            yield atomic("tablea", req + "v", hold("n"))
            yield checkpoint()
            return f"v{version}"

        return rolling

    old, new = flow(1), flow(2)
    api.submit(old(space), request_id=space, store=store, queue=queue, clock=clock)
    pending = api.submit(new(space), request_id=space, store=store, queue=queue, clock=clock)
    assert queue.approximate_size() == 1 and pending.status() is RunStatus.RUNNING
    deliver_all(api.worker([old, new], store=store, queue=queue, clock=clock), queue, clock)
    assert pending.result(timeout=0) == "v1" and rows_of(store, space) == {("tablea", "v", "n"): 1}


def test_a_copy_on_another_version_answers_as_the_first_that_refuses_before_its_checkpoint(
    store: Store,
    api: Api,
) -> None:
    """The copy cannot replay the first's steps, so it waits for them: a request the first refuses
    before its checkpoint is refused to the copy too, never accepted (202) with nothing to run."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    deciding, decide = threading.Event(), threading.Event()

    def seat_free(key: str) -> bool:
        deciding.set()
        decide.wait(10)
        return False

    def flow(version: int) -> Any:
        @workflow("refusing", version=version)
        def refusing(req: str) -> Generator[Idem[Any], Any, Any]:
            yield atomic("tablea", req + "v", hold("n"))  # claims the request
            if not (yield effect(seat_free, name="seat")):
                yield abort("sold out")
            yield checkpoint()
            return f"v{version}"

        return refusing

    old, new = flow(1), flow(2)
    answers: dict[str, Any] = {}
    looks = 0

    def copy_clock() -> float:  # the copy reads the clock at every look at the first's progress
        nonlocal looks
        looks += 1
        if looks > WALL_READS_BEFORE_WATCHING:
            decide.set()
        return clock()

    def send(name: str, wf: Any, wall: Any) -> None:
        answers[name] = api.submit(wf(space), request_id=space, store=store, queue=queue, clock=wall).status()

    first = threading.Thread(target=send, args=("first", old, clock))
    first.start()
    assert deciding.wait(10)
    copy = threading.Thread(target=send, args=("copy", new, copy_clock))
    copy.start()
    first.join(10)
    copy.join(10)
    assert answers["first"] is RunStatus.ABORTED
    assert answers["copy"] is RunStatus.ABORTED
    assert queue.approximate_size() == 0
    assert decide.is_set()  # the first decided while the copy watched (or the test proves nothing)


WALL_READS_BEFORE_WATCHING = 3
"""How often ``submit`` reads its clock before it meets the claim of the first (counted)."""


def _doubled(queue: MemoryQueue, clock: Clock, seconds: float) -> None:
    """Move time on and deliver the due pointer twice, as a redelivery or a racing relay would."""
    clock.now += seconds
    message = queue.receive()[0]
    queue.send(message.body)
    queue.nack(message)


def test_a_stray_continuation_is_read_once_and_never_multiplies(store: Store, api: Api) -> None:
    """A second pointer to a request waiting on a timer is dropped after one read: each wait
    that follows queues one continuation, not one per copy."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("three-naps")
    def three_naps(req: str) -> Generator[Idem[Any], Any, Any]:
        for _ in range(3):
            yield sleep(60)
        return "rested"

    pending = api.submit(three_naps(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([three_naps], store=store, queue=queue, clock=clock)
    _doubled(queue, clock, 61)
    deliver_all(worker, queue, clock, step=61)
    assert pending.result(timeout=0) == "rested"
    stats = worker.stats
    assert (stats.suspended, stats.completed, stats.duplicates) == (2, 1, 1)


def test_a_timer_a_message_made_obsolete_is_dropped_after_one_read(store: Store, api: Api) -> None:
    """A receive's timeout pointer outlives the message that woke the request: when it comes,
    the request waits on its next timer, whose continuation it must not copy."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("confirmed")
    def confirmed(req: str) -> Generator[Idem[Any], Any, Any]:
        answer = yield receive("confirm", timeout=600)
        yield sleep(3600)  # a reminder, long after the confirmation's timeout
        yield sleep(60)
        return answer

    @workflow("confirmer")
    def confirmer(req: str) -> Generator[Idem[Any], Any, Any]:
        yield send("confirmed", req, "confirm", "yes")
        return None

    pending = api.submit(confirmed(space), request_id=space, store=store, queue=queue, clock=clock)
    api.submit(confirmer(space), request_id=space + "-c", store=store, queue=queue, clock=clock)
    worker = api.worker([confirmed], store=store, queue=queue, clock=clock)  # submit ran the sender
    deliver_all(worker, queue, clock, rounds=200, step=300)
    assert pending.result(timeout=0) == "yes"
    stats = worker.stats
    assert stats.completed == 1 and stats.duplicates == 1  # the timeout's pointer, read once
    # Woken by the message up to the long sleep, its hops (one per 15 minutes), the last sleep.
    assert stats.suspended == 1 + (3600 // 900 - 1) + 1


class LateProvider(Payments):
    """A provider that records a charge some time after it was sent (``land`` records them): the
    undo of a call whose holder died in it looks before the charge is there."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[str, int] = {}

    def land(self) -> None:
        with self.lock:
            for key, amount in self.sent.items():
                self.charges.setdefault(key, amount)


def died_in_the_call(
    store: Store, workflow_name: str, request_id: str, pay: LateProvider, amount: int
) -> None:
    """What a worker SIGKILLed inside the charge (step 1) leaves: the charge sent to the provider
    under its key, and the call's lease row, never given back (already past its end)."""

    pay.sent[idempotency_key(workflow_name, request_id, 1)] = amount
    lease: Any = {"holder": "gone", "until": time.time() - 1}
    ref = RowRef(RUNS_TABLE, request_id, memo_key(workflow_name, request_id, lease_tag(1)))
    store.commit([Insert(ref, lease, encode(lease), None)])


def billing(pay: LateProvider, **options: Any) -> Any:
    @workflow("billing", **options)
    def bill(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        charged = yield effect(
            pay.charge(req["amount"]), compensate=pay.refund, timeout=60, lease=30, name="charge"
        )
        return charged

    return bill


@pytest.mark.exact_calls  # the dead worker's lease row is written by hand, as one plain commit
def test_an_abort_after_the_holder_died_in_the_charge_refunds_what_lands_later(
    store: Store, api: Api
) -> None:
    """The operator's abort cannot end ``aborted`` while the charge may still land: it ends
    ``failed`` naming the wait; once the call's time is over, workers undo it again, and the
    charge that landed meanwhile is refunded."""
    space, pay, clock = new_space(), LateProvider(), Clock()
    queue = MemoryQueue(clock=clock)
    bill = billing(pay)
    api.submit(bill({"amount": 50}), request_id=space, store=store, queue=queue, clock=clock)
    died_in_the_call(store, "billing", space, pay, 50)
    with pytest.raises(CompensationError, match="may still land"):
        api.abort_request(store, [bill], "billing", space, reason="cancelled", clock=clock, wait=0)
    held = api.status(store, "billing", space)
    assert held.status is RunStatus.FAILED and held.failure is not None
    assert "compensate effect charge" in held.failure.reason and pay.refunds == {}
    pay.land()  # the dead worker's charge reaches the provider's books after the first undo
    clock.now += 61
    retry(store, queue, "billing", space)
    deliver_all(api.worker([bill], store=store, queue=queue, clock=clock), queue, clock)
    ended = api.status(store, "billing", space)
    assert ended.status is RunStatus.ABORTED and ended.reason == "cancelled"
    assert len(pay.charges) == 1 and pay.kept() == 0 and len(pay.refunds) == 1


@pytest.mark.exact_calls  # the dead worker's lease row is written by hand, as one plain commit
def test_a_deadline_abort_after_the_holder_died_waits_for_the_call_as_a_timer(store: Store, api: Api) -> None:
    space, pay, clock = new_space(), LateProvider(), Clock()
    queue = MemoryQueue(clock=clock)
    bill = billing(pay, on_failure="compensate")
    api.submit(
        bill({"amount": 70}), request_id=space, store=store, queue=queue, clock=clock, deadline=clock.now + 5
    )
    died_in_the_call(store, "billing", space, pay, 70)
    worker = api.worker([bill], store=store, queue=queue, clock=clock)
    clock.now += 10
    worker.handle(queue.receive()[0])  # past the deadline: undone at the charge, then waits
    waiting = api.status(store, "billing", space)
    assert waiting.status is RunStatus.RUNNING and "can no longer land" in str(waiting.waiting)
    pay.land()
    deliver_all(worker, queue, clock, step=30)
    ended = api.status(store, "billing", space)
    assert ended.status is RunStatus.ABORTED and "deadline exceeded" in str(ended.reason)
    assert len(pay.charges) == 1 and pay.kept() == 0
