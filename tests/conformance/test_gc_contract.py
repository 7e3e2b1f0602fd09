"""Garbage collection on every store: finished requests only, data untouched."""

from __future__ import annotations

import pytest

from idemflow import Store, run
from idemflow.errors import InvalidInputError
from idemflow.gc import collect, parse_duration
from idemflow.keys import RUNS_TABLE, parse_memo_key
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


@pytest.mark.parametrize(
    "text, seconds", [("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("7d", 604800.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "7w"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_duration(text)
