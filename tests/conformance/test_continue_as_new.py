"""``continue_as_new`` on every store and both APIs: a subscription that renews for many periods
under simulated time (weeks in seconds) with expiry applied as each service applies it, keeps the
rows of one period; a crash at every commit around the switch neither loses the next input nor
runs a period twice; racing and duplicate executions charge each period once; messages, events and
status follow the latest incarnation; bad input is refused before anything is written."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

import idemflow
from idemflow import (
    ContinueAsNewError,
    InvalidValueError,
    LimitExceededError,
    RetryPolicy,
    Tx,
    all_of,
    atomic,
    checkpoint,
    continue_as_new,
    effect,
    receive,
    send,
    set_event,
    sleep,
    workflow,
)
from idemflow.admin import show
from idemflow.client import RunStatus, send_message
from idemflow.core.effect_keys import idempotency_key
from idemflow.core.memos import incarnation_number
from idemflow.keys import RUNS_TABLE, parse_memo_key
from idemflow.records import RunRecord, run_ref
from idemflow.stores import Store
from idemflow.stores.base import CommitOutcome, Op, Put
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash, StoreWrapper
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.expiries import expire_as_the_service_does, expiries

DAY = 86400.0
PERIOD = DAY
"""A subscription's period: a day of simulated time (a week's retention holds seven of them)."""
RETENTION = 7 * DAY
PERIODS = 12
POLICY = RetryPolicy(retention=RETENTION)
CALLS: dict[str, int] = {}
"""Calls of each period's outside charge, by ``space/period``."""


class Expiring(Clock):
    """A simulated clock that a ``run``'s timers move on to their end, applying expiry to ``store``
    at each move as the backend's service does (DynamoDB's TTL by date, in any order; a sweep)."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def skip_to(self, when: float) -> None:
        self.now = max(self.now, when)
        expire_as_the_service_does(self.store, self.now)


def charge(space: str, period: int) -> Any:
    def call(key: str) -> str:
        CALLS[f"{space}/{period}"] = CALLS.get(f"{space}/{period}", 0) + 1
        return key

    return effect(call, name="charge")


def bill(period: int) -> Any:
    def body(tx: Tx) -> int:
        tx.increment("billed")
        tx.put(f"p{period % 3}", period)  # the data rows stay bounded too
        return period

    return body


@workflow("subscription")
def subscription(space: str, period: int, last: int) -> Generator[Any, Any, int]:
    yield checkpoint()  # submit answers here: every period runs under the workers
    yield charge(space, period)
    yield atomic("accounts", space, bill(period), name="bill")
    yield set_event("period", period)
    yield sleep(PERIOD)
    if period < last:
        yield continue_as_new(space, period + 1, last)
    return period


def request_rows(store: Store, space: str) -> dict[tuple[str, str, str], float]:
    """The bookkeeping rows of the request ``space`` (data rows, which keep no expiry, left out)."""
    return {
        where: at
        for where, at in expiries(store).items()
        if at is not None and (where[1] == space or f"|{space}|" in where[2])
    }


def record(store: Store, name: str, space: str) -> RunRecord:
    row = store.read(run_ref(name, space))
    assert row is not None
    return RunRecord.from_json(row.value)


def billed(store: Store, space: str) -> Any:
    row = store.read(atomic_ref(space))
    return None if row is None else row.value


def atomic_ref(space: str) -> Any:
    from idemflow.keys import data_key
    from idemflow.stores.base import RowRef

    return RowRef("accounts", space, data_key("billed"))


def test_a_subscription_renews_for_many_periods_under_run_keeping_one_periods_rows(
    store: Store, api: Api
) -> None:
    """Thirty daily periods, a week's retention, expiry applied at every timer: each period is
    charged and billed once, the caller gets the last period's result, a duplicate of the first
    input answers it without charging, and the request holds what a one-period request holds."""
    space, single = new_space(), new_space()
    clock = Expiring(store)
    assert (
        api.run(subscription(single, 1, 1), request_id=single, store=store, clock=clock, policy=POLICY) == 1
    )
    one_period = len(request_rows(store, single))
    ran = api.run(subscription(space, 1, PERIODS), request_id=space, store=store, clock=clock, policy=POLICY)
    assert ran == PERIODS
    assert [CALLS.get(f"{space}/{n}") for n in range(1, PERIODS + 1)] == [1] * PERIODS
    assert billed(store, space) == PERIODS
    assert len(request_rows(store, space)) == one_period
    again = api.run(
        subscription(space, 1, PERIODS), request_id=space, store=store, clock=clock, policy=POLICY
    )
    assert again == PERIODS and billed(store, space) == PERIODS
    status = api.status(store, "subscription", space)
    assert (status.status, status.result, status.incarnation) == (RunStatus.COMPLETED, PERIODS, PERIODS)
    assert api.get_event(store, "subscription", space, "period") == PERIODS
    view = show(store, [], "subscription", space)  # without the code: the last incarnation's steps
    assert view.incarnation == PERIODS and f"incarnation {PERIODS}" in view.lines()[0]
    assert [step.name for step in view.steps][:3] == ["charge", "bill", "period"], view.lines()


def deliver(worker: Any, queue: MemoryQueue, clock: Clock, store: Store, *, rounds: int = 2000) -> None:
    """Every message as it comes due, the clock moving a quarter period while only delayed ones
    are left, expiry applied as the backend's service does at each move, until the queue is empty."""
    for _ in range(rounds):
        received = queue.receive()
        if received:
            worker.handle(received[0])
            continue
        if queue.approximate_size() == 0:
            return
        clock.now += PERIOD / 4
        expire_as_the_service_does(store, clock.now)
    raise AssertionError(f"{queue.approximate_size()} message(s) still queued")


@pytest.mark.parametrize("kept", [RETENTION, PERIOD / 2], ids=["week", "half-a-period"])
def test_a_subscription_renews_under_workers_each_incarnation_a_continuation(
    store: Store, api: Api, kept: float
) -> None:
    """Under workers, with a retention of a week, or of half a period (each timer then outlasts
    the rows, which are kept for it: extended where they expire by date), every period runs once
    and the request holds one period's rows, with a duplicate submit of the first input halfway."""
    policy = RetryPolicy(retention=kept)
    space, single, clock = new_space(), new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    periods = 6
    worker = api.worker([subscription], store=store, queue=queue, clock=clock, policy=policy)
    api.submit(
        subscription(single, 1, 1), request_id=single, store=store, queue=queue, clock=clock, policy=policy
    )
    deliver(worker, queue, clock, store)
    one_period = len(request_rows(store, single))
    api.submit(
        subscription(space, 1, periods),
        request_id=space,
        store=store,
        queue=queue,
        clock=clock,
        policy=policy,
    )
    seen: list[int] = []
    for _ in range(4000):
        received = queue.receive()
        if received:
            worker.handle(received[0])
            seen.append(api.status(store, "subscription", space).incarnation)
            if len(seen) == 5:  # a duplicate of the first submit, incarnations later: no new start
                again = subscription(space, 1, periods)
                api.submit(again, request_id=space, store=store, queue=queue, clock=clock, policy=policy)
            continue
        if queue.approximate_size() == 0:
            break
        clock.now += PERIOD / 4
        expire_as_the_service_does(store, clock.now)
    assert seen == sorted(seen) and seen[-1] == periods  # the status follows the latest incarnation
    assert api.result(store, "subscription", space) == periods
    assert [CALLS.get(f"{space}/{n}") for n in range(1, periods + 1)] == [1] * periods
    assert billed(store, space) == periods
    rows = request_rows(store, space)
    assert len(rows) == one_period, rows  # five memos (the sleep's end one), the event, the record


@workflow("renewing")
def renewing(space: str, period: int, last: int) -> Generator[Any, Any, int]:
    yield atomic("accounts", space, bill(period), name="bill")
    if period % 2 == 0:  # every other period one step more: its memo is left behind by the next
        yield atomic("ledger", space, lambda tx: tx.increment("extra"), name="extra")
    yield sleep(PERIOD)
    if period < last:
        yield continue_as_new(space, period + 1, last)
    return period


def test_rows_an_earlier_incarnation_left_behind_expire_on_every_store(store: Store, api: Api) -> None:
    """Periods of two shapes: the longer one's last memos are no later period's, so they are left
    behind; none is kept past its retention (never extended, never kept by a sweep), so the rows
    stay bounded however long the request lives."""
    space = new_space()
    clock = Expiring(store)
    periods = 12
    assert (
        api.run(renewing(space, 1, periods), request_id=space, store=store, clock=clock, policy=POLICY)
        == periods
    )
    assert billed(store, space) == periods
    rows = request_rows(store, space)
    current = record(store, "renewing", space).incarnation
    numbers = {}
    for where in rows:
        found = store.read(_ref(where))
        assert found is not None
        theirs = found.value.get("i") if isinstance(found.value, dict) else None
        numbers[where] = incarnation_number(theirs if isinstance(theirs, str) else current)
    retained = RETENTION / PERIOD + 2  # a left-behind memo goes a retention after it was written
    assert all(periods - number <= retained for number in numbers.values()), numbers
    assert len(rows) <= 5 + int(retained), rows


def _ref(where: tuple[str, str, str]) -> Any:
    from idemflow.stores.base import RowRef

    table = (
        RUNS_TABLE
        if where[0].endswith(RUNS_TABLE)
        else next(t for t in ("accounts", "ledger") if where[0].endswith(t))
    )
    return RowRef(table, where[1], where[2])


@workflow("quick")
def quick(space: str, period: int, last: int) -> Generator[Any, Any, int]:
    yield atomic("accounts", space, bill(period), name="bill")
    if period < last:
        yield continue_as_new(space, period + 1, last)
    return period


@pytest.mark.exact_calls
def test_a_crash_at_every_commit_around_the_switch_loses_no_input_and_runs_no_period_twice(
    store: Store, api: Api
) -> None:
    seen: list[FaultPoint] = []

    def watched(point: FaultPoint) -> Fault | None:
        seen.append(point)
        return None

    first = new_space()
    assert api.run(quick(first, 1, 3), request_id=first, store=FaultyStore(store, watched)) == 3
    commits = [point.index for point in seen if point.kind == "commit"]
    assert len(commits) >= 5
    for at in commits:
        for fault in (Fault.CRASH_AFTER, Fault.LOST_ANSWER):
            space = new_space()
            dies = FaultyStore(store, lambda point, at=at, fault=fault: fault if point.index == at else None)
            try:
                answered = api.run(quick(space, 1, 3), request_id=space, store=dies)
            except SimulatedCrash:
                answered = 3  # what the retry below must answer
            assert answered == 3, (at, fault)
            assert api.run(quick(space, 1, 3), request_id=space, store=store) == 3, (at, fault)
            assert billed(store, space) == 3, (at, fault)


@pytest.mark.exact_calls
def test_racing_duplicates_renew_once_per_period(store: Store, api: Api) -> None:
    space = new_space()
    periods = 6
    answers: list[Any] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            answers.append(api.run(quick(space, 1, periods), request_id=space, store=store))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and answers == [periods] * 3
    assert billed(store, space) == periods
    assert record(store, "quick", space).status is RunStatus.COMPLETED


@workflow("inbox")
def inbox(space: str, period: int) -> Generator[Any, Any, Any]:
    if period == 1:
        yield send("inbox", space, "note", "to the next incarnation")
        yield receive("first")  # taken here: never received again
        yield continue_as_new(space, 2)
    got = yield receive("note")
    again = yield receive("first", timeout=60.0)
    return [got, again]


def test_a_message_not_received_before_the_switch_is_received_by_the_next_incarnation(
    store: Store, api: Api
) -> None:
    space = new_space()
    send_message(store, "inbox", space, "first", "taken by the first", key=space + "-first")
    assert api.run(inbox(space, 1), request_id=space, store=store, clock=Expiring(store)) == [
        "to the next incarnation",
        None,
    ]
    assert api.status(store, "inbox", space).incarnation == 2


def test_a_message_across_the_switch_under_workers(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    send_message(store, "inbox", space, "first", "taken by the first", key=space + "-first")
    api.submit(inbox(space, 1), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([inbox], store=store, queue=queue, clock=clock)
    deliver(worker, queue, clock, store, rounds=400)
    assert api.result(store, "inbox", space) == ["to the next incarnation", None]


@workflow("renewed-badly")
def renewed_badly(space: str, how: str) -> Generator[Any, Any, Any]:
    if how == "codec":
        yield continue_as_new(space, object())
    if how == "signature":
        yield continue_as_new(space, how, "one too many")
    if how == "branch":
        yield all_of(continue_as_new(space, "again"))
    if how.startswith("size"):
        yield atomic("accounts", space, lambda tx: tx.increment("before"), name="before")
        yield continue_as_new(space, "x" * int(how[4:]))
    return how


@pytest.mark.parametrize("how", ["codec", "signature", "branch"])
def test_continue_as_new_where_it_cannot_mean_anything_writes_nothing(
    store: Store, api: Api, how: str
) -> None:
    space = new_space()
    error = InvalidValueError if how == "codec" else ContinueAsNewError
    with pytest.raises(error):
        api.run(renewed_badly(space, how), request_id=space, store=store)
    assert store.read(run_ref("renewed-badly", space)) is None


def test_continue_as_new_outside_a_workflow_writes_nothing(store: Store, api: Api) -> None:
    space = new_space()
    with pytest.raises(ContinueAsNewError):
        api.run(continue_as_new(1), request_id=space, store=store)
    assert not [key for _, key, _ in store.scan(RUNS_TABLE, space)]


def test_a_next_input_too_big_for_the_record_leaves_the_incarnation_as_it_was(store: Store, api: Api) -> None:
    """An input bigger than the backend allows in a row is refused before the switch writes (a
    store with no such limit, the memory store, takes it: its next incarnation runs)."""
    space = new_space()
    allowed = store.capabilities.max_value_bytes
    size = min(allowed, 2_000_000) + 1
    if size > allowed:
        with pytest.raises(LimitExceededError):
            api.run(renewed_badly(space, f"size{size}"), request_id=space, store=store)
        assert incarnation_number(record(store, "renewed-badly", space).incarnation) == 1
    else:
        assert api.run(renewed_badly(space, f"size{size}"), request_id=space, store=store) == "x" * size
        assert incarnation_number(record(store, "renewed-badly", space).incarnation) == 2


@pytest.mark.exact_calls
def test_a_later_period_costs_a_read_per_step_more_and_the_switch_a_read_and_a_write(
    store: Store, api: Api
) -> None:
    """Each later period of a one-step loop: the read of the memo its step writes over, that
    step's commit, and the switch's read and write of the run record: four store calls."""
    one, five = new_space(), new_space()
    before = store.round_trips
    assert api.run(quick(one, 1, 1), request_id=one, store=store) == 1
    single = store.round_trips - before
    before = store.round_trips
    assert api.run(quick(five, 1, 5), request_id=five, store=store) == 5
    renewals = store.round_trips - before - single
    per = 4 if store.capabilities.cross_partition_commit else 5  # Azure Tables: one more, measured
    assert renewals <= per * 4, renewals


class Meanwhile(StoreWrapper):
    """A store that runs ``then`` once, just before the first commit ``when`` picks."""

    def __init__(
        self, inner: Store, when: Callable[[Sequence[Op]], bool], then: Callable[[], object]
    ) -> None:
        super().__init__(inner)
        self._when: Callable[[Sequence[Op]], bool] | None = when
        self._then = then
        self.ran = False

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        if self._when is not None and self._when(ops):
            self._when = None
            self._then()
            self.ran = True
        return super().commit(ops)


def writing_over_in(number: int) -> Callable[[Sequence[Op]], bool]:
    """A commit that writes incarnation ``number``'s memo over an earlier incarnation's."""

    def when(ops: Sequence[Op]) -> bool:
        first = ops[0] if ops else None
        if not isinstance(first, Put) or parse_memo_key(first.ref.key) is None:
            return False
        run = first.value.get("i") if isinstance(first.value, dict) else None
        return isinstance(run, str) and incarnation_number(run) == number

    return when


def test_an_execution_behind_the_request_follows_it_and_runs_no_step_again(store: Store, api: Api) -> None:
    """While one execution is about to write its second incarnation's first memo, a duplicate runs
    the request to its end (its third incarnation writing that place over): the first then meets
    a later incarnation's memo, and answers the request's outcome instead of billing again."""
    space = new_space()

    def duplicate() -> None:
        assert idemflow.run(quick(space, 1, 3), request_id=space, store=store) == 3

    behind = Meanwhile(store, writing_over_in(2), duplicate)
    assert api.run(quick(space, 1, 3), request_id=space, store=behind) == 3
    assert behind.ran
    assert billed(store, space) == 3


@workflow("keyed")
def keyed(space: str, last: int, seen: list[list[str]]) -> Generator[Any, Any, list[list[str]]]:
    key = yield effect(lambda idempotency_key: idempotency_key, name="charge")
    token = yield idemflow.uuid4()
    seen = [*seen, [key, str(token)]]
    if len(seen) < last:
        yield continue_as_new(space, last, seen)
    return seen


def test_each_incarnation_gives_its_outside_calls_and_derived_values_keys_of_its_own(
    store: Store, api: Api
) -> None:
    """Steps are numbered from 1 again in every incarnation, but period 2's charge is not period
    1's: a provider deduplicating by key would otherwise answer it as a duplicate and charge
    nothing. The first incarnation keeps the key every request had before incarnations were
    numbered (requests in flight across the upgrade call with the key they called with)."""
    space = new_space()
    seen = api.run(keyed(space, 4, []), request_id=space, store=store)
    keys, tokens = [pair[0] for pair in seen], [pair[1] for pair in seen]
    assert len(set(keys)) == len(set(tokens)) == 4, seen
    assert keys[0] == idempotency_key("keyed", space, 1)
    assert keys[1] == idempotency_key("keyed", space, 1, incarnation=2)
    assert api.run(keyed(space, 4, []), request_id=space, store=store) == seen  # a duplicate: the same
