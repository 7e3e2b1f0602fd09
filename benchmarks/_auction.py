"""The auction bid, shaped like ``samples/auction``'s ``bid`` plus a checkpoint.

The sample's ``bid`` has no ``checkpoint()``, so its asynchronous variant
would answer only at the end; the benchmark needs one workflow that runs
both ways. This is the same shape: ``now()`` (a memoized step), *place* the
bid in ``bids/<item>`` if it beats the maximum (reads the terms, the
maximum and the count; writes the bid, the new maximum and the count),
then — after the checkpoint — *lead* in ``winners/<item>`` (only upwards)
and *count* it in ``popular/all`` (a server-side increment).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypedDict

from idemflow import Idem, Store, Tx, Workflow, atomic, now, run, workflow
from idemflow.async_worklist import checkpoint
from idemflow.compensation import abort

BIDS = "bids"
WINNERS = "winners"
POPULAR = "popular"
TABLES = (BIDS, WINNERS, POPULAR)
EVERYONE = "all"
CLOSES_AT = 4.0e9
MIN_PRICE = 1


class BidRequest(TypedDict):
    item: str
    bidder: str
    amount: int


def refusal(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def _open(item: str) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.put("terms", {"id": item, "seller": "house", "min_price": MIN_PRICE, "closes_at": CLOSES_AT})

    return body


def _place(req: BidRequest, t: float) -> Callable[[Tx], dict[str, Any]]:
    def body(tx: Tx) -> dict[str, Any]:
        terms = tx.get("terms")
        if terms is None:
            tx.abort(refusal("not_found", f"no item {req['item']!r}"))
        if t >= terms["closes_at"] or req["amount"] < terms["min_price"]:
            tx.abort(refusal("refused", "closed or below the minimum"))
        best = tx.get("max")
        if best is not None and req["amount"] <= best["amount"]:
            tx.abort(refusal("too_low", f"bid {req['amount']} does not beat {best['amount']}"))
        seq = tx.get("count", 0) + 1
        placed = {"item": req["item"], "bidder": req["bidder"], "amount": req["amount"], "at": t, "seq": seq}
        tx.put("count", seq)
        tx.put(f"b:{seq}", placed)
        tx.put("max", placed)
        return placed

    return body


def _lead(placed: dict[str, Any]) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        leader = tx.get("leader")
        if leader is None or placed["amount"] > leader["amount"]:
            tx.put("leader", placed)

    return body


def _count(item: str) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.increment(item)

    return body


@workflow("open_item")
def open_item(item: str) -> Idem[None]:
    return atomic(BIDS, item, _open(item), name="open")


@workflow("bid")
def bid(req: BidRequest) -> Generator[Idem[Any], Any, dict[str, Any]]:
    """Place a bid exactly once; refusals abort before anything is written."""
    if req["amount"] < 1:
        yield abort(refusal("invalid", "amount must be positive"))
    t: float = yield now()
    placed = yield atomic(BIDS, req["item"], _place(req, t), name="place")
    yield checkpoint()
    yield atomic(WINNERS, req["item"], _lead(placed), name="lead")
    yield atomic(POPULAR, EVERYONE, _count(req["item"]), name="count")
    return dict(placed)


WORKFLOWS: list[Workflow[Any, Any]] = [open_item, bid]


def open_items(store: Store, items: list[str]) -> None:
    for item in items:
        run(open_item(item), request_id=f"open-{item}", store=store)
