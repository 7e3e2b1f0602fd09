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

>>> from idemflow import MemoryStore, run
>>> from idemflow.compensation import run_result
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
>>> from idemflow.compensation import WorkflowAborted
>>> check(store, opening={"alice": 100, "bob": 0}, outcomes={
...     "t-1": ({"src": "alice", "dst": "bob", "amount": 30}, Success(receipt)),
...     "t-2": ({"src": "alice", "dst": "carol", "amount": 30},
...             Failure(WorkflowAborted("no such account: carol", "transfer", "t-2"))),
... }).ok
True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from returns.result import Failure, Result, Success

from idemflow import Idem, Store, Tx, Workflow, atomic, uuid4, workflow
from idemflow.async_worklist import checkpoint
from idemflow.compensation import WorkflowAborted, abort
from idemflow.testing import data_rows

ACCOUNTS = "accounts"
"""One partition per account: ``balance``, ``opened`` (the opening balance), and ``refunds``
once a debit was undone."""
TRANSFERS = "transfers"
"""Audit trail: partition = source account, key = transfer id, value = the transfer."""


class OpenRequest(TypedDict):
    """Input of :func:`open_account`."""

    account: str
    balance: int


class TransferRequest(TypedDict):
    """Input of :func:`transfer` (the request id travels beside it, in ``run``)."""

    src: str
    dst: str
    amount: int


class Receipt(TypedDict):
    """Result of a completed :func:`transfer`."""

    transfer: str
    """Key of the audit row in ``transfers/<src>``."""
    left: int
    """Source balance right after the debit."""


Outcome = Result[Receipt, WorkflowAborted]
"""What :func:`idemflow.compensation.run_result` gives for one transfer request."""


def missing(account: str) -> str:
    """The abort reason for an account that was never opened."""
    return f"no such account: {account}"


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
TABLES = (ACCOUNTS, TRANSFERS)


# -- reading and checking the tables ---------------------------------------------


def _account_rows(store: Store, key: str) -> dict[str, Any]:
    return {part: value for (_t, part, k), value in data_rows(store, ACCOUNTS).items() if k == key}


def balances(store: Store) -> dict[str, int]:
    """Every account's balance (a scan: for tools and checks, not for workflows)."""
    return _account_rows(store, "balance")


def refunds(store: Store) -> dict[str, int]:
    """How many debits were refunded, per account that ever had one."""
    return _account_rows(store, "refunds")


def total_money(store: Store, accounts: Iterable[str] | None = None) -> int:
    """Sum of the balances of ``accounts`` (default: every account in the table).

    >>> from idemflow import MemoryStore
    >>> total_money(MemoryStore(), ["alice"])
    0
    """
    found = balances(store)
    names = found if accounts is None else accounts
    return sum(found.get(name, 0) for name in names)


CHECKS = ("money", "balances", "audit", "refunds")
"""What :func:`check` verifies, each reported separately in :attr:`Verdict.failed`."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`check` found; ``problems`` is empty when every invariant holds."""

    money_before: int
    money_after: int
    accounts: int
    completed: int
    aborted: Mapping[str, int]
    """Aborted requests by reason (``"no such account: *"`` reasons grouped)."""
    refunds: int
    expected_refunds: int
    audit_rows: int
    problems: tuple[str, ...]
    failed: frozenset[str]
    """The :data:`CHECKS` that found a problem."""

    @property
    def ok(self) -> bool:
        return not self.problems


def check(
    store: Store,
    *,
    opening: Mapping[str, int],
    outcomes: Mapping[str, tuple[TransferRequest, Outcome]],
) -> Verdict:
    """Verify the tables against the outcome of every request (one entry per request id).

    - ``money``: the balances sum to the opening total;
    - ``balances``: every balance equals its opening balance with the
      completed transfers applied once each (a replay in this process), so
      aborted requests changed nothing and no account outside ``opening``
      holds money;
    - ``audit``: exactly one audit row per completed request, holding it;
    - ``refunds``: every request that aborted after its debit (missing
      destination) was refunded exactly once, and no other was.

    >>> from idemflow import MemoryStore
    >>> check(MemoryStore(), opening={}, outcomes={}).ok
    True
    """
    problems: list[tuple[str, str]] = []
    expected = dict(opening)
    expected_audit: dict[tuple[str, str], dict[str, Any]] = {}
    expected_refunds: Counter[str] = Counter()
    aborted: Counter[str] = Counter()
    completed = 0
    for req, outcome in outcomes.values():
        match outcome:
            case Success(receipt):
                completed += 1
                expected[req["src"]] = expected.get(req["src"], 0) - req["amount"]
                expected[req["dst"]] = expected.get(req["dst"], 0) + req["amount"]
                expected_audit[(req["src"], receipt["transfer"])] = dict(req)
            case Failure(error):
                reason = str(error.reason)
                aborted["no such account" if reason.startswith(missing("")) else reason] += 1
                if reason == missing(req["dst"]) and req["src"] in opening:
                    expected_refunds[req["src"]] += 1  # the debit had committed

    found = balances(store)
    before, after = sum(opening.values()), sum(found.values())
    if before != after:
        problems.append(("money", f"money not conserved: {before} before, {after} after"))
    for name in sorted(set(found) | set(expected)):
        if found.get(name) != expected.get(name):
            problems.append(
                (
                    "balances",
                    f"account {name}: balance {found.get(name)}, but the completed "
                    f"transfers applied once give {expected.get(name)}",
                )
            )

    audit = {(part, key): value for (_t, part, key), value in data_rows(store, TRANSFERS).items()}
    if len(audit) != completed:
        problems.append(("audit", f"{len(audit)} audit rows for {completed} completed requests"))
    for where in sorted(set(audit) | set(expected_audit)):
        if where not in audit:
            problems.append(("audit", f"completed transfer {where[1]} from {where[0]} has no audit row"))
        elif where not in expected_audit:
            problems.append(("audit", f"audit row {where[1]} in {where[0]} belongs to no completed request"))
        elif audit[where] != expected_audit[where]:
            problems.append(
                ("audit", f"audit row {where[1]} holds {audit[where]}, not {expected_audit[where]}")
            )

    counted = refunds(store)
    for name in sorted(set(counted) | set(expected_refunds)):
        if counted.get(name, 0) != expected_refunds[name]:
            problems.append(
                (
                    "refunds",
                    f"account {name}: refunded {counted.get(name, 0)} times, but "
                    f"{expected_refunds[name]} transfers from it aborted after the debit",
                )
            )

    return Verdict(
        money_before=before,
        money_after=after,
        accounts=len(opening),
        completed=completed,
        aborted=dict(aborted),
        refunds=sum(counted.values()),
        expected_refunds=sum(expected_refunds.values()),
        audit_rows=len(audit),
        problems=tuple(message for _check, message in problems),
        failed=frozenset(check for check, _message in problems),
    )


@dataclass(frozen=True, slots=True)
class Ledger:
    """What :func:`ledger` found; ``problems`` is empty when every invariant holds."""

    accounts: int
    money_opened: int
    money_now: int
    audit_rows: int
    refunds: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        def mark(ok: bool) -> str:
            return " ok " if ok else "FAIL"

        money_ok = self.money_opened == self.money_now
        return [
            f"  [{mark(money_ok)}] money: {self.money_opened} opened in {self.accounts} accounts, "
            f"{self.money_now} now",
            f"  [{mark(self.ok)}] ledger: every balance is its opening balance plus the "
            f"{self.audit_rows} audited transfers applied once ({self.refunds} debits refunded)",
            *(f"  - {problem}" for problem in self.problems[:12]),
        ]


def ledger(store: Store) -> Ledger:
    """Check the tables alone, at rest (no transfer in flight): money is conserved, and every
    balance equals its opening balance minus the audited transfers out of it plus those into it.

    An aborted transfer leaves no audit row and, if its debit had committed, a refund: a debit
    applied twice, a credit or refund applied twice or lost, or an audit row without its effects
    all break the equation of some account.

    >>> from idemflow import MemoryStore
    >>> ledger(MemoryStore()).ok
    True
    """
    opened = _account_rows(store, "opened")
    found = balances(store)
    problems: list[str] = []
    expected = {name: value for name, value in opened.items() if type(value) is int}
    for name, value in opened.items():
        if type(value) is not int:
            problems.append(f"account {name}: opening balance {value!r} is not an integer")
    audit = data_rows(store, TRANSFERS)
    for (_t, src, transfer_id), row in sorted(audit.items()):
        amount = row.get("amount") if isinstance(row, dict) else None
        if not (isinstance(row, dict) and row.get("src") == src and isinstance(amount, int)):
            problems.append(f"audit row {transfer_id} in {src} is malformed: {row!r}")
            continue
        dst = str(row.get("dst"))
        if src not in expected or dst not in expected:
            problems.append(f"audit row {transfer_id}: {src} -> {dst} involves an account never opened")
            continue
        expected[src] -= amount
        expected[dst] += amount
    for name in sorted(set(found) | set(expected)):
        if found.get(name) != expected.get(name):
            problems.append(
                f"account {name}: balance {found.get(name)}, but its opening balance with the audited "
                f"transfers applied once gives {expected.get(name)}"
            )
    before, after = sum(v for v in opened.values() if type(v) is int), sum(found.values())
    if before != after:
        problems.insert(0, f"money not conserved: {before} opened, {after} now")
    return Ledger(
        accounts=len(opened),
        money_opened=before,
        money_now=after,
        audit_rows=len(audit),
        refunds=sum(refunds(store).values()),
        problems=tuple(problems),
    )


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
