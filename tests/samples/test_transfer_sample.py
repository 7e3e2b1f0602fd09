"""The transfer sample (samples/transfer): its workflows on the in-process stores, its HTTP API
through a real client, its command line, and load + SIGKILL + check on SQLite and Azurite.

Worker processes calling ``run`` directly, SIGKILLed mid-commit, are ``tests/stores/test_sqlite_crash.py``.
"""

from __future__ import annotations

import doctest
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from returns.result import Failure, Success

from idemflow import Tx, WorkflowAborted, atomic, run, run_result
from idemflow.stores import Store
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash, data_rows
from idemflow.testing.servers import Azurite, Moto
from idemflow.worker import MemoryQueue, Worker
from samples import _harness
from samples.transfer import api as transfer_api
from samples.transfer import checks, cli, workflows
from samples.transfer.api import TransferService, create_app
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
from tests.conftest import dynamodb_url, make_factory
from tests.support.samples_http import running

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
    for module in (workflows, checks, transfer_api):
        failed, attempted = doctest.testmod(module)
        assert attempted > 0 and failed == 0


# -- the HTTP API, through a real HTTP client against a running server --------------------------------


def test_the_http_api(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'bank.sqlite3'}"
    store = _harness.open_with(store_url, workflows.TABLES)
    with running(create_app(TransferService(store_url))) as url, httpx.Client(base_url=url) as http:

        def post(path: str, body: object, key: str | None) -> httpx.Response:
            return http.post(path, json=body, headers={"Idempotency-Key": key} if key else {})

        assert (post("/accounts", {"account": "ada", "balance": 100}, None).status_code) == 400
        for _ in range(2):  # a retry gets the first answer
            made = post("/accounts", {"account": "ada", "balance": 100}, "o1")
            assert (made.status_code, made.json()) == (201, {"account": "ada", "balance": 100})
        assert post("/accounts", {"account": "bob", "balance": 5}, "o2").status_code == 201
        again = post("/accounts", {"account": "ada", "balance": 7}, "o3")
        assert (again.status_code, again.json()["error"]) == (409, "account_exists")
        assert post("/accounts", {"account": "ada"}, "o4").status_code == 422

        body = {"src": "ada", "dst": "bob", "amount": 30}
        first = post("/transfers", body, "t1")
        assert first.status_code == 200 and first.json()["left"] == 70
        assert post("/transfers", body, "t1").json() == first.json()
        other = post("/transfers", {**body, "amount": 31}, "t1")
        assert (other.status_code, other.json()["error"]) == (422, "idempotency_key_reused")
        broke = post("/transfers", {**body, "amount": 1000}, "t2")
        assert broke.json() == {"error": "insufficient_funds", "detail": "insufficient funds"}
        nowhere = post("/transfers", {**body, "dst": "cyd"}, "t3")  # debited, then refunded
        assert (nowhere.status_code, nowhere.json()["error"]) == (404, "no_such_account")
        zero = post("/transfers", {**body, "amount": 0}, "t4")
        assert (zero.status_code, zero.json()["error"]) == (422, "invalid")
        assert post("/transfers", {"src": "ada"}, "t5").status_code == 422

        assert http.get("/accounts/ada").json() == {"account": "ada", "balance": 70}
        assert http.get("/accounts/bob").json() == {"account": "bob", "balance": 35}
        assert http.get("/accounts/cyd").status_code == 404
        assert http.get("/transfers/t1").json() == {
            "request_id": "t1",
            "status": "completed",
            "result": first.json(),
        }
        assert http.get("/transfers/t3").json()["reason"] == "no such account: cyd"
    assert refunds(store) == {"ada": 1}
    assert workflows.ledger(store).ok


def test_the_http_api_with_a_queue_answers_once_debited_and_workers_finish(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'bank.sqlite3'}"
    store = _harness.open_with(store_url, workflows.TABLES)
    for name, balance in OPENING.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    queue = MemoryQueue()  # shared with the worker below; the server calls it from threads
    service = TransferService(store_url, queue, signing_key=b"k")
    with running(create_app(service)) as url, httpx.Client(base_url=url) as http:
        moved = http.post("/transfers", json=req(30), headers={"Idempotency-Key": "t1"})
        lost = http.post("/transfers", json=req(20, dst="cyd"), headers={"Idempotency-Key": "t2"})
        for accepted in (moved, lost):
            assert accepted.status_code == 202 and accepted.json()["status"] == "running"
        assert balances(store) == {"alice": 50, "bob": 0}  # both debits done, nothing credited yet
        Worker(workflows.WORKFLOWS, store=store, queue=queue, signing_key=b"k", wait=0.01).run(
            idle_timeout=0.1
        )
        assert http.get("/transfers/t1").json()["status"] == "completed"
        aborted = http.get("/transfers/t2").json()
        assert (aborted["status"], aborted["reason"]) == ("aborted", "no such account: cyd")
        done = http.post("/transfers", json=req(30), headers={"Idempotency-Key": "t1"})
        assert (done.status_code, done.json()["left"]) == (200, 70)
        refused = http.post("/transfers", json=req(20, dst="cyd"), headers={"Idempotency-Key": "t2"})
        assert (refused.status_code, refused.json()["error"]) == (404, "no_such_account")
    assert balances(store) == {"alice": 70, "bob": 30} and refunds(store) == {"alice": 1}
    assert workflows.ledger(store).ok


# -- the command line and the ledger check ------------------------------------------------------------


def test_load_and_check_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:{tmp_path / 'cli.sqlite3'}"
    assert cli.main(["load", "--store", url, "--transfers", "80", "--users", "4"]) == 0
    out = capsys.readouterr().out
    assert "[ ok ] answers" in out and "no_such_account" in out and "invalid" in out
    assert cli.main(["check", "--store", url]) == 0
    assert "PASS" in capsys.readouterr().out
    store = _harness.open_with(url, workflows.TABLES)
    run(
        atomic(workflows.ACCOUNTS, "load0-a1", lambda tx: tx.increment("refunds")),
        request_id="x",
        store=store,
    )
    assert cli.main(["check", "--store", url]) == 0  # a refund counter alone moves no money
    run(
        atomic(workflows.ACCOUNTS, "load0-a1", lambda tx: tx.increment("balance", 5)),
        request_id="y",
        store=store,
    )
    store.close()
    assert cli.main(["check", "--store", url]) == 1
    assert "money not conserved: 6000 opened, 6005 now" in capsys.readouterr().out


def test_the_ledger_catches_a_transfer_applied_twice_or_half(store: Store) -> None:
    run(transfer(req(30)), request_id="t-1", store=store)
    assert workflows.ledger(store).ok
    # The same debit and credit again without an audit row: money is conserved, the ledger is not.
    run(
        atomic(workflows.ACCOUNTS, "alice", lambda tx: tx.increment("balance", -30)),
        request_id="d",
        store=store,
    )
    run(
        atomic(workflows.ACCOUNTS, "bob", lambda tx: tx.increment("balance", 30)), request_id="c", store=store
    )
    found = workflows.ledger(store)
    assert not found.ok and found.money_opened == found.money_now
    assert any("account alice: balance 40" in problem for problem in found.problems)


def test_load_through_the_api(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'http.sqlite3'}"
    store = _harness.open_with(store_url, workflows.TABLES)
    with running(create_app(TransferService(store_url))) as url:
        report = cli.run_load(
            cli.BankHttp(_harness.HttpClient([url])), cli.LoadSettings(users=4, transfers=40)
        )
    assert not report.problems, report.problems
    assert report.outcomes["completed"] == workflows.ledger(store).audit_rows > 0


# -- load + SIGKILL + check: servers and `idemflow worker` processes killed mid-request ---------------


@pytest.mark.slow
def test_demo_with_sigkilled_servers_and_workers_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(["demo", "--data", str(tmp_path), "--transfers", "60", "--kills", "2", "--seed", "9"]) == 0
    )
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out and "2 SIGKILLs (1 API servers, 1 workers)" in out
    assert "debits refunded" in out


@pytest.mark.slow
def test_demo_with_sigkilled_servers_and_workers_on_azurite(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    prefix = f"tr{uuid.uuid4().hex[:8]}"
    settings = cli.DemoSettings(
        store=f"azure:?prefix={prefix}",
        queue=f"azure-queue:{prefix}?visibility_timeout=2",
        kills=2,
        load=cli.LoadSettings(transfers=30, users=4, seed=17),
    )
    report = cli.run_demo(settings)
    assert report.ok, report.render()
    assert sum(report.crashes.kills.values()) == 2
    assert report.verdict.audit_rows == report.load.outcomes["completed"] > 0
    assert report.verdict.refunds == report.load.outcomes["no_such_account"] > 0


@pytest.mark.slow
def test_demo_on_dynamodb_local_under_the_services_conflicts(
    moto: Moto, request: pytest.FixtureRequest
) -> None:
    """AWS's own engine, every process meeting transaction conflicts (overlaps and 5% phantoms)."""
    prefix = f"tr{uuid.uuid4().hex[:8]}"
    settings = cli.DemoSettings(
        store=dynamodb_url("dynamodb-local", request, prefix),
        queue=f"sqs:{prefix}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=2",
        kills=2,
        load=cli.LoadSettings(transfers=30, users=8, seed=19),
    )
    report = cli.run_demo(settings)
    assert report.ok, report.render()
    assert report.verdict.audit_rows == report.load.outcomes["completed"] > 0
