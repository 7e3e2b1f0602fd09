"""The paper's bank transfer, written the way a user of idemflow writes it.

Each account is one partition of the ``accounts`` table (rows ``balance``,
``opened`` and ``refunds``); every completed transfer leaves one audit row in
the ``transfers`` table, in the partition of its source account, keyed by a
transfer id that :func:`idemflow.uuid4` derives from the request id (so a
replay writes the same row, never a second one).

A transfer is three atomic steps, each on one partition:

1. debit the source (abort on a missing account or insufficient funds),
   registering a refund as its compensation;
2. credit the destination; a missing destination aborts the workflow, and
   idemflow then runs the refund, exactly once (the paper's case);
3. record the audit row.

The tables and the shapes of requests and results are in :mod:`samples.transfer.tables`; reading
and checking the tables, in :mod:`samples.transfer.checks`. This module re-exports both.

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
>>> from idemflow import run_result
>>> store = MemoryStore()
>>> for name, balance in [("alice", 100), ("bob", 0)]:
...     _ = run(open_account({"account": name, "balance": balance}), request_id="open-" + name, store=store)
>>> receipt = run(transfer({"src": "alice", "dst": "bob", "amount": 30}), request_id="t-1", store=store)
>>> receipt["left"]
70
>>> run_result(transfer({"src": "alice", "dst": "carol", "amount": 30}), request_id="t-2", store=store)
<Failure: workflow 'transfer' request 't-2' aborted: 'no such account: carol'>
>>> balances(store), refunds(store)
({'alice': 70, 'bob': 30}, {'alice': 1})
>>> from returns.result import Failure, Success
>>> from idemflow import WorkflowAborted
>>> check(store, opening={"alice": 100, "bob": 0}, outcomes={
...     "t-1": ({"src": "alice", "dst": "bob", "amount": 30}, Success(receipt)),
...     "t-2": ({"src": "alice", "dst": "carol", "amount": 30},
...             Failure(WorkflowAborted("no such account: carol", "transfer", "t-2"))),
... }).ok
True
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, Tx, Workflow, abort, atomic, checkpoint, uuid4, workflow
from samples.transfer.checks import CHECKS, Ledger, Verdict, balances, check, ledger, refunds, total_money
from samples.transfer.tables import (
    ACCOUNTS,
    TABLES,
    TRANSFERS,
    OpenRequest,
    Outcome,
    Receipt,
    TransferRequest,
    missing,
)

# -- step bodies ----------------------------------------------------------------
# Factories, so the amount and names are bound per request while the step's
# identity (its ``name=``) stays fixed: a replay after a code reload still
# matches the memos recorded before it.


def _open(account: str, balance: int) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        if tx.get("opened") is not None:
            tx.abort(f"account exists: {account}")
        tx.put("opened", balance)  # the opening balance: what the ledger check starts from
        tx.put("balance", balance)
        return balance

    return body


def _debit(account: str, amount: int) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        balance = tx.get("balance")
        if balance is None:
            tx.abort(missing(account))
        if balance < amount:
            tx.abort("insufficient funds")
        tx.put("balance", balance - amount)
        return int(balance - amount)

    return body


def _refund(amount: int) -> Callable[[Tx, int], None]:
    # The counter lets a checker prove the refund ran once per aborted
    # transfer; both rows are server-side increments, so a refund never
    # conflicts with concurrent debits of the same account.
    def compensate(tx: Tx, _left: int) -> None:
        tx.increment("balance", amount)
        tx.increment("refunds")

    return compensate


def _credit(account: str, amount: int) -> Callable[[Tx], None]:
    # Existence is read from ``opened``, a row that never changes, and the
    # balance is added server-side: credits never conflict with each other
    # or with debits, only the debit's read-check-write needs retries.
    def body(tx: Tx) -> None:
        if tx.get("opened") is None:
            tx.abort(missing(account))
        tx.increment("balance", amount)

    return body


def _record(transfer_id: str, req: TransferRequest) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.put(transfer_id, {"src": req["src"], "dst": req["dst"], "amount": req["amount"]})

    return body


# -- workflows -------------------------------------------------------------------


@workflow("open_account")
def open_account(req: OpenRequest) -> Idem[int]:
    """Open an account with a starting balance; opening it again aborts.

    One step, so a plain ``Idem`` rather than a generator.
    """
    return atomic(ACCOUNTS, req["account"], _open(req["account"], req["balance"]), name="open")


@workflow("transfer")
def transfer(req: TransferRequest) -> Generator[Idem[Any], Any, Receipt]:
    """Move ``amount`` from ``src`` to ``dst``; exactly once per request id.

    Aborts (``WorkflowAborted``) with ``"insufficient funds"``, ``"no such
    account: <name>"`` or ``"amount must be a positive integer"``; an abort
    after the debit refunds it.
    """
    src, dst, amount = req["src"], req["dst"], req["amount"]
    if type(amount) is not int or amount <= 0:
        # Checked inside the workflow so the refusal is memoized like any
        # other outcome: a duplicate gets the same Failure for one read.
        yield abort("amount must be a positive integer")
    transfer_id: str = yield uuid4()  # derived from the request id: no store call
    left: int = yield atomic(ACCOUNTS, src, _debit(src, amount), compensate=_refund(amount), name="debit")
    yield checkpoint()  # submitted, the client is answered once the money left src; a worker goes on
    yield atomic(ACCOUNTS, dst, _credit(dst, amount), name="credit")
    yield atomic(TRANSFERS, src, _record(transfer_id, req), name="record")
    return {"transfer": transfer_id, "left": left}


WORKFLOWS: list[Workflow[Any, Any]] = [open_account, transfer]
"""What a worker runs: ``idemflow worker samples.transfer.workflows:WORKFLOWS``."""


__all__ = [
    "ACCOUNTS",
    "CHECKS",
    "TABLES",
    "TRANSFERS",
    "WORKFLOWS",
    "Ledger",
    "OpenRequest",
    "Outcome",
    "Receipt",
    "TransferRequest",
    "Verdict",
    "balances",
    "check",
    "ledger",
    "missing",
    "open_account",
    "refunds",
    "total_money",
    "transfer",
]
