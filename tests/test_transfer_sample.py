"""The transfer sample (samples/transfer) on the in-process stores: what it promises its readers.

The multi-process, SIGKILL side of the sample is ``tests/test_sqlite_crash.py``.
"""

from __future__ import annotations

import doctest
import threading
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from idemflow import Store, Tx, WorkflowAborted, atomic, run
from idemflow.compensation import run_result
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash, data_rows
from samples.transfer import workflows
from samples.transfer.workflows import (
    TRANSFERS,
    Outcome,
    TransferRequest,
    balances,
    check,
    open_account,
    refunds,
    total_money,
    transfer,
)
from tests.conftest import make_factory

OPENING = {"alice": 100, "bob": 0}


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    store = make_factory(str(request.param), request, tmp_path)()
    for name, balance in OPENING.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    return store


def req(amount: int = 30, src: str = "alice", dst: str = "bob") -> TransferRequest:
    return {"src": src, "dst": dst, "amount": amount}


def audit_rows(store: Store) -> dict[tuple[str, str, str], Any]:
    return data_rows(store, TRANSFERS)


def test_a_transfer_moves_money_and_leaves_one_audit_row(store: Store) -> None:
    receipt = run(transfer(req(30)), request_id="t-1", store=store)
    assert receipt["left"] == 70
    assert balances(store) == {"alice": 70, "bob": 30}
    assert audit_rows(store) == {
        (TRANSFERS, "alice", receipt["transfer"]): {"src": "alice", "dst": "bob", "amount": 30}
    }
    assert refunds(store) == {}
    assert total_money(store) == total_money(store, OPENING) == 100


def test_duplicates_of_a_completed_transfer_return_its_receipt_and_change_nothing(store: Store) -> None:
    first = run_result(transfer(req(30)), request_id="t-1", store=store)
    after = data_rows(store, "accounts", TRANSFERS)
    for _ in range(3):
        store.flush()
        before = store.round_trips
        assert run_result(transfer(req(30)), request_id="t-1", store=store) == first
        store.flush()
        assert store.round_trips - before == 1
    assert data_rows(store, "accounts", TRANSFERS) == after


def test_insufficient_funds_aborts_with_balances_unchanged(store: Store) -> None:
    with pytest.raises(WorkflowAborted) as caught:
        run(transfer(req(101)), request_id="t-poor", store=store)
    assert caught.value.reason == "insufficient funds"
    assert caught.value.workflow == "transfer" and caught.value.request_id == "t-poor"
    assert balances(store) == OPENING
    assert audit_rows(store) == {} and refunds(store) == {}  # nothing committed, nothing to undo


def test_missing_destination_refunds_the_debit_exactly_once(store: Store) -> None:
    outcome = run_result(transfer(req(30, dst="carol")), request_id="t-ghost", store=store)
    assert outcome == Failure(WorkflowAborted("no such account: carol", "transfer", "t-ghost"))
    assert balances(store) == OPENING
    assert refunds(store) == {"alice": 1}
    assert audit_rows(store) == {}
    after = data_rows(store, "accounts", TRANSFERS)
    for _ in range(3):  # duplicates: the same Failure from the run record, no step runs again
        store.flush()
        before = store.round_trips
        assert run_result(transfer(req(30, dst="carol")), request_id="t-ghost", store=store) == outcome
        store.flush()
        assert store.round_trips - before == 1
    assert data_rows(store, "accounts", TRANSFERS) == after
    assert "carol" not in balances(store)


def test_racing_executions_of_an_aborting_transfer_refund_once(store: Store) -> None:
    outcomes: list[Outcome] = []
    barrier = threading.Barrier(4)

    def contender() -> None:
        barrier.wait()
        outcomes.append(run_result(transfer(req(30, dst="carol")), request_id="t-race", store=store))

    threads = [threading.Thread(target=contender) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == [Failure(WorkflowAborted("no such account: carol", "transfer", "t-race"))] * 4
    assert balances(store) == OPENING
    assert refunds(store) == {"alice": 1}


@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER])
def test_a_crash_anywhere_in_an_aborting_transfer_still_refunds_once(store: Store, fault: Fault) -> None:
    # The aborting transfer commits three times: the debit, the credit's abort memo, the refund
    # (the aborted run record after them is a cache write).
    for point in range(3):
        request_id = f"t-{fault.value}-{point}"

        def plan(p: FaultPoint, point: int = point) -> Fault | None:
            return fault if p.kind == "commit" and p.index == point else None

        faulty = FaultyStore(store, plan)
        for _attempt in range(5):  # a supervisor retrying after each crash
            try:
                outcome = run_result(transfer(req(10, dst="carol")), request_id=request_id, store=faulty)
                break
            except SimulatedCrash:
                continue
        else:
            pytest.fail("never finished")
        assert len(faulty.injected) == 1
        assert outcome == Failure(WorkflowAborted("no such account: carol", "transfer", request_id))
        assert balances(store) == OPENING, (fault, point)
        assert refunds(store) == {"alice": point + 1}, (fault, point)


def test_missing_source_aborts_without_a_refund(store: Store) -> None:
    outcome = run_result(transfer(req(5, src="dave")), request_id="t-nosrc", store=store)
    assert outcome == Failure(WorkflowAborted("no such account: dave", "transfer", "t-nosrc"))
    assert balances(store) == OPENING and refunds(store) == {}


@pytest.mark.parametrize("amount", [0, -5])
def test_a_non_positive_amount_is_refused(store: Store, amount: int) -> None:
    outcome = run_result(transfer(req(amount)), request_id=f"t-{amount}", store=store)
    assert outcome == Failure(WorkflowAborted("amount must be a positive integer", "transfer", f"t-{amount}"))
    assert balances(store) == OPENING


def test_opening_an_account_twice_is_refused(store: Store) -> None:
    again = run_result(open_account({"account": "alice", "balance": 5}), request_id="open-again", store=store)
    assert again == Failure(WorkflowAborted("account exists: alice", "open_account", "open-again"))
    assert (
        run(open_account({"account": "alice", "balance": 100}), request_id="open-alice", store=store) == 100
    )
    assert balances(store) == OPENING


# -- the checker: it passes on real histories and catches each kind of violation ------------


def history(store: Store) -> dict[str, tuple[TransferRequest, Outcome]]:
    """Three requests: one completed, one refunded, one too poor to run."""
    requests = {"t-ok": req(30), "t-ghost": req(20, dst="carol"), "t-poor": req(500)}
    return {rid: (r, run_result(transfer(r), request_id=rid, store=store)) for rid, r in requests.items()}


def test_check_passes_on_a_consistent_history(store: Store) -> None:
    verdict = check(store, opening=OPENING, outcomes=history(store))
    assert verdict.ok, verdict.problems
    assert (verdict.completed, verdict.audit_rows, verdict.refunds, verdict.expected_refunds) == (1, 1, 1, 1)
    assert verdict.aborted == {"no such account": 1, "insufficient funds": 1}
    assert verdict.money_before == verdict.money_after == 100


def test_check_catches_a_transfer_applied_twice(store: Store) -> None:
    outcomes = history(store)
    run(transfer(req(30)), request_id="t-ok-again", store=store)  # a duplicate under a fresh id
    verdict = check(store, opening=OPENING, outcomes=outcomes)
    assert verdict.failed == {"balances", "audit"}


def test_check_catches_money_created_and_a_refund_repeated(store: Store) -> None:
    outcomes = history(store)

    def refund_again(tx: Tx) -> None:
        tx.increment("balance", 20)
        tx.increment("refunds")

    run(atomic("accounts", "alice", refund_again), request_id="double-refund", store=store)
    verdict = check(store, opening=OPENING, outcomes=outcomes)
    assert verdict.failed == {"money", "balances", "refunds"}
    assert verdict.money_after == 120


def test_check_catches_a_completed_request_that_left_no_trace(store: Store) -> None:
    outcomes = history(store)
    outcomes["t-phantom"] = (req(1), Success({"transfer": "nowhere", "left": 0}))
    verdict = check(store, opening=OPENING, outcomes=outcomes)
    assert verdict.failed == {"balances", "audit"}


def test_the_sample_docstrings_run() -> None:
    failed, attempted = doctest.testmod(workflows)
    assert attempted > 0 and failed == 0
