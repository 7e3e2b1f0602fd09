"""The paper's auction application, written the way a user of idemflow writes it.

Five tables, each partitioned so that no step touches two partitions:

- ``wallets/<owner>``: ``balance``, ``deposited``, and one ``paid:<item>`` or
  ``sold:<item>`` row per auction the owner won or sold;
- ``items/<item>``: the item's ``terms`` (title, seller, minimum price,
  closing time), its ``status`` (open, charging, sold, unsold) and ``sale``;
- ``bids/<item>``: a copy of the terms, every accepted bid (``b:<bid id>``),
  the current ``max``, the ``bidders`` and, once closed, ``closed``: when
  (the close's ``now()``), by whom (``timer`` or ``client``) and the outcome;
- ``winners/<item>``: the ``leader`` and, once closed, the ``result``: what
  the front end polls;
- ``popular/all``: the number of accepted bids, a sharded counter per item
  (:class:`~idemflow.ShardedCounter`).

**Bidding** (:func:`bid`) is the paper's workflow: read the time once
(``now()``, memoized), then (1) validate the bid and record it if it beats
the current maximum, in ``bids/<item>`` — bids after the closing time and
below the minimum price are refused with a clear reason, before anything is
written; then a ``checkpoint()``; (2) mark the leader in ``winners/<item>``
(only ever upwards, so steps of different bids may finish in any order);
(3) count it in ``popular``. Under :func:`idemflow.run` the checkpoint does
nothing; under :func:`idemflow.async_worklist.submit` the bidder is answered
once the bid is placed and ``idemflow worker`` processes lead and count it —
the paper's asynchronous variant, the same workflow. Bids reserve no money:
as on most auction sites a bid is a promise, paid when the auction closes.

**Closing** (:func:`~samples.auction.closing.close`, in
:mod:`samples.auction.closing`) seals the bids, then charges the winner
exactly once and pays the seller; the losers are released. A failed payment
is compensated: the item ends unsold. **Nobody has to ask for it:**
:func:`register` starts the item's closing timer, a child request
(:func:`~samples.auction.closing.auto_close`, id ``close-<item>``) that
sleeps until the closing time — durably: under workers the sleep holds no
worker and survives their deaths — then closes the item. A client may
still close it (a close before the closing time is refused ``still_open``);
whichever close comes first wins and the other is refused
``already_closed``. The timer needs a worker running: with a queue the API
submits ``register``, so the timer reaches the queue in the API at once;
under :func:`idemflow.run` a worker's outbox relay sends it (see
:mod:`samples.auction.closing`, which also says how late a timer may be).

>>> from idemflow import MemoryStore, run
>>> store, now_is = MemoryStore(), [100.0]
>>> def go(m, request_id):  # run with a clock the example sets
...     return run(m, request_id=request_id, store=store, clock=lambda: now_is[0])
>>> for owner, amount in [("sam", 0), ("ada", 500)]:
...     _ = go(deposit({"owner": owner, "amount": amount}), "d-" + owner)
>>> go(register({"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60}), "i-1")
{'closes_at': 160.0, 'id': 'lamp', 'min_price': 10, 'seller': 'sam', 'title': 'Lamp'}
>>> from idemflow import WorkflowAborted
>>> try:
...     go(bid({"item": "lamp", "bidder": "ada", "amount": 5}), "b-1")
... except WorkflowAborted as refused:
...     print(refused.reason)
{'code': 'below_minimum', 'message': 'bid 5 is below the minimum price 10'}
>>> go(bid({"item": "lamp", "bidder": "ada", "amount": 25}), "b-2")["seq"]
1
>>> now_is[0] = 160.0  # the closing time: here a client closes it, no worker runs the timer
>>> go(close({"item": "lamp"}), "c-1")
{'amount': 25, 'item': 'lamp', 'released': [], 'status': 'sold', 'winner': 'ada'}
>>> wallets(store)["ada"]["balance"], wallets(store)["sam"]["balance"], check(store).ok
(475, 25, True)
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from idemflow import (
    Idem,
    ShardedCounter,
    Store,
    Tx,
    Workflow,
    arows,
    atomic,
    now,
    rows,
    start,
    uuid4,
    workflow,
)
from idemflow.aggregates import totals
from idemflow.async_worklist import checkpoint
from idemflow.async_worklist import status as request_status
from idemflow.compensation import abort
from idemflow.stores import AsyncStore
from samples.auction.closing import (
    CloseRequest,
    Closing,
    Lateness,
    auto_close,
    close,
    closing_of,
    punctuality,
    timer_agrees,
    timer_id,
)
from samples.auction.tables import BIDS, ITEMS, POPULAR, TABLES, WALLETS, WINNERS, refusal, when, write

EVERYONE = "all"
"""The one partition of ``popular``: a :class:`~idemflow.ShardedCounter` per item (rows
``<item>#<shard>``), so concurrent bids on a hot item add to different rows and rarely meet."""
SHARDS = 8

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_MONEY = 10**12
MAX_DURATION = 30 * 24 * 3600.0


class Deposit(TypedDict):
    """Input of :func:`deposit`: opens the wallet on first use; ``amount`` may be 0."""

    owner: str
    amount: int


class NewItem(TypedDict):
    """Input of :func:`register`: exactly one of ``closes_at`` (epoch seconds) and ``closes_in`` (seconds)."""

    title: str
    seller: str
    min_price: int
    closes_at: NotRequired[float]
    closes_in: NotRequired[float]
    id: NotRequired[str]


class BidRequest(TypedDict):
    """Input of :func:`bid`."""

    item: str
    bidder: str
    amount: int


class Invalid(ValueError):
    """A request whose shape is wrong; raised before anything runs (the API answers 422)."""


# -- validation: pure functions, shared by the workflows, the API and the load ------------


def _name(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if type(value) is not str or not value.strip() or len(value) > 100:
        raise Invalid(f"{field!r} must be a non-empty string of at most 100 characters")
    return value


def _money(body: dict[str, Any], field: str, least: int) -> int:
    value = body.get(field)
    if type(value) is not int or not least <= value <= MAX_MONEY:
        raise Invalid(f"{field!r} must be a whole number from {least} to {MAX_MONEY}, not {value!r}")
    return value


def _fields(body: object, required: set[str], optional: Collection[str] = ()) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Invalid(f"expected a JSON object with {sorted(required)}")
    missing, unknown = required - set(body), set(body) - required - set(optional)
    if missing or unknown:
        raise Invalid(f"missing {sorted(missing)}, unknown {sorted(unknown)}; expected {sorted(required)}")
    return body


def parse_deposit(body: object) -> Deposit:
    """Validate a deposit; :class:`Invalid` says what is wrong."""
    fields = _fields(body, {"owner", "amount"})
    return {"owner": _name(fields, "owner"), "amount": _money(fields, "amount", 0)}


def parse_item(body: object) -> NewItem:
    """Validate an item to register.

    >>> parse_item({"title": "Lamp", "seller": "sam", "min_price": 0, "closes_in": 60})
    Traceback (most recent call last):
    ...
    samples.auction.workflows.Invalid: 'min_price' must be a whole number from 1 to 1000000000000, not 0
    """
    fields = _fields(body, {"title", "seller", "min_price"}, {"closes_at", "closes_in", "id"})
    item: NewItem = {
        "title": _name(fields, "title"),
        "seller": _name(fields, "seller"),
        "min_price": _money(fields, "min_price", 1),
    }
    if ("closes_at" in fields) == ("closes_in" in fields):
        raise Invalid("give exactly one of 'closes_at' (epoch seconds) and 'closes_in' (seconds from now)")
    field = "closes_at" if "closes_at" in fields else "closes_in"
    value = fields[field]
    if type(value) not in (int, float) or not 0 < value < (MAX_DURATION if field == "closes_in" else 1e11):
        raise Invalid(f"{field!r} must be a positive number of seconds, not {value!r}")
    if field == "closes_at":
        item["closes_at"] = float(value)
    else:
        item["closes_in"] = float(value)
    if "id" in fields:
        if type(fields["id"]) is not str or not _ID.fullmatch(fields["id"]):
            raise Invalid(f"'id' must be 1-64 letters, digits, '_' or '-', not {fields['id']!r}")
        item["id"] = fields["id"]
    return item


def parse_bid(item: str, body: object) -> BidRequest:
    """Validate a bid's shape (whether it is high enough and in time is the workflow's business)."""
    fields = _fields(body, {"bidder", "amount"})
    return {"item": item, "bidder": _name(fields, "bidder"), "amount": _money(fields, "amount", 1)}


# -- step bodies ----------------------------------------------------------------------------


def _deposit(amount: int) -> Callable[[Tx], int]:
    # Server-side increments and a blind write: concurrent deposits never conflict.
    def body(tx: Tx) -> int:
        tx.put("opened", True)
        tx.increment("balance", amount)
        tx.increment("deposited", amount)
        return amount

    return body


def _has_wallet(owner: str) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        if tx.get("opened") is None:
            tx.abort(refusal("no_wallet", f"seller {owner!r} has no wallet: deposit (0 will do) first"))

    return body


def _list(terms: dict[str, Any]) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        if tx.get("terms") is not None:
            tx.abort(refusal("exists", f"item {terms['id']!r} already exists"))
        tx.put("terms", terms)
        tx.put("status", "open")

    return body


def _place(req: BidRequest, bid_id: str, t: float) -> Callable[[Tx], dict[str, Any]]:
    def body(tx: Tx) -> dict[str, Any]:
        item, bidder, amount = req["item"], req["bidder"], req["amount"]
        terms = tx.get("terms")
        if terms is None:
            tx.abort(refusal("not_found", f"no item {item!r}"))
        if tx.get("closed") is not None or t >= terms["closes_at"]:
            tx.abort(refusal("closed", f"bidding on {item!r} closed at {when(terms['closes_at'])}"))
        if bidder == terms["seller"]:
            tx.abort(refusal("own_item", f"{bidder!r} sells {item!r} and cannot bid on it"))
        if amount < terms["min_price"]:
            tx.abort(
                refusal("below_minimum", f"bid {amount} is below the minimum price {terms['min_price']}")
            )
        best = tx.get("max")
        if best is not None and amount <= best["amount"]:
            tx.abort(refusal("too_low", f"bid {amount} does not beat the current maximum {best['amount']}"))
        seq = tx.get("count", 0) + 1
        placed = {"bid": bid_id, "item": item, "bidder": bidder, "amount": amount, "at": t, "seq": seq}
        tx.put("count", seq)
        tx.put("b:" + bid_id, placed)
        tx.put("max", placed)
        bidders = tx.get("bidders", [])
        if bidder not in bidders:
            tx.put("bidders", [*bidders, bidder])
        return placed

    return body


def _lead(placed: dict[str, Any]) -> Callable[[Tx], None]:
    # Only ever upwards: the lead steps of two bids may commit in either order.
    def body(tx: Tx) -> None:
        leader = tx.get("leader")
        if leader is None or placed["amount"] > leader["amount"]:
            tx.put("leader", placed)

    return body


def _count(item: str) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        ShardedCounter(item, SHARDS).add(tx)

    return body


# -- workflows -------------------------------------------------------------------------------


@workflow("deposit")
def deposit(req: Deposit) -> Idem[int]:
    """Add ``amount`` to a wallet, opening it on first use; one step."""
    return atomic(WALLETS, req["owner"], _deposit(req["amount"]), name="deposit")


@workflow("register")
def register(req: NewItem) -> Generator[Idem[Any], Any, dict[str, Any]]:
    """Put an item up for auction; aborts ``invalid``, ``no_wallet`` (seller) or ``exists``.

    The seller needs a wallet, so the sale can always be paid out. Without
    an ``id`` one is derived from the request id (:func:`idemflow.uuid4`).
    The last step starts the item's closing timer
    (:func:`~samples.auction.closing.auto_close`, request id ``close-<item>``):
    once, however often the register is retried; an ``exists`` refusal comes
    before it, so a second register of the item starts none.
    """
    try:
        parse_item(dict(req))
    except Invalid as exc:
        yield abort(refusal("invalid", str(exc)))
    t: float = yield now()
    closes_at = req["closes_at"] if "closes_at" in req else t + req["closes_in"]
    if closes_at <= t:
        yield abort(refusal("invalid", f"the closing time {when(closes_at)} has passed"))
    if "id" in req:
        item_id = req["id"]
    else:
        item_id = yield uuid4()
    terms = {
        "id": item_id,
        "title": req["title"],
        "seller": req["seller"],
        "min_price": req["min_price"],
        "closes_at": closes_at,
    }
    yield atomic(WALLETS, req["seller"], _has_wallet(req["seller"]), name="seller")
    yield atomic(ITEMS, item_id, _list(terms), name="list")
    yield atomic(BIDS, item_id, write({"terms": terms}), name="open")
    yield start(auto_close({"item": item_id, "closes_at": closes_at}), request_id=timer_id(item_id))
    return terms


@workflow("bid")
def bid(req: BidRequest) -> Generator[Idem[Any], Any, dict[str, Any]]:
    """Place a bid; exactly once per request id. Returns the recorded bid (with its ``seq``).

    Refusals (aborts in the first step, nothing written): ``not_found``,
    ``closed`` (at or after the closing time, or already closed), ``own_item``,
    ``below_minimum``, ``too_low`` (does not beat the current maximum). After
    the bid is placed comes the checkpoint: submitted, the bidder is answered
    there and a worker leads and counts it.
    """
    try:
        parse_bid(req["item"], {"bidder": req["bidder"], "amount": req["amount"]})
    except Invalid as exc:
        yield abort(refusal("invalid", str(exc)))
    t: float = yield now()
    bid_id: str = yield uuid4()
    placed = yield atomic(BIDS, req["item"], _place(req, bid_id, t), name="place")
    yield checkpoint()  # the asynchronous variant answers the bidder here
    yield atomic(WINNERS, req["item"], _lead(placed), name="lead")
    yield atomic(POPULAR, EVERYONE, _count(req["item"]), name="count")
    return dict(placed)


WORKFLOWS: list[Workflow[Any, Any]] = [deposit, register, bid, close, auto_close]
"""Every workflow of the sample (what ``idemflow worker samples.auction.workflows:WORKFLOWS`` runs)."""


# -- reads: for the API, tools and the checker ----------------------------------------------
# Each view is a pure fold over the partitions it needs (``*_of``), fetched by a blocking
# function for tools, tests and the checker, or awaited by its ``a``-twin for the API.


def _partitions(store: Store, table: str, partition: str | None = None) -> dict[str, dict[str, Any]]:
    """``{partition: {key: value}}`` of a table, or of one partition of it (a scan: not for steps)."""
    found: dict[str, dict[str, Any]] = {}
    for (part, key), value in rows(store, table, partition).items():
        found.setdefault(part, {})[key] = value
    return found


def _partition(store: Store, table: str, partition: str) -> dict[str, Any]:
    """``{key: value}`` of one partition."""
    return {key: value for (_part, key), value in rows(store, table, partition).items()}


async def _apartition(store: Store | AsyncStore, table: str, partition: str) -> dict[str, Any]:
    """:func:`_partition`, awaitable."""
    return {key: value for (_part, key), value in (await arows(store, table, partition)).items()}


def item_of(terms: Mapping[str, Any], polled: Mapping[str, Any]) -> dict[str, Any] | None:
    """An item's view from its ``items`` and ``winners`` partitions (None: no such item)."""
    if "terms" not in terms:
        return None
    return {
        **terms["terms"],
        "status": terms.get("status", "open"),
        "leader": polled.get("leader"),
        "result": polled.get("result"),
    }


def winner_of(item: str, polled: Mapping[str, Any]) -> dict[str, Any]:
    """What the front end polls, from the item's ``winners`` partition."""
    return {"item": item, "leader": polled.get("leader"), "result": polled.get("result")}


def ranked(counters: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """The most-bid items, most first, from the rows of ``popular/all`` (sharded counters).

    >>> ranked({"lamp#0": 2, "vase#3": 1, "lamp#7": 1}, 10)
    [{'item': 'lamp', 'bids': 3}, {'item': 'vase', 'bids': 1}]
    """
    counts = [(count, item) for item, count in totals(counters).items()]
    return [
        {"item": item, "bids": count} for count, item in sorted(counts, key=lambda p: (-p[0], p[1]))[:limit]
    ]


def item_view(store: Store, item: str) -> dict[str, Any] | None:
    """What a front end shows for an item: terms, status, leader and result (None: no such item)."""
    return item_of(_partition(store, ITEMS, item), _partition(store, WINNERS, item))


async def aitem_view(store: Store | AsyncStore, item: str) -> dict[str, Any] | None:
    """:func:`item_view`, awaitable (both partitions read at once)."""
    terms, polled = await asyncio.gather(_apartition(store, ITEMS, item), _apartition(store, WINNERS, item))
    return item_of(terms, polled)


def winner_view(store: Store, item: str) -> dict[str, Any]:
    """The row the front end polls: the current leader and, once closed, the result."""
    return winner_of(item, _partition(store, WINNERS, item))


async def awinner_view(store: Store | AsyncStore, item: str) -> dict[str, Any]:
    """:func:`winner_view`, awaitable."""
    return winner_of(item, await _apartition(store, WINNERS, item))


def popular(store: Store, limit: int = 10) -> list[dict[str, Any]]:
    """The most-bid items, most first."""
    return ranked(_partition(store, POPULAR, EVERYONE), limit)


async def apopular(store: Store | AsyncStore, limit: int = 10) -> list[dict[str, Any]]:
    """:func:`popular`, awaitable."""
    return ranked(await _apartition(store, POPULAR, EVERYONE), limit)


def wallets(store: Store) -> dict[str, dict[str, Any]]:
    """Every wallet's rows, by owner."""
    return _partitions(store, WALLETS)


async def awallet(store: Store | AsyncStore, owner: str) -> dict[str, Any] | None:
    """One wallet's rows (None: no such wallet)."""
    return await _apartition(store, WALLETS, owner) or None


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
    counted: dict[str, Any] = totals({item: n for (_p, item), n in rows(store, POPULAR).items()})
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


__all__ = [
    "BIDS",
    "CHECKS",
    "EVERYONE",
    "ITEMS",
    "POPULAR",
    "TABLES",
    "WALLETS",
    "WINNERS",
    "WORKFLOWS",
    "BidRequest",
    "CloseRequest",
    "Closing",
    "Deposit",
    "Invalid",
    "NewItem",
    "Verdict",
    "aitem_view",
    "apopular",
    "auto_close",
    "awallet",
    "awinner_view",
    "bid",
    "check",
    "close",
    "deposit",
    "item_of",
    "item_view",
    "parse_bid",
    "parse_deposit",
    "parse_item",
    "popular",
    "ranked",
    "refusal",
    "register",
    "timer_id",
    "wallets",
    "winner_of",
    "winner_view",
]
