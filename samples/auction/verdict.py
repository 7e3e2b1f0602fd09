"""Whether the auction's tables are right: :func:`check` and the :class:`Verdict` it returns.

The one judge of a run, whatever drove it — the tests, ``python -m
samples.auction check``, the demo after its kills, the chaos suite while
requests run — so it lives apart from the workflows it judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idemflow import ShardedCounter
from idemflow.client import rows
from idemflow.client import status as request_status
from idemflow.stores import Store
from samples.auction.closing import (
    Closing,
    Lateness,
    auto_close,
    closing_of,
    punctuality,
    timer_agrees,
    timer_id,
)
from samples.auction.tables import BIDS, ITEMS, POPULAR, WINNERS
from samples.auction.views import _partitions, wallets

CHECKS = ("bids", "sales", "money", "closing")
"""What :func:`check` verifies, each reported separately in :attr:`Verdict.failed`."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`check` found; ``problems`` is empty when every invariant holds."""

    items: int
    bids: int
    sold: int
    unsold: int
    money: int
    """Sum of the balances (equal to the sum of the deposits when money is conserved)."""
    problems: tuple[str, ...]
    failed: frozenset[str]
    """The :data:`CHECKS` that found a problem."""
    closings: tuple[Closing, ...] = ()
    """Every item's closing time and close, by item id."""
    late: float | None = None
    """The lateness tolerance the closes were judged by (None: not judged)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def _closing(self) -> str:
        closed = [closing for closing in self.closings if closing.at is not None]
        timed = sum(closing.by == "timer" for closing in closed)
        late = "" if self.late is None else f", none more than {self.late:g} s after it"
        lateness = Lateness.of(closed)
        return (
            f"closing: {len(closed)} of {len(self.closings)} items closed, each once ({timed} by its timer, "
            f"{len(closed) - timed} by a client), none before its closing time{late}"
            + (f"; late by {lateness.line()}" if lateness else "")
        )

    def lines(self) -> list[str]:
        """The verdict for people: one line per check, then the problems."""

        def mark(check: str) -> str:
            return "FAIL" if check in self.failed else " ok "

        return [
            f"  [{mark('bids')}] bids: {self.bids} accepted on {self.items} items, each in time, above the "
            "minimum and the bid before it, counted once",
            f"  [{mark('sales')}] sales: {self.sold} sold, each to its highest bidder charged once, losers "
            f"released; {self.unsold} unsold, moving no money",
            f"  [{mark('money')}] money conserved: {self.money} in the wallets, each its deposits plus sales "
            "minus payments",
            f"  [{mark('closing')}] {self._closing()}",
            *(f"  - {problem}" for problem in self.problems[:20]),
            *([f"  ... and {len(self.problems) - 20} more"] if len(self.problems) > 20 else []),
        ]


def _payments(purse: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, str, int]]]:
    """``(paid|sold, owner, amount)`` rows of every wallet, by item."""
    found: dict[str, list[tuple[str, str, int]]] = {}
    for owner, held in purse.items():
        for key, value in held.items():
            kind, _, item = key.partition(":")
            if kind in ("paid", "sold") and item:
                found.setdefault(item, []).append((kind, owner, value))
    return found


def _check_bids(item: str, terms: dict[str, Any], placed: list[dict[str, Any]]) -> list[str]:
    problems = []
    for n, row in enumerate(placed):
        late, low = row["at"] >= terms["closes_at"], row["amount"] < terms["min_price"]
        if late or low or row["bidder"] == terms["seller"]:
            problems.append(f"{item!r}: bid {row['seq']} should have been refused: {row}")
        if row["seq"] != n + 1 or (n > 0 and row["amount"] <= placed[n - 1]["amount"]):
            problems.append(f"{item!r}: bid {row['seq']} does not beat the one before it")
    return problems


def _check_sale(
    item: str,
    found: dict[str, Any],
    ledger: dict[str, Any],
    polled: dict[str, Any],
    moved: list[tuple[str, str, int]],
) -> list[str]:
    terms, status, sale, result = found["terms"], found.get("status"), found.get("sale"), polled.get("result")
    best = ledger.get("max")
    if status == "sold":
        if best is None or sale != result or sale is None or sale.get("winner") != best["bidder"]:
            return [f"{item!r}: sold as {sale}, published as {result}, but the highest bid is {best}"]
        expected = [("paid", best["bidder"], best["amount"]), ("sold", terms["seller"], best["amount"])]
        if moved != sorted(expected):
            return [
                f"{item!r}: sold to {best['bidder']!r} for {best['amount']}, but the wallets show {moved}"
            ]
        losers = sorted(set(ledger.get("bidders", [])) - {best["bidder"]})
        if sorted(sale["released"]) != losers:
            return [f"{item!r}: released {sale['released']}, but the losing bidders are {losers}"]
        return []
    if status not in ("unsold", "open"):
        return [f"{item!r}: status {status!r}, a close did not finish (run it again)"]
    problems = [f"{item!r} is {status} but moved money: {moved}"] if moved else []
    if status == "unsold" and (result is None or result.get("status") != "unsold"):
        problems.append(f"{item!r} is unsold but the published result is {result}")
    if status == "open" and (result is not None or ledger.get("closed") is not None):
        problems.append(f"{item!r} is open but its bids are closed or a result is published: {result}")
    return problems


def _check_moving(item: str, found: dict[str, Any], ledger: dict[str, Any], moved: list[Any]) -> list[str]:
    """What holds at every instant, even while a close runs: money moves only for a sealed item,
    from its highest bidder to its seller, once each way, the seller paid after the winner."""
    status = found.get("status")
    if not moved:
        return [f"{item!r} is sold but moved no money"] if status == "sold" else []
    if status == "unsold":
        return [f"{item!r} is unsold but moved money: {moved}"]
    best = ledger.get("max")
    if ledger.get("closed") is None or best is None:
        return [f"{item!r}: money moved before its bids were sealed: {moved}"]
    paid = ("paid", best["bidder"], best["amount"])
    whole = [paid, ("sold", found["terms"]["seller"], best["amount"])]
    if moved != whole and (moved != [paid] or status == "sold"):
        return [f"{item!r}: the highest bid is {best}, but the wallets show {moved}"]
    return []


def _check_closing(
    store: Store,
    closing: Closing,
    status: str | None,
    *,
    settled: bool,
    late: float | None,
    now: float | None,
) -> list[str]:
    """Closed once and on time (see :func:`check`); the timer's run record is read only once settled."""
    problems = punctuality(closing, late=late, now=now)
    if not settled:
        return problems
    if closing.outcome is not None and closing.outcome != status:
        problems.append(f"{closing.item!r} is {status} but its close says {closing.outcome}: not finished")
    return problems + timer_agrees(closing, request_status(store, auto_close.name, timer_id(closing.item)))


def check(
    store: Store, *, settled: bool = True, late: float | None = None, now: float | None = None
) -> Verdict:
    """Verify the tables: valid bids; each item closed once, on time; winner charged once; money conserved.

    - ``bids``: every recorded bid was in time, at least the minimum, not
      the seller's, and beat the one before it (by ``seq``); ``max``, the
      polled ``leader`` and the ``popular`` counter agree with the bids;
    - ``sales``: a sold item's winner is its highest bidder, whose wallet
      holds the one ``paid:<item>`` row of the amount, the seller's the one
      ``sold:<item>`` row, and every other bidder is released; an unsold or
      open item moved no money; no close is left half done;
    - ``money``: balances sum to the deposits, and each wallet's balance is
      its deposits minus what it paid plus what it sold;
    - ``closing``: no item was closed before its closing time; with
      ``late`` (seconds, see :func:`~samples.auction.closing.tolerance`)
      none was closed more than ``late`` after it and, given ``now``, none
      is still open that long after it; settled, each close finished and the
      item's timer request agrees with its bids: it closed the item (and
      finished) or was refused ``already_closed`` because a client's close
      came first — never both, and every item has its timer.

    Run it once the workers drained the queue: a bid between its steps is
    not led and counted *yet*. ``settled=False`` checks instead what must
    hold at every instant, while bids are being led and counted and closes
    run (the chaos suite checks it continuously): a leader or a count may
    trail the bids, a close may be half done and money on its way from the
    winner to the seller; but no bid is invalid or counted twice, no money
    moves but once from the highest bidder to the seller, none is created.
    The tables are read in the order that makes this sound — items, wallets,
    winners, popular, bids: a row read later is never behind one read before.
    """
    problems: list[tuple[str, str]] = []
    items, purse = _partitions(store, ITEMS), wallets(store)
    winners = _partitions(store, WINNERS)
    counted: dict[str, Any] = ShardedCounter.totals(
        {item: n for (_p, item), n in rows(store, POPULAR).items()}
    )
    bids = _partitions(store, BIDS)
    payments = _payments(purse)
    recorded = sold = unsold = 0
    closings: list[Closing] = []
    # While requests run, an item registered after ``items`` was read may show elsewhere: skip it.
    seen = set(items) | ({*bids, *winners, *payments, *counted} if settled else set())
    for item in sorted(seen):
        found, ledger, polled = items.get(item, {}), bids.get(item, {}), winners.get(item, {})
        if "terms" not in found:
            problems.append(
                ("bids", f"{item!r}: rows in bids, winners, popular or wallets, but no such item")
            )
            continue
        placed = sorted((row for key, row in ledger.items() if key.startswith("b:")), key=lambda b: b["seq"])
        recorded += len(placed)
        problems += [("bids", problem) for problem in _check_bids(item, found["terms"], placed)]
        best, leader, count = placed[-1] if placed else None, polled.get("leader"), counted.get(item, 0)
        if ledger.get("max") != best or (leader != best if settled else leader not in [None, *placed]):
            problems.append(
                ("bids", f"{item!r}: highest bid {best}, but max {ledger.get('max')} and leader {leader}")
            )
        if count != len(placed) if settled else count > len(placed):
            problems.append(("bids", f"{item!r}: {len(placed)} bids, {count} counted in popular"))
        moved = sorted(payments.get(item, []))
        if settled:
            sales = _check_sale(item, found, ledger, polled, moved)
        else:
            sales = _check_moving(item, found, ledger, moved)
        problems += [("sales", problem) for problem in sales]
        closing = closing_of(item, found["terms"], ledger.get("closed"))
        closings.append(closing)
        timing = _check_closing(store, closing, found.get("status"), settled=settled, late=late, now=now)
        problems += [("closing", problem) for problem in timing]
        sold += found.get("status") == "sold"
        unsold += found.get("status") == "unsold"
    total = deposited = 0
    for owner, held in sorted(purse.items()):
        balance, paid_in = held.get("balance", 0), held.get("deposited", 0)
        total, deposited = total + balance, deposited + paid_in
        flows = sum(
            value if key.startswith("sold:") else -value
            for key, value in held.items()
            if key[:5] in ("paid:", "sold:")
        )
        if balance != paid_in + flows or balance < 0:
            problems.append(
                ("money", f"wallet {owner!r}: balance {balance}, deposits and sales give {paid_in + flows}")
            )
    if total != deposited if settled else total > deposited:
        problems.append(("money", f"money not conserved: {deposited} deposited, {total} in the wallets"))
    return Verdict(
        items=len(items),
        bids=recorded,
        sold=sold,
        unsold=unsold,
        money=total,
        problems=tuple(message for _check, message in problems),
        failed=frozenset(check for check, _message in problems),
        closings=tuple(closings),
        late=late,
    )


__all__ = ["CHECKS", "Verdict", "check"]
