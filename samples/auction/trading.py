"""The workflows before the close: deposit into a wallet, register an item, bid on it.

Their step bodies live beside them; the close and its timer are in
:mod:`samples.auction.closing`, the reads in :mod:`samples.auction.views`.
:mod:`samples.auction.workflows` tells the whole story and re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, ShardedCounter, Tx, abort, atomic, checkpoint, now, start, uuid4, workflow
from samples.auction.closing import auto_close, timer_id
from samples.auction.tables import BIDS, ITEMS, POPULAR, WALLETS, WINNERS, refusal, when, write
from samples.auction.validation import BidRequest, Deposit, Invalid, NewItem, parse_bid, parse_item

EVERYONE = "all"
"""The one partition of ``popular``: a :class:`~idemflow.ShardedCounter` per item (rows
``<item>#<shard>``), so concurrent bids on a hot item add to different rows and rarely meet."""
SHARDS = 8


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


__all__ = ["EVERYONE", "SHARDS", "bid", "deposit", "register"]
