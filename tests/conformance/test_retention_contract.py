"""A request's retention reaches every row written for it, whoever writes it, on every store.

``api.submit(..., policy=RetryPolicy(retention=...))`` stores the retention with the request; the
worker that finishes it (steps after the checkpoint, retries counted in the run record, timers,
messages, compensations) and the operators that cancel, resume or abort it write every row with
it, not with their own policy, and so does a message sent to it from outside any workflow. A
worker's own retention is for requests that carry none.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import pytest

import idemflow
import idemflow.client
from idemflow import (
    RetryPolicy,
    StepRetry,
    Tx,
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
from idemflow.admin import RunRecord, cancel, retry
from idemflow.admin import abort_request as abort
from idemflow.async_worklist._delivery import redelivery_delay
from idemflow.async_worklist._scheduling import MAX_HOP
from idemflow.client import RunStatus, send_message
from idemflow.core.policy import resend
from idemflow.errors import InvalidInputError, LimitExceededError
from idemflow.keys import RUNS_TABLE
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores import MemoryStore, SqliteStore, Store
from idemflow.stores.base import Committed, Put
from idemflow.stores.long_waits import sweeps
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.conftest import make_factory
from tests.support.apis import Api
from tests.support.expiries import expire_as_the_service_does, expiries
from tests.support.selection import kinds

RETENTION = 60.0
FAILED_ONCE: set[str] = set()
"""Requests whose flaky step already raised once (a worker then counts an attempt in the record)."""


def flaky(space: str) -> Any:
    def body(tx: Tx) -> None:
        if space not in FAILED_ONCE:
            FAILED_ONCE.add(space)
            raise RuntimeError("the first attempt fails")
        tx.increment("flaky")

    return body


@workflow("keeper")
def keeper(space: str, verdict: str) -> Generator[Any, Any, str]:
    yield atomic(
        "tablea",
        space + "p",
        lambda tx: tx.increment("before"),
        name="before",
        compensate=lambda tx, _: tx.increment("undone"),
    )
    yield checkpoint()
    yield sleep(30)
    yield send("keeper", space + "-peer", "notes", "kept")
    yield atomic("tableb", space + "p", flaky(space), name="flaky")
    if verdict == "abort":
        yield atomic("tableb", space + "p", lambda tx: tx.abort("no"), name="refuse")
    return "kept"


def expiring_rows(store: Store) -> dict[Any, float]:
    """The rows with an expiry: in a fresh store, every bookkeeping row of the test's requests."""
    return {where: at for where, at in expiries(store).items() if at is not None}


def assert_kept_for(
    rows: dict[Any, float], retention: float, since: float, clock: Clock | None = None
) -> None:
    """Every row expires ``retention`` seconds after it was written (between ``since`` and now;
    DynamoDB keeps whole seconds), by its writer's clock: the later of wall time and the test's
    clock (which runs ahead of it) where the writer was given that clock, wall time else."""
    now = time.time()
    frames = [(since, now)] if clock is None else [(since, now), (clock.began, max(now, clock.now))]
    wrong = {
        where: at - since
        for where, at in rows.items()
        if not any(first + retention - 1 <= at <= last + retention + 1 for first, last in frames)
    }
    assert not wrong, f"rows not kept for {retention} s (seconds after the test began): {wrong}"


@pytest.mark.exact_calls  # it counts one failed attempt: a phantom conflict on its count repeats it
@pytest.mark.parametrize("verdict", ["complete", "abort"])
def test_every_row_a_worker_writes_keeps_the_requests_retention(store: Store, verdict: str, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    began = time.time()
    policy = RetryPolicy(retention=RETENTION)
    api.submit(keeper(space, verdict), request_id=space, store=store, queue=queue, clock=clock, policy=policy)
    send_message(store, "keeper", space, "notes", "from outside", key=space + "-out")  # its row too
    worker = api.worker([keeper], store=store, queue=queue, clock=clock, policy=RetryPolicy(retention=3600.0))
    deliver_all(worker, queue, clock, rounds=200, step=30.0)
    ended = api.status(store, "keeper", space)
    assert ended.status is (RunStatus.COMPLETED if verdict == "complete" else RunStatus.ABORTED)
    assert worker.stats.retried == 1 and worker.stats.suspended >= 1  # a counted attempt, a timer
    rows = expiring_rows(store)
    memos = [where for where in rows if where[2].startswith(f"mkeeper|{space}|")]
    assert len(memos) >= (4 if verdict == "complete" else 6), rows  # steps; the undo's too
    assert any(where[1] == space and where[2] == "rkeeper" for where in rows)  # the run record
    assert any(where[2].startswith(f"qkeeper|{space}-peer|") for where in rows)  # the message
    assert any(where[2].startswith(f"okeeper|{space}-peer|") for where in rows)  # its wake-up
    assert any(where[2].startswith(f"qkeeper|{space}|") for where in rows)  # the one from outside
    assert_kept_for(rows, RETENTION, began, clock)


def test_operators_keep_the_requests_retention(store: Store, api: Api) -> None:
    """Cancel, resume (``retry``) and abort, each from an operator's process and policy."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    began = time.time()
    policy = RetryPolicy(retention=RETENTION)
    api.submit(
        keeper(space, "complete"), request_id=space, store=store, queue=queue, clock=clock, policy=policy
    )
    assert cancel(store, "keeper", space) is RunStatus.RUNNING
    assert retry(store, queue, "keeper", space) is RunStatus.CANCELLED
    assert abort(store, [keeper], "keeper", space, reason="an operator said so").status is RunStatus.ABORTED
    rows = expiring_rows(store)
    assert len([where for where in rows if where[2].startswith(f"mkeeper|{space}|")]) >= 2, rows
    assert_kept_for(rows, RETENTION, began, clock)


def test_a_worker_gives_its_retention_to_requests_that_carry_none(store: Store, api: Api) -> None:
    """A record written before the format stored a retention: the worker's own applies."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    began = time.time()
    policy = RetryPolicy(retention=RETENTION)
    api.submit(
        keeper(space, "complete"), request_id=space, store=store, queue=queue, clock=clock, policy=policy
    )
    ref = run_ref("keeper", space)
    row = store.read(ref)
    assert row is not None and RunRecord.from_json(row.value).retention == RETENTION
    older: Any = row.value
    older["in"].pop("rn")  # as format 4 wrote it
    put = Put(ref, older, encode(older), expect=row.version, expires_at=time.time() + RETENTION)
    # Resent: DynamoDB Local may still hold submit's transaction on the row.
    assert isinstance(resend(store.commit, [put]), Committed)
    worker = api.worker([keeper], store=store, queue=queue, clock=clock, policy=RetryPolicy(retention=3600.0))
    deliver_all(worker, queue, clock, rounds=200, step=30.0)
    assert api.status(store, "keeper", space).status is RunStatus.COMPLETED
    rows = expiring_rows(store)
    # submit's: its step's memo and the places row its checkpoint wrote
    first = {where: at for where, at in rows.items() if where[2].endswith((f"|{space}|s1", f"|{space}|j"))}
    later = {where: at for where, at in rows.items() if where not in first}
    assert len(first) == 2 and len(later) >= 4
    assert_kept_for(first, RETENTION, began, clock)  # written by submit
    assert_kept_for(later, 3600.0, began, clock)  # written by the worker, the record's last write too


@workflow("kept-kid")
def kept_kid(space: str) -> Generator[Any, Any, str]:
    yield atomic("tablea", space + "k", lambda tx: tx.increment("kid"), name="kid")
    return "kid"


@workflow("kept-parent")
def kept_parent(space: str) -> Generator[Any, Any, str]:
    yield checkpoint()
    return str((yield wait((yield start(kept_kid(space), request_id=space + "-kid")))))


def test_a_child_keeps_its_parents_retention(store: Store, api: Api) -> None:
    """A child is claimed by its parent's step: it is stored with the parent's retention, and
    the worker that runs it writes its rows with that, not with its own."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    began = time.time()
    policy = RetryPolicy(retention=RETENTION)
    api.submit(kept_parent(space), request_id=space, store=store, queue=queue, clock=clock, policy=policy)
    worker = api.worker(
        [kept_parent, kept_kid], store=store, queue=queue, clock=clock, policy=RetryPolicy(retention=3600.0)
    )
    deliver_all(worker, queue, clock, rounds=200, step=30.0)
    assert api.status(store, "kept-parent", space).result == "kid"
    rows = expiring_rows(store)
    kid = {
        where: at for where, at in rows.items() if f"{space}-kid" in where[1] or f"|{space}-kid|" in where[2]
    }
    assert any(where[2] == "rkept-kid" for where in kid) and any("|s1" in where[2] for where in kid), kid
    assert_kept_for(rows, RETENTION, began, clock)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_submit_refuses_a_retention_that_is_not_a_duration(store: Store, bad: float, api: Api) -> None:
    space = new_space()
    with pytest.raises(InvalidInputError, match="retention"):
        api.submit(
            keeper(space, "complete"),
            request_id=space,
            store=store,
            queue=MemoryQueue(),
            policy=RetryPolicy(retention=bad),
        )
    assert store.read(run_ref("keeper", space)) is None
    assert not [key for _, key, _ in store.scan(RUNS_TABLE)]


# -- waits longer than the retention: no row of the request expires while it waits ------------

LONG = 2 * MAX_HOP
"""A short retention (two of a worker's longest queue delays), so a wait four times as long takes
eight hops of a worker's queue: the clock moves a hop at a time (:func:`wait_out`)."""
REDELIVERED_WITHIN = redelivery_delay(1_000)
"""The longest a failed delivery stays hidden before the queue offers it again (30 s)."""
CALLS: dict[str, int] = {}
"""Calls of each request's outside charge (an effect: called again whenever its memo is gone)."""


def charge(space: str, period: int) -> Any:
    def call(key: str) -> str:
        CALLS[f"{space}/{period}"] = CALLS.get(f"{space}/{period}", 0) + 1
        return key

    return effect(call, name=f"charge {period}")


@workflow("renewal")
def renewal(space: str, wait: str) -> Generator[Any, Any, str]:
    yield charge(space, 1)
    yield checkpoint()
    if wait == "sleep":
        yield sleep(4 * LONG)
    elif wait == "receive-timeout":
        got = yield receive("cancel", timeout=4 * LONG)
        assert got is None
    elif wait == "receive":
        assert (yield receive("go")) == "now"
    yield charge(space, 2)
    return "renewed"


def wait_out(
    worker: Any, queue: MemoryQueue, clock: Clock, store: Store, until: float, *, drain: bool = True
) -> None:
    """Deliver every message as it comes due while the clock moves on to ``until`` (and past it
    while messages are left, if ``drain``), applying expiry as the backend's service does.

    The clock moves a hop (:data:`MAX_HOP`, half the retention) while nothing is visible: each
    move makes the next hop of a timer visible, and expiry is applied at the new time before any
    message is handled, so a row due to expire meanwhile is gone when the request next reads it.
    A keep-alive (due every quarter retention) is handled up to a quarter retention late, with its
    rows still kept for half of it."""
    retries_seen = False  # the hop's first part is over: a failed delivery had its time to return
    for _ in range(200):
        received = queue.receive()
        if received:
            worker.handle(received[0])
            retries_seen = False
            continue
        if clock.now >= until and (not drain or queue.approximate_size() == 0):
            return
        # A delivery the store refused transiently (a keep-alive's commit meeting a DynamoDB
        # transaction conflict) is back within REDELIVERED_WITHIN, as it would be in real time:
        # the clock gets there first, then goes on to the hop's end.
        clock.now += MAX_HOP - REDELIVERED_WITHIN if retries_seen else REDELIVERED_WITHIN
        retries_seen = not retries_seen
        expire_as_the_service_does(store, clock.now)
    raise AssertionError(
        f"the request never settled: {queue.approximate_size()} queued at {clock.now - clock.began}"
    )


@pytest.mark.parametrize("wait", ["sleep", "receive-timeout", "receive"])
def test_a_wait_longer_than_the_retention_keeps_every_row_of_the_request(
    store: Store, api: Api, wait: str
) -> None:
    """Charge, wait four retentions, charge: exactly two charges and the request completes, with
    expiry applied as each service applies it (DynamoDB's TTL by date alone, in any order)."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    policy = RetryPolicy(retention=LONG)
    api.submit(renewal(space, wait), request_id=space, store=store, queue=queue, clock=clock, policy=policy)
    worker = api.worker([renewal], store=store, queue=queue, clock=clock, policy=policy)
    if wait == "receive":  # the message comes after three retentions of waiting
        wait_out(worker, queue, clock, store, clock.now + 3 * LONG, drain=False)
        send_message(store, "renewal", space, "go", "now", key=space + "-go", queue=queue)
    wait_out(worker, queue, clock, store, clock.now if wait == "receive" else clock.now + 4 * LONG)
    assert api.status(store, "renewal", space).result == "renewed"
    assert (CALLS.get(f"{space}/1"), CALLS.get(f"{space}/2")) == (1, 1)


@workflow("retried-renewal")
def retried_renewal(space: str) -> Generator[Any, Any, str]:
    yield charge(space, 1)
    yield checkpoint()
    yield atomic(
        "tableb",
        space + "p",
        flaky(space),
        name="flaky",
        retry=StepRetry(initial=4 * LONG, maximum_interval=4 * LONG, expiry=None),
    )
    yield charge(space, 2)
    return "renewed"


@pytest.mark.exact_calls  # a phantom conflict on the counted attempt makes the retry come at once,
# the request then ends early and its record expires while the test waits out the backoff
def test_a_retry_backoff_longer_than_the_retention_keeps_every_row(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    policy = RetryPolicy(retention=LONG)
    api.submit(retried_renewal(space), request_id=space, store=store, queue=queue, clock=clock, policy=policy)
    worker = api.worker([retried_renewal], store=store, queue=queue, clock=clock, policy=policy)
    wait_out(worker, queue, clock, store, clock.now + 4 * LONG)
    assert api.status(store, "retried-renewal", space).result == "renewed"
    assert (CALLS.get(f"{space}/1"), CALLS.get(f"{space}/2")) == (1, 1)


FAILING: dict[str, int] = {}


@workflow("left-over")
def left_over(space: str) -> Generator[Any, Any, str]:
    yield charge(space, 1)

    def second(key: str) -> str:
        FAILING[space] = FAILING.get(space, 0) + 1
        if FAILING[space] <= 2:
            raise ConnectionError(f"the provider is down (attempt {FAILING[space]})")
        return key

    yield effect(second, name="charge 2")
    return "done"


def test_a_request_left_unfinished_by_run_keeps_its_rows_from_its_last_attempt(
    store: Store, api: Api
) -> None:
    """Attempts at day 0 and day 6 of a 7-day retention fail at step 2; the one at day 8 must find
    step 1's memo (its charge is not made again), and the record says why it is unfinished."""
    space, clock = new_space(), Clock()
    week = 7 * 86400.0
    policy = RetryPolicy(retention=week)
    for day in (0, 6):
        clock.now = clock.began + day * 86400.0
        expire_as_the_service_does(store, clock.now)
        with pytest.raises(ConnectionError):
            api.run(left_over(space), request_id=space, store=store, policy=policy, clock=clock)
        noted = api.status(store, "left-over", space)
        assert noted.status is RunStatus.RUNNING
        assert noted.waiting is not None and "step 2 (effect charge 2)" in noted.waiting, noted
        assert f"ConnectionError: the provider is down (attempt {day // 6 + 1})" in noted.waiting
    clock.now = clock.began + 8 * 86400.0
    expire_as_the_service_does(store, clock.now)
    assert api.run(left_over(space), request_id=space, store=store, policy=policy, clock=clock) == "done"
    assert CALLS.get(f"{space}/1") == 1


@pytest.mark.parametrize("wait", ["sleep", "receive-timeout"])
@pytest.mark.parametrize("kind", kinds("dynamodb", "dynamodb-local"))
def test_run_refuses_a_wait_in_place_its_rows_would_not_outlive(
    kind: str, wait: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """Under ``run`` a wait is spent in the caller's process, where nothing rewrites the request's
    rows: on a store whose rows expire by date alone (DynamoDB's TTL) a wait longer than half the
    retention is refused as it begins, naming the wait and what to do; the charge committed
    before is not made again by a retry, which meets the same refusal, and the record says why
    the request is unfinished. (A store that sweeps keeps an unfinished request's rows however
    long it waits: :func:`idemflow.stores.long_waits.sweeps`, and the runner asks it as here.)"""
    store = make_factory(kind, request, tmp_path)()
    assert not sweeps(store)
    space, clock = new_space(), Clock()
    policy = RetryPolicy(retention=LONG)
    for _attempt in range(2):
        with pytest.raises(LimitExceededError, match=r"longer than half its rows' retention"):
            idemflow.run(renewal(space, wait), request_id=space, store=store, policy=policy, clock=clock)
    assert (CALLS.get(f"{space}/1"), CALLS.get(f"{space}/2")) == (1, None)
    assert "longer than half" in (idemflow.client.status(store, "renewal", space).waiting or "")
    for sweeping in (MemoryStore(), SqliteStore(tmp_path / "s.sqlite3")):
        assert sweeps(sweeping)
