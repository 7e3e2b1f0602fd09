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
nothing; under :func:`idemflow.client.submit` the bidder is answered
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

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
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

from typing import Any

from idemflow import Workflow

# The sample's names, gathered here: each lives in the module named for what it holds.
from samples.auction.closing import CloseRequest, Closing, auto_close, close, timer_id
from samples.auction.tables import BIDS, ITEMS, POPULAR, TABLES, WALLETS, WINNERS, refusal
from samples.auction.trading import EVERYONE, bid, deposit, register
from samples.auction.validation import (
    BidRequest,
    Deposit,
    Invalid,
    NewItem,
    parse_bid,
    parse_deposit,
    parse_item,
)
from samples.auction.verdict import CHECKS, Verdict, check
from samples.auction.views import (
    aitem_view,
    apopular,
    awallet,
    awinner_view,
    item_of,
    item_view,
    popular,
    ranked,
    wallets,
    winner_of,
    winner_view,
)

WORKFLOWS: list[Workflow[Any, Any]] = [deposit, register, bid, close, auto_close]
"""Every workflow of the sample (what ``idemflow worker samples.auction.workflows:WORKFLOWS`` runs)."""


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
