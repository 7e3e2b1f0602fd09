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

from idemflow import RetryPolicy, Tx, atomic, checkpoint, send, sleep, start, wait, workflow
from idemflow.admin import RunRecord, cancel, retry
from idemflow.admin import abort_request as abort
from idemflow.client import RunStatus, send_message
from idemflow.errors import InvalidInputError
from idemflow.keys import RUNS_TABLE
from idemflow.policy import resend
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Committed, Put
from idemflow.worker import MemoryQueue
from tests.apis import Api
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.expiries import expiries

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


def assert_kept_for(rows: dict[Any, float], retention: float, since: float) -> None:
    """Every row expires ``retention`` seconds after it was written (between ``since`` and now;
    DynamoDB keeps whole seconds)."""
    now = time.time()
    wrong = {
        where: at - since
        for where, at in rows.items()
        if not since + retention - 1 <= at <= now + retention + 1
    }
    assert not wrong, f"rows not kept for {retention} s (seconds after the test began): {wrong}"


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
    assert_kept_for(rows, RETENTION, began)


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
    assert_kept_for(rows, RETENTION, began)


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
    first = {where: at for where, at in rows.items() if where[2].endswith(f"|{space}|s1")}
    later = {where: at for where, at in rows.items() if where not in first}
    assert len(first) == 1 and len(later) >= 4
    assert_kept_for(first, RETENTION, began)  # written by submit
    assert_kept_for(later, 3600.0, began)  # written by the worker, the record's last write too


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
    assert_kept_for(rows, RETENTION, began)


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
