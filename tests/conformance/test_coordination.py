"""Timers, child workflows and messages between workflows (issue #19), on every store.

Each runs the asynchronous variant as users do (``submit``, then workers)
and under ``run``, and checks the promise: each step's effect once, the
timer never early, a child started once whoever retries, a message taken
once and in its sender's order, whatever crashes in between.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from idemflow import (
    ChildAborted,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidValueError,
    StepRetry,
    Tx,
    WorkflowAborted,
    atomic,
    receive,
    send,
    sleep,
    sleep_until,
    start,
    wait,
    workflow,
)
from idemflow.async_worklist._scheduling import MAX_HOP
from idemflow.client import RunStatus
from idemflow.keys import INBOX, RUNS_TABLE
from idemflow.stores import Store
from idemflow.testing import Fault, FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all, outbox_rows
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api, Handles
from tests.support.workflows import rows_of


def bump(space: str, key: str) -> Any:
    def body(tx: Tx) -> None:
        tx.increment(key)

    return atomic("tablea", space + "c", body, name="bump " + key)


def counts(store: Store, space: str) -> dict[str, Any]:
    """How many times each step's effect was applied."""
    return {key: value for (_, part, key), value in rows_of(store, space).items() if part == "c"}


@workflow("napper")
def napper(space: str, seconds: float) -> Generator[Any, Any, str]:
    yield bump(space, "before")
    yield sleep(seconds)
    yield bump(space, "after")
    return "awake"


@workflow("kid")
def kid(space: str, verdict: str) -> Generator[Any, Any, str]:
    if verdict == "fail":
        yield atomic("tablea", space + "c", lambda tx: 1 / 0, name="fails")
    yield bump(space, "kid")
    if verdict == "abort":
        from idemflow import abort

        yield abort({"why": "kid said no"})
    return f"kid of {space}"


@workflow("parent")
def parent(space: str, verdict: str) -> Generator[Any, Any, Any]:
    yield bump(space, "parent-before")
    child = yield start(kid(space, verdict), request_id=f"{space}-kid")
    try:
        result = yield wait(child)
    except ChildAborted as aborted:
        result = {"child aborted": aborted.reason}
    yield bump(space, "parent-after")
    return result


@workflow("inbox")
def inbox(space: str, expected: int) -> Generator[Any, Any, list[Any]]:
    got = []
    for _ in range(expected):
        got.append((yield receive("notes", timeout=600)))
    yield bump(space, "read")
    return got


@workflow("patient-inbox")
def patient_inbox(space: str, expected: int) -> Generator[Any, Any, list[Any]]:
    """Receives with no timeout: only a sender's wake-up brings it back."""
    got = []
    for _ in range(expected):
        got.append((yield receive("notes")))
    yield bump(space, "read")
    return got


@workflow("writer")
def writer(space: str, notes: list[str], receiver: str = "inbox") -> Generator[Any, Any, int]:
    for note in notes:
        yield send(receiver, space, "notes", note)
    yield bump(space, "wrote")
    return len(notes)


def deliver(worker: Handles, queue: MemoryQueue, clock: Clock, *, step: float = 60.0) -> None:
    """:func:`deliver_all` with the clock moving ``step`` seconds at a time, for as long as timers take."""
    deliver_all(worker, queue, clock, rounds=400, step=step)


def test_a_sleep_suspends_the_request_and_resumes_it_when_due(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    started = clock.now
    pending = api.submit(
        napper(space, 2 * MAX_HOP + 30), request_id=space, store=store, queue=queue, clock=clock
    )
    assert pending.status() is RunStatus.RUNNING and counts(store, space) == {"before": 1}
    assert (api.status(store, "napper", space).waiting or "").startswith("sleeping until 2027-01-15T08:")
    worker = api.worker([napper], store=store, queue=queue, clock=clock)
    for _ in range(200):  # never early: nothing after the sleep until the clock reaches it
        received = queue.receive()
        if not received:
            if queue.approximate_size() == 0:
                break
            clock.now += 10
            continue
        worker.handle(received[0])
        done = counts(store, space).get("after")
        assert done is None or clock.now >= started + 2 * MAX_HOP + 30
    assert api.status(store, "napper", space).result == "awake"
    assert counts(store, space) == {"before": 1, "after": 1}
    assert worker.stats.suspended == 2  # submit queued it 900 s ahead, workers twice more
    assert not any(space in key for key in outbox_rows(store))


def test_a_duplicate_of_a_sleeping_request_does_not_restart_its_timer(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(napper(space, 100), request_id=space, store=store, queue=queue, clock=clock)
    clock.now += 90
    api.submit(napper(space, 100), request_id=space, store=store, queue=queue, clock=clock)  # replays
    clock.now += 11  # 101 s after the first: due, though the duplicate came 11 s ago
    worker = api.worker([napper], store=store, queue=queue, clock=clock)
    deliver(worker, queue, clock, step=1)
    assert api.status(store, "napper", space).result == "awake" and counts(store, space)["after"] == 1


def test_run_sleeps_in_the_process_and_a_rerun_does_not_sleep_again(store: Store, api: Api) -> None:
    space = new_space()
    assert api.run(napper(space, 0.05), request_id=space, store=store) == "awake"
    assert api.run(napper(space, 0.05), request_id=space, store=store) == "awake"
    assert counts(store, space) == {"before": 1, "after": 1}


def test_sleep_until_a_time_already_past_goes_on_at_once(store: Store, api: Api) -> None:
    @workflow("alarm")
    def alarm(space: str) -> Generator[Any, Any, str]:
        yield sleep_until(1_000.0)
        yield bump(space, "rang")
        return "rang"

    space = new_space()
    assert api.run(alarm(space), request_id=space, store=store) == "rang"


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "5", True, 10**9])
def test_a_bad_sleep_is_refused_before_anything_is_written(store: Store, bad: Any, api: Api) -> None:
    @workflow("bad-nap")
    def bad_nap(space: str) -> Generator[Any, Any, None]:
        yield sleep(bad)

    space = new_space()
    with pytest.raises(InvalidValueError):
        api.run(bad_nap(space), request_id=space, store=store)
    assert api.status(store, "bad-nap", space).status is RunStatus.UNKNOWN


@pytest.mark.parametrize("verdict", ["ok", "abort"])
def test_a_child_runs_once_with_its_own_status_and_wakes_its_parent(
    store: Store, verdict: str, api: Api
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    for _ in range(2):  # a duplicate submit starts no second child
        api.submit(parent(space, verdict), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([parent, kid], store=store, queue=queue, clock=clock)
    deliver(worker, queue, clock)
    child = api.status(store, "kid", f"{space}-kid")
    outcome = api.status(store, "parent", space)
    assert outcome.status is RunStatus.COMPLETED
    if verdict == "ok":
        assert child.status is RunStatus.COMPLETED and outcome.result == f"kid of {space}"
    else:
        assert child.status is RunStatus.ABORTED
        assert outcome.result == {"child aborted": {"why": "kid said no"}}
    assert counts(store, space) == {"parent-before": 1, "kid": 1, "parent-after": 1}
    assert worker.stats.completed + worker.stats.aborted == 2  # the parent held no worker: woken
    assert not any(space in key for key in outbox_rows(store))


@pytest.mark.blocking_api
def test_a_failed_child_keeps_its_parent_waiting_until_an_operator_aborts_it(store: Store, api: Api) -> None:
    from idemflow import admin

    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(parent(space, "fail"), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker(
        [parent, kid], store=store, queue=queue, clock=clock, step_retry=StepRetry(maximum_attempts=2)
    )
    deliver(worker, queue, clock)
    assert api.status(store, "kid", f"{space}-kid").status is RunStatus.FAILED
    waiting = api.status(store, "parent", space)
    assert waiting.status is RunStatus.RUNNING and "waiting for 'kid'" in (waiting.waiting or "")
    admin.abort_request(store, [kid], "kid", f"{space}-kid", reason="given up", clock=clock)
    clock.now += 60
    assert worker.relay() == 1  # the child's outcome committed a wake-up of its parent
    deliver(worker, queue, clock)
    assert api.status(store, "parent", space).result == {"child aborted": "given up"}
    assert counts(store, space) == {"parent-before": 1, "parent-after": 1}


def test_a_second_parent_waiting_for_a_child_it_did_not_start_gets_its_outcome(
    store: Store, api: Api
) -> None:
    """The child's outcome wakes the parent that started it; another waiter looks again."""

    @workflow("slow-kid")
    def slow_kid(space: str) -> Generator[Any, Any, str]:
        yield sleep(100)
        yield bump(space, "slow-kid")
        return "grown"

    @workflow("adopter")
    def adopter(space: str, n: int) -> Generator[Any, Any, Any]:
        return (yield wait((yield start(slow_kid(space), request_id=space + "kid"))))

    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    for n in (1, 2):
        api.submit(adopter(space, n), request_id=f"{space}{n}", store=store, queue=queue, clock=clock)
    deliver(api.worker([adopter, slow_kid], store=store, queue=queue, clock=clock), queue, clock, step=5)
    assert [api.status(store, "adopter", f"{space}{n}").result for n in (1, 2)] == ["grown", "grown"]
    assert counts(store, space) == {"slow-kid": 1}


def test_under_run_a_wait_runs_the_child_in_the_process(store: Store, api: Api) -> None:
    space = new_space()
    assert api.run(parent(space, "ok"), request_id=space, store=store) == f"kid of {space}"
    assert api.status(store, "kid", f"{space}-kid").status is RunStatus.COMPLETED
    assert api.run(parent(space, "ok"), request_id=space, store=store) == f"kid of {space}"
    assert counts(store, space) == {"parent-before": 1, "kid": 1, "parent-after": 1}


def test_a_child_id_reused_with_another_input_fails_the_parent(store: Store, api: Api) -> None:
    space = new_space()
    api.run(kid(space, "other"), request_id=f"{space}-kid", store=store)
    with pytest.raises(IdempotencyKeyReuseError):
        api.run(parent(space, "ok"), request_id=space, store=store)


def test_a_workflow_starting_itself_as_its_child_is_refused_before_any_write(store: Store, api: Api) -> None:
    @workflow("selfish")
    def selfish(space: str) -> Generator[Any, Any, Any]:
        return (yield wait((yield start(selfish(space), request_id=space))))

    space = new_space()
    with pytest.raises(InvalidInputError, match="cannot start itself"):
        api.run(selfish(space), request_id=space, store=store)
    assert api.status(store, "selfish", space).status is RunStatus.UNKNOWN


def test_messages_are_received_once_in_the_order_sent(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    notes = ["one", "two", "three"]
    api.submit(inbox(space, 3), request_id=space, store=store, queue=queue, clock=clock)
    for _ in range(2):  # the sender retried: each message still arrives once
        api.submit(writer(space, notes), request_id=f"{space}-w", store=store, queue=queue, clock=clock)
    worker = api.worker([inbox, writer], store=store, queue=queue, clock=clock)
    deliver(worker, queue, clock, step=10)  # the timeout's continuation comes too, a harmless duplicate
    assert api.status(store, "inbox", space).result == notes
    assert counts(store, space) == {"wrote": 1, "read": 1}
    assert not any(space in key for key in outbox_rows(store))


def test_a_message_sent_before_its_receiver_started_waits_for_it(store: Store, api: Api) -> None:
    space = new_space()
    api.run(writer(space, ["early"]), request_id=f"{space}-w", store=store)
    assert api.run(inbox(space, 1), request_id=space, store=store) == ["early"]
    assert api.run(inbox(space, 1), request_id=space, store=store) == ["early"]  # memoized


def test_a_wake_up_of_a_request_run_started_is_dropped_not_dead_lettered(store: Store, api: Api) -> None:
    """A request ``run`` started polls its inbox itself: workers get no pointer to it (it has no
    stored input, and a worker would dead-letter the pointer)."""

    @workflow("run-inbox")
    def run_inbox(space: str) -> Generator[Any, Any, Any]:
        yield bump(space, "started")
        return (yield receive("notes", timeout=60))

    space, clock = new_space(), Clock()
    dying = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)
    with pytest.raises(SimulatedCrash):  # claimed by run, its first step committed
        api.run(run_inbox(space), request_id=space, store=dying, clock=clock)
    api.run(send_note(space), request_id=f"{space}-w", store=store, clock=clock)
    queue = MemoryQueue(clock=clock)
    worker = api.worker([run_inbox], store=store, queue=queue, clock=clock)
    clock.now += 60
    assert worker.relay() == 0 and queue.approximate_size() == 0
    assert not any(space in key for key in outbox_rows(store))
    assert api.run(run_inbox(space), request_id=space, store=store, clock=clock) == "hi"


@workflow("send-note")
def send_note(space: str) -> Generator[Any, Any, None]:
    yield send("run-inbox", space, "notes", "hi")


@pytest.mark.blocking_api
def test_a_message_sent_from_outside_with_one_key_arrives_once_on_both_apis(store: Store, api: Api) -> None:
    import asyncio

    from idemflow.client import asend_message, send_message

    space = new_space()
    for _ in range(2):  # a client retrying, on each API: one message per key
        send_message(store, "inbox", space, "notes", "sync", key=f"{space}-k1")
        asyncio.run(asend_message(store, "inbox", space, "notes", "async", key=f"{space}-k2"))
    sent = [key for _, key, _ in store.scan(RUNS_TABLE, space) if key.startswith(INBOX)]
    assert len(sent) == 2
    assert sorted(api.run(inbox(space, 2), request_id=space, store=store)) == ["async", "sync"]


@workflow("refuser")
def refuser(space: str) -> Generator[Any, Any, None]:
    yield atomic("tablea", space, lambda tx: tx.abort("no"), name="refuse")


@pytest.mark.blocking_api
def test_a_message_from_outside_that_no_receive_could_take_is_refused_on_both_apis(
    store: Store, api: Api
) -> None:
    """A finished receiver (or, asked for, one never started) answers MessageNotDeliveredError and
    nothing is written; a message sent before its receiver started still waits for it, and a
    resend under a key already delivered replays quietly even once the receiver finished."""
    import asyncio

    from idemflow import MessageNotDeliveredError
    from idemflow.client import asend_message, send_message

    space, refused, nobody = new_space(), new_space(), new_space()
    send_message(store, "inbox", space, "notes", "early", key=f"{space}-k1")
    assert api.run(inbox(space, 1), request_id=space, store=store) == ["early"]
    send_message(store, "inbox", space, "notes", "early", key=f"{space}-k1")  # the client's retry
    with pytest.raises(WorkflowAborted):
        api.run(refuser(refused), request_id=refused, store=store)
    store.flush()  # the completion records, which some stores write in the background
    before = sorted(store.scan(RUNS_TABLE))
    cases = [
        ("inbox", space, "request already finished: completed", False),
        ("refuser", refused, "request already finished: aborted", False),
        ("inbox", nobody, "unknown request", True),
    ]
    for flow, request_id, reason, require_started in cases:
        for send_it in (send_message, lambda *a, **k: asyncio.run(asend_message(*a, **k))):
            with pytest.raises(MessageNotDeliveredError) as caught:
                send_it(
                    store,
                    flow,
                    request_id,
                    "notes",
                    "late",
                    key=f"{request_id}-k2",
                    require_started=require_started,
                )
            got = caught.value
            assert (got.workflow, got.request_id, got.topic, got.reason) == (
                flow,
                request_id,
                "notes",
                reason,
            )
    assert sorted(store.scan(RUNS_TABLE)) == before


def test_a_receive_that_times_out_returns_none_durably(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(inbox(space, 1), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([inbox], store=store, queue=queue, clock=clock)
    deliver(worker, queue, clock)  # 600 s pass with nothing sent
    assert api.status(store, "inbox", space).result == [None]
    api.run(writer(space, ["late"]), request_id=f"{space}-w", store=store)
    assert api.run(inbox(space, 1), request_id=space, store=store) == [None]  # the answer stays


def crash_then_finish(
    api: Api, store: Store, flows: list[Any], requests: list[tuple[Any, str]], crash_at: int
) -> Clock:
    """Submit ``requests`` and work them off until the process dies after its ``crash_at``-th
    commit (the store applied it); then the clients retry what they did not see accepted and a
    new worker finishes the rest."""
    clock = Clock()
    queue = MemoryQueue(clock=clock)
    dying = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == crash_at else None)
    crashing = api.worker(flows, store=dying, queue=queue, clock=clock)
    accepted: set[str] = set()
    try:
        for m, rid in requests:
            api.submit(m, request_id=rid, store=dying, queue=queue, clock=clock)
            accepted.add(rid)
        for _ in range(50):
            received = queue.receive()
            if not received:
                break
            crashing.handle(received[0])
    except SimulatedCrash:
        pass
    clock.now += 120  # visibility timeouts and the relay's grace pass
    survivor = api.worker(flows, store=store, queue=queue, clock=clock)
    for m, rid in requests:  # a client retries only what it did not see accepted
        if rid not in accepted:
            api.submit(m, request_id=rid, store=store, queue=queue, clock=clock)
    survivor.relay()
    deliver(survivor, queue, clock, step=10)
    return clock


@pytest.mark.blocking_api
@pytest.mark.parametrize("crash_at", range(8))
def test_a_crash_at_any_commit_of_parent_and_child_loses_and_repeats_nothing(
    store: Store, crash_at: int, api: Api
) -> None:
    space = new_space()
    crash_then_finish(api, store, [parent, kid], [(parent(space, "ok"), space)], crash_at)
    assert api.status(store, "parent", space).result == f"kid of {space}"
    assert counts(store, space) == {"parent-before": 1, "kid": 1, "parent-after": 1}


@pytest.mark.blocking_api
@pytest.mark.parametrize("crash_at", range(10))
def test_a_crash_at_any_commit_of_sender_and_receiver_loses_and_repeats_nothing(
    store: Store, crash_at: int, api: Api
) -> None:
    space = new_space()
    requests = [(inbox(space, 2), space), (writer(space, ["a", "b"]), f"{space}-w")]
    crash_then_finish(api, store, [inbox, writer], requests, crash_at)
    assert api.status(store, "inbox", space).result == ["a", "b"]
    assert counts(store, space) == {"wrote": 1, "read": 1}


@pytest.mark.blocking_api
@pytest.mark.parametrize("crash_at", range(8))
def test_a_crash_at_any_commit_of_a_sender_never_loses_the_wake_up_of_a_receiver_without_timeout(
    store: Store, crash_at: int, api: Api
) -> None:
    space = new_space()
    # One message: a later send's wake-up would hide a lost one.
    requests = [(patient_inbox(space, 1), space), (writer(space, ["a"], "patient-inbox"), f"{space}-w")]
    crash_then_finish(api, store, [patient_inbox, writer], requests, crash_at)
    assert api.status(store, "patient-inbox", space).result == ["a"]
    assert counts(store, space) == {"wrote": 1, "read": 1}
