"""Reading and checking the bank's tables: for tools, tests and the demos, never for workflows.

Scans (:func:`balances`, :func:`refunds`) are no steps, and the checks recompute what the tables
should hold from the requests' outcomes (:func:`check`) or from the audit rows alone
(:func:`ledger`), so they live apart from the steps in :mod:`samples.transfer.workflows`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from returns.result import Failure, Success

from idemflow.stores import Store
from idemflow.testing import data_rows
from samples.transfer.tables import ACCOUNTS, TRANSFERS, Outcome, TransferRequest, missing


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

    >>> from idemflow.stores import MemoryStore
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

    >>> from idemflow.stores import MemoryStore
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

    >>> from idemflow.stores import MemoryStore
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
    "CHECKS",
    "Ledger",
    "Verdict",
    "balances",
    "check",
    "ledger",
    "refunds",
    "total_money",
]
