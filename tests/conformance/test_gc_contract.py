"""Garbage collection and retention on every store: finished requests only, data untouched.

``idemflow gc`` on demand, and each store's own expiry once ``RetryPolicy.retention``
has passed: DynamoDB by TTL, the others by the sweep their commits start.
"""

from __future__ import annotations

import time

import pytest

from idemflow import RetryPolicy, Store, atomic, run
from idemflow.errors import InvalidInputError
from idemflow.expiry import apply
from idemflow.gc import collect, parse_duration
from idemflow.keys import RUNS_TABLE, memo_key, parse_memo_key, run_key
from idemflow.records import RunRecord, RunStatus
from idemflow.serialization import encode
from idemflow.stores.base import Committed, Expired, Expiring, Insert, Put, RowRef
from idemflow.testing import FaultyStore, SimulatedCrash
from tests.conformance.test_workflow_contract import before_step, new_space
from tests.workflows import rows_of, setup_accounts, transfer


def bookkeeping(store: Store, request_id: str) -> list[str]:
    rows = []
    for table in ("accounts", "ledger", RUNS_TABLE):
        for partition, key, _ in store.scan(table):
            parsed = parse_memo_key(key)
            if (parsed and parsed[1] == request_id) or (table == RUNS_TABLE and partition == request_id):
                rows.append(key)
    return rows


def test_gc_removes_finished_requests_only(store: Store) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    req = {"space": space, "src": "alice", "dst": "bob", "amount": 5}
    done_id, half_id = space + "done", space + "half"
    run(transfer(req), request_id=done_id, store=store)
    crash = FaultyStore(store, before_step(2))
    with pytest.raises(SimulatedCrash):
        run(transfer(req), request_id=half_id, store=crash)
    store.flush()
    data_before = rows_of(store, space)
    assert bookkeeping(store, done_id) and bookkeeping(store, half_id)

    report = collect(store, older_than=3600.0)  # nothing is that old yet
    assert bookkeeping(store, done_id) and report.memo_rows == 0

    collect(store, older_than=0.0, now=lambda: 4e9)
    assert bookkeeping(store, done_id) == []
    assert bookkeeping(store, half_id) != []  # unfinished: kept whole
    assert rows_of(store, space) == data_before
    # The unfinished request still resumes to exactly one application.
    assert run(transfer(req), request_id=half_id, store=store) == {"left": 90, "dst": 10}
    assert rows_of(store, space)[("accounts", "alice", "history")] == [-5, -5]


def test_store_expires_finished_requests_by_itself(store: Store) -> None:
    """With a short retention and the clock past it, later commits remove a finished request's
    rows (the store's own sweep, not gc); an unfinished request keeps all of its rows and still
    resumes to one application; data rows stay; a duplicate after expiry is a new request."""
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})  # default retention: far from expiring
    policy = RetryPolicy(retention=60.0)
    req = {"space": space, "src": "alice", "dst": "bob", "amount": 5}
    done_id, half_id = space + "done", space + "half"
    if not isinstance(store, Expiring):  # DynamoDB: its TTL deletes rows by expires_at, untested here
        run(transfer(req), request_id=done_id, store=store, policy=policy)
        assert_ttl_on_every_bookkeeping_row(store, done_id)
        return
    clock = [time.time()]
    store.schedule_expiry(0.0, clock=lambda: clock[0])  # type: ignore[attr-defined]
    run(transfer(req), request_id=done_id, store=store, policy=policy)
    with pytest.raises(SimulatedCrash):
        run(transfer(req), request_id=half_id, store=FaultyStore(store, before_step(2)), policy=policy)
    store.flush()  # the completion record, and any sweep under way (Azure's run off the caller)
    data_before, half_rows = rows_of(store, space), bookkeeping(store, half_id)
    assert bookkeeping(store, done_id) and half_rows

    def sweep_now(n: int) -> None:  # a commit outside the space: its sweep is the store's own
        run(
            atomic("items", "later" + space, lambda tx: tx.put("k", n)),
            request_id=f"{space}l{n}",
            store=store,
        )
        store.flush()

    clock[0] += 3600.0  # past the retention of both requests' rows
    sweep_now(1)
    # The finished request's memos are gone; its run record stays one more window (expiry.py),
    # and still answers a duplicate.
    assert bookkeeping(store, done_id) == ["rtransfer"]
    assert run(transfer(req), request_id=done_id, store=store, policy=policy) == {"left": 95, "dst": 5}
    assert bookkeeping(store, half_id) == half_rows  # unfinished: kept whole (with a later expires_at)
    assert rows_of(store, space) == data_before
    assert run(transfer(req), request_id=half_id, store=store, policy=policy) == {"left": 90, "dst": 10}
    assert rows_of(store, space)[("accounts", "alice", "history")] == [-5, -5]

    clock[0] += 3 * 86400.0  # past the run record's extra window too
    # The record is met again on a later pass: Azure's pages resume after where the last sweep
    # stopped (past the record, left by the first sweep), so it takes a wrap-around, at most two
    # more sweeps than one; each commit here starts one sweep at least.
    for n in range(2, 6):
        sweep_now(n)
        if not bookkeeping(store, done_id):
            break
    assert bookkeeping(store, done_id) == []
    # After expiry a duplicate is a new request: it moves the money again.
    assert run(transfer(req), request_id=done_id, store=store, policy=policy) == {"left": 85, "dst": 15}


def assert_ttl_on_every_bookkeeping_row(store: Store, request_id: str) -> None:
    """Every memo row and the run record of ``request_id`` carry ``expires_at`` for TTL."""
    from idemflow.stores.dynamodb import DynamoDBStore

    assert isinstance(store, DynamoDBStore)
    seen = 0
    for table in ("accounts", "ledger", RUNS_TABLE):
        ttl = store.client.describe_time_to_live(TableName=store.table_name(table))
        assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
        for item in store.client.scan(TableName=store.table_name(table), ConsistentRead=True)["Items"]:
            parsed, partition = parse_memo_key(item["sk"]["S"]), item["pk"]["S"]
            if (parsed and parsed[1] == request_id) or (table == RUNS_TABLE and partition == request_id):
                assert float(item["expires_at"]["N"]) > time.time(), item
                seen += 1
    assert seen >= 4  # three step memos and the run record


@pytest.mark.exact_calls  # no phantom transaction conflicts on DynamoDB Local: the commits are not resent
def test_expiry_never_removes_a_row_rewritten_after_it_was_read(store: Store) -> None:
    """A writer racing the sweep wins: deletes and write-backs are conditional on the version read."""
    space = new_space()
    orphan = RowRef("items", space + "p", memo_key("wf", space + "gone", "s1"))  # no run record: deleted
    running = RowRef(RUNS_TABLE, space + "busy", run_key("wf"))  # unfinished: written back
    record = RunRecord("fp", RunStatus.RUNNING).to_json()
    for where, value in ((orphan, {"id": "atomic a", "v": 1}), (running, record)):
        later = time.time() + 3600  # the row's own expiry does not matter: the sweep is handed it
        assert isinstance(store.commit([Insert(where, value, encode(value), later)]), Committed)
    seen = [(where, store.read(where)) for where in (orphan, running)]
    stale = [Expired(where, row.version, 100.0, encode(row.value)) for where, row in seen if row is not None]
    for where, row in seen:  # the racing writers, between the sweep's read and its commit
        assert row is not None
        assert isinstance(store.commit([Put(where, row.value, encode(row.value), row.version)]), Committed)
    report = apply(store, stale, now=1e9)
    assert (report.deleted, report.kept, report.raced) == (0, 0, 2)
    assert store.read(orphan) is not None and store.read(running) is not None


@pytest.mark.parametrize(
    "text, seconds", [("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("7d", 604800.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "7w"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_duration(text)
