"""The auction's load: sellers, bidders and auctioneers, every request sent 2-4 times.

:func:`run_load` opens wallets, registers ``items`` items whose closing
times are staggered from 1 to 1.5 times ``window`` seconds later (so they
come one after another, and so do the demo's kills aimed at them), then
``users`` concurrent users (threads) place ``bids`` bids spread over 1.15
times the last closing time — a few after their item's closing time, which
must be refused. Auctioneers close items too, and every item is first closed too
early (refused ``still_open``). Then:

- **with timers** (``LoadSettings.timers``: a queue behind the API and
  ``idemflow worker`` processes running the items' closing timers) nobody
  needs to close anything: a client closes every other item (the second,
  the fourth, ...) *at* its closing time, racing its timer; the load waits until every item's timer finished
  (``GET /items/{item}/closing``) and then closes every item once more,
  which must be refused ``already_closed``;
- **without** (``load --store`` without ``--queue``: no workers) the load
  closes every item after its closing time, some twice under different
  request ids (two auctioneers racing).

Bids answered ``202`` (asynchronous: a queue behind the API) are waited for
until the workers led and counted them. It verifies what the clients saw:
copies of a request got the same answer; each item was closed exactly once
— by its timer or by one client, never both — and a close after that was
refused; each sale went to the highest bid the clients saw accepted; the
polled leader is that bid and the popular counts match the accepted bids.
"""

from __future__ import annotations

import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from samples import _harness as harness
from samples._api import Answer

# The clients, the settings and the report are re-exported: callers import the load from here.
from samples.auction.clients import AuctionApi, AuctionDirect, AuctionHttp
from samples.auction.load_answers import _verify
from samples.auction.load_report import PHASES, Closer, LoadReport, LoadSettings


def _owners(settings: LoadSettings) -> tuple[list[str], list[str]]:
    tag = f"load{settings.seed}"
    return [f"{tag}-bidder{n}" for n in range(settings.bidders)], [f"{tag}-seller{n}" for n in range(3)]


def bid_plan(
    settings: LoadSettings, minimums: Mapping[str, int], rng: random.Random
) -> list[tuple[str, str, dict[str, Any]]]:
    """``(request id, item, body)`` in time order; amounts climb like a real auction's, with jitter.

    One in 20 bids is below the minimum price and one in 30 comes from the
    item's seller: both must be refused with their reason.
    """
    bidders, sellers = _owners(settings)
    items = sorted(minimums)
    placed: Counter[str] = Counter()
    plan = []
    for n in range(settings.bids):
        item = rng.choice(items)
        placed[item] += 1
        amount = minimums[item] + 3 * placed[item] + rng.randint(-4, 4)
        bidder = rng.choice(bidders)
        if n % 20 == 9:
            amount = minimums[item] - 1
        elif n % 30 == 17:
            bidder = sellers[items.index(item) % len(sellers)]
        plan.append((f"load{settings.seed}-bid{n}", item, {"bidder": bidder, "amount": max(amount, 1)}))
    return plan


def _at(moment: float, send: Callable[[], Answer]) -> Answer:
    """Send no earlier than ``moment`` (wall clock): paces the bids over the bidding window."""
    time.sleep(max(0.0, moment - time.time()))
    return send()


def run_load(
    api: AuctionApi, settings: LoadSettings, *, aim: Callable[[Mapping[str, float]], None] | None = None
) -> LoadReport:
    """Wallets, items, paced bids and closes — each request with duplicates; verify what the clients saw.

    ``aim`` is told the closing times of the items left to their timers alone, once registered
    (the demo's killer aims at them).
    """
    rng = random.Random(settings.seed)
    report = LoadReport(settings)
    tag, users = f"load{settings.seed}", settings.users
    bidders, sellers = _owners(settings)
    deposits = {owner: rng.choice([50, 150, 400, 2000]) for owner in bidders} | dict.fromkeys(sellers, 0)
    opened = harness.send_all(
        [
            (f"{tag}-open-{o}", functools.partial(api.deposit, f"{tag}-open-{o}", {"owner": o, "amount": a}))
            for o, a in deposits.items()
        ],
        users=users,
        rng=rng,
        label="wallets",
    )
    minimums = {f"{tag}-item{n}": rng.randint(10, 50) for n in range(settings.items)}
    items = {
        item: {
            "id": item,
            "title": f"Lot {n}",
            "seller": sellers[n % len(sellers)],
            "min_price": low,
            "closes_in": settings.closes_in(n),
        }
        for n, (item, low) in enumerate(minimums.items())
    }
    registered = harness.send_all(
        [
            (f"{tag}-list-{item}", functools.partial(api.register, f"{tag}-list-{item}", body))
            for item, body in items.items()
        ],
        users=users,
        rng=rng,
        label="items",
    )
    answers = [*opened.values(), *registered.values()]
    report.problems += [f"setup refused: {got[0]}" for got in answers if got[0].status not in (200, 201)]
    dues = {
        item: float(got[0].body["closes_at"])
        for item in items
        if (got := registered[f"{tag}-list-{item}"])[0].status == 201
    }
    racing = list(dues)[1::2] if settings.timers else []  # closed by a client at the closing time too
    if aim is not None and dues:
        aim({item: due for item, due in dues.items() if item not in racing} or dues)
    plan = bid_plan(settings, minimums, rng)
    sends = {key: functools.partial(api.bid, key, item, body) for key, item, body in plan}
    start, span = time.time(), 1.15 * settings.closes_in(settings.items - 1)
    timed: list[tuple[str, float, Callable[[], Answer]]] = [
        (key, start + span * n / len(plan), sends[key]) for n, (key, _item, _body) in enumerate(plan)
    ]
    closers: list[Closer] = [(f"{tag}-early-{item}", item, "early") for item in items]
    closers += [(f"{tag}-race-{item}", item, "racing") for item in racing]
    timed += [
        (key, start if phase == "early" else dues[item], functools.partial(api.close, key, item))
        for key, item, phase in closers
    ]
    timed.sort(key=lambda request: request[1])
    sent = harness.send_all(
        [(key, functools.partial(_at, moment, send)) for key, moment, send in timed],
        users=users,
        rng=rng,
        label="bids",
    )
    bids = {key: sent[key] for key in sends}
    closes = {key: sent[key] for key, _item, _phase in closers}
    timers: dict[str, Answer] = {}
    if settings.timers:
        timers, unfinished = _timers_finished(api, list(dues), settings.wait)
        report.problems += unfinished
        after = [(f"{tag}-late-{item}", item, "late") for item in items]
    else:
        time.sleep(max(0.0, max(dues.values(), default=0.0) + 0.2 - time.time()))
        after = [(f"{tag}-close-{item}", item, "late") for item in items]
        after += [(f"{tag}-close2-{item}", item, "late") for n, item in enumerate(items) if n % 2 == 0]
    closers += after
    closes |= harness.send_all(
        [(key, functools.partial(api.close, key, item)) for key, item, _phase in after],
        users=users,
        rng=rng,
        label="closes",
    )
    report.sent = sum(map(len, bids.values()))
    report.problems += harness.settle(bids, sends, api.bid_status, done=201, wait=settings.wait, what="bid")
    report.problems += harness.disagreements({**opened, **registered, **bids, **closes})
    report.problems += _verify(api, report, plan, bids, closers, closes, timers)
    return report


def _timers_finished(
    api: AuctionApi, items: Sequence[str], wait: float
) -> tuple[dict[str, Answer], list[str]]:
    """Poll every item's closing timer until it finished: their final answers, and the items whose
    timer did not finish within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    done: dict[str, Answer] = {}
    while len(done) < len(items) and time.monotonic() < deadline:
        for item in items:
            if item not in done and (got := api.closing(item)).status == 200:
                done[item] = got
        if len(done) < len(items):
            time.sleep(0.1)
    return done, [
        f"{item!r}: its closing timer did not finish within {wait:g} s (are workers running?)"
        for item in items
        if item not in done
    ]


__all__ = [
    "PHASES",
    "AuctionApi",
    "AuctionDirect",
    "AuctionHttp",
    "Closer",
    "LoadReport",
    "LoadSettings",
    "bid_plan",
    "run_load",
]
