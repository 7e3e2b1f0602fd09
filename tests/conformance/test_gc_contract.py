"""Garbage collection and retention on every store: finished requests only, data untouched.

``idemflow gc`` on demand, and each store's own expiry once ``RetryPolicy.retention``
has passed: DynamoDB by TTL, the others by the sweep their commits start.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from idemflow import RetryPolicy, atomic
from idemflow.admin import RunRecord, collect
from idemflow.client import RunStatus
from idemflow.core.policy import resend
from idemflow.errors import InvalidInputError
from idemflow.keys import RUNS_TABLE, memo_key, parse_memo_key, run_key
from idemflow.operator.collection import parse_duration
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Committed, Delete, Expired, Expiring, Insert, Put, Row, RowRef
from idemflow.stores.expiry import apply
from idemflow.testing import FaultyStore, SimulatedCrash
from tests.conformance.test_workflow_contract import before_step, new_space
from tests.support.apis import Api
from tests.support.expiries import expiries
from tests.support.workflows import rows_of, setup_accounts, transfer

pytestmark = pytest.mark.every_bed  # a contract of the store itself: on every bed, moto too


def bookkeeping(store: Store, request_id: str) -> list[str]:
    rows = []
    for table in ("accounts", "ledger", RUNS_TABLE):
        for partition, key, _ in store.scan(table):
            parsed = parse_memo_key(key)
            if (parsed and parsed[1] == request_id) or (table == RUNS_TABLE and partition == request_id):
                rows.append(key)
    return rows


def test_gc_removes_finished_requests_only(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    req = {"space": space, "src": "alice", "dst": "bob", "amount": 5}
    done_id, half_id = space + "done", space + "half"
    api.run(transfer(req), request_id=done_id, store=store)
    crash = FaultyStore(store, before_step(2))
    with pytest.raises(SimulatedCrash):
        api.run(transfer(req), request_id=half_id, store=crash)
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
    assert api.run(transfer(req), request_id=half_id, store=store) == {"left": 90, "dst": 10}
    assert rows_of(store, space)[("accounts", "alice", "history")] == [-5, -5]


@pytest.mark.blocking_api  # the sweep is scheduled on this store (a test clock); an SDK twin has its own
def test_store_expires_finished_requests_by_itself(store: Store, api: Api) -> None:
    """With a short retention and the clock past it, later commits remove a finished request's
    rows (the store's own sweep, not gc); an unfinished request keeps all of its rows and still
    resumes to one application; data rows stay; a duplicate after expiry is a new request."""
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})  # default retention: far from expiring
    policy = RetryPolicy(retention=60.0)
    req = {"space": space, "src": "alice", "dst": "bob", "amount": 5}
    done_id, half_id = space + "done", space + "half"
    if not isinstance(store, Expiring):  # DynamoDB: its TTL deletes rows by expires_at, untested here
        api.run(transfer(req), request_id=done_id, store=store, policy=policy)
        assert_ttl_on_every_bookkeeping_row(store, done_id)
        return
    clock = [time.time()]
    store.schedule_expiry(0.0, clock=lambda: clock[0])
    api.run(transfer(req), request_id=done_id, store=store, policy=policy)
    with pytest.raises(SimulatedCrash):
        api.run(transfer(req), request_id=half_id, store=FaultyStore(store, before_step(2)), policy=policy)
    store.flush()  # the completion record, and any sweep under way (Azure's run off the caller)
    data_before, half_rows = rows_of(store, space), bookkeeping(store, half_id)
    assert bookkeeping(store, done_id) and half_rows

    def sweep_now(n: int) -> None:  # a commit outside the space: its sweep is the store's own
        api.run(
            atomic("items", "later" + space, lambda tx: tx.put("k", n)),
            request_id=f"{space}l{n}",
            store=store,
        )
        store.flush()

    clock[0] += 3600.0  # past the retention of both requests' rows
    # The finished request's rows go, its run record with them: its memos carry its incarnation,
    # so one a sweep meets later is not replayed by a later request of that id. Azure's pages
    # resume after where the last sweep stopped, so this may take a wrap-around: at most two
    # more sweeps than one; each commit here starts one sweep at least.
    for n in range(1, 5):
        sweep_now(n)
        if not bookkeeping(store, done_id):
            break
    assert bookkeeping(store, done_id) == []
    assert bookkeeping(store, half_id) == half_rows  # unfinished: kept whole (with a later expires_at)
    assert rows_of(store, space) == data_before
    assert api.run(transfer(req), request_id=half_id, store=store, policy=policy) == {"left": 90, "dst": 10}
    assert rows_of(store, space)[("accounts", "alice", "history")] == [-5, -5]
    # After expiry a duplicate is a new request: it moves the money again.
    assert api.run(transfer(req), request_id=done_id, store=store, policy=policy) == {"left": 85, "dst": 15}


def test_a_request_id_reused_after_its_run_record_went_first_is_a_new_request(store: Store, api: Api) -> None:
    """DynamoDB's TTL deletes in no order: a finished run record may go before its memos. A later
    request with that id is a new request: it runs every step again (never a partial replay of
    the old memos), even when it crashes halfway and is retried, and its own duplicates replay."""
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    req = {"space": space, "src": "alice", "dst": "bob", "amount": 5}
    rid = space + "reused"
    assert api.run(transfer(req), request_id=rid, store=store) == {"left": 95, "dst": 5}
    store.flush()
    old_memos = [key for key in bookkeeping(store, rid) if parse_memo_key(key)]
    assert len(old_memos) == 3
    lose_run_record(store, rid)

    with pytest.raises(SimulatedCrash):  # the new request commits its first step, then crashes
        api.run(transfer(req), request_id=rid, store=FaultyStore(store, before_step(2)))
    assert api.run(transfer(req), request_id=rid, store=store) == {"left": 90, "dst": 10}
    assert rows_of(store, space)[("accounts", "alice", "history")] == [-5, -5]
    assert rows_of(store, space)[("accounts", "bob", "balance")] == 10
    assert rows_of(store, space)[("ledger", "log", "transfers")] == 2  # step 2 ran again, once
    assert api.run(transfer(req), request_id=rid, store=store) == {"left": 90, "dst": 10}  # a duplicate
    store.flush()
    record = RunRecord.from_json(store.read(run_ref("transfer", rid)).value)  # type: ignore[union-attr]
    assert record.incarnation is not None
    for key in old_memos:  # every memo is the new run's now
        memo = next(row for _, k, row in _memo_rows(store, rid) if k == key)
        assert memo.value["i"] == record.incarnation

    # A memo left without a record and a new request whose first commit meets it (no crash).
    lose_run_record(store, rid)
    assert api.run(transfer(req), request_id=rid, store=store) == {"left": 85, "dst": 15}


def test_racing_copies_of_a_reused_request_id_apply_it_once(store: Store, api: Api) -> None:
    """Copies of a request reusing an id whose old memos outlived its run record race: each
    draws its own incarnation, one claims, and every other adopts that claim (a memo of another
    incarnation is judged by the run record, never deleted while the claim is unknown)."""
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    req = {"space": space, "src": "alice", "dst": "bob", "amount": 5}
    rid = space + "raced"
    api.run(transfer(req), request_id=rid, store=store)
    store.flush()
    lose_run_record(store, rid)
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(5)

    def copy() -> None:
        barrier.wait()
        try:
            results.append(api.run(transfer(req), request_id=rid, store=store))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=copy) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [{"left": 90, "dst": 10}] * 5
    rows = rows_of(store, space)
    assert rows[("accounts", "alice", "history")] == [-5, -5]
    assert rows[("ledger", "log", "transfers")] == 2


def lose_run_record(store: Store, request_id: str) -> None:
    """Delete a finished request's run record and leave its memos, as TTL may (resent while
    DynamoDB Local still holds the last transaction on the row)."""
    outcome = resend(store.commit, [Delete(run_ref("transfer", request_id))])
    assert isinstance(outcome, Committed)
    assert store.read(run_ref("transfer", request_id)) is None


def _memo_rows(store: Store, request_id: str) -> list[tuple[str, str, Row]]:
    found = []
    for table in ("accounts", "ledger", RUNS_TABLE):
        for partition, key, row in store.scan(table):
            parsed = parse_memo_key(key)
            if parsed and parsed[1] == request_id:
                found.append((partition, key, row))
    return found


def assert_ttl_on_every_bookkeeping_row(store: Store, request_id: str) -> None:
    """Every memo row and the run record of ``request_id`` carry ``expires_at`` (DynamoDB: for TTL)."""
    from idemflow.stores.dynamodb import DynamoDBStore

    if isinstance(store, DynamoDBStore):
        for table in ("accounts", "ledger", RUNS_TABLE):
            ttl = store.client.describe_time_to_live(TableName=store.table_name(table))
            assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    seen = 0
    for (table, partition, key), expires_at in expiries(store).items():
        parsed = parse_memo_key(key)
        if (parsed and parsed[1] == request_id) or (table.endswith(RUNS_TABLE) and partition == request_id):
            assert expires_at is not None and expires_at > time.time(), (table, partition, key)
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
