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
from dataclasses import dataclass, field
from typing import Any, Protocol

from samples import _harness as harness
from samples._api import Answer, Direct
from samples.auction.api import AuctionService


class AuctionApi(Protocol):
    """What the load calls: :class:`AuctionHttp`, or :class:`AuctionDirect` (no HTTP)."""

    def deposit(self, key: str, body: object) -> Answer: ...
    def register(self, key: str, body: object) -> Answer: ...
    def bid(self, key: str, item: str, body: object) -> Answer: ...
    def bid_status(self, request_id: str) -> Answer: ...
    def close(self, key: str, item: str) -> Answer: ...
    def closing(self, item: str) -> Answer: ...
    def winner(self, item: str) -> Answer: ...
    def popular(self, limit: str) -> Answer: ...


class AuctionHttp:
    """:class:`AuctionApi` over HTTP."""

    def __init__(self, client: harness.HttpClient) -> None:
        self.client = client

    def deposit(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/wallets", key=key, body=body)

    def register(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/items", key=key, body=body)

    def bid(self, key: str, item: str, body: object) -> Answer:
        return self.client.request("POST", f"/items/{item}/bids", key=key, body=body)

    def bid_status(self, request_id: str) -> Answer:
        return self.client.request("GET", f"/bids/{request_id}")

    def close(self, key: str, item: str) -> Answer:
        return self.client.request("POST", f"/items/{item}/close", key=key, body={})

    def closing(self, item: str) -> Answer:
        return self.client.request("GET", f"/items/{item}/closing")

    def winner(self, item: str) -> Answer:
        return self.client.request("GET", f"/items/{item}/winner")

    def popular(self, limit: str) -> Answer:
        return self.client.request("GET", "/popular", params={"limit": limit})


class AuctionDirect:
    """:class:`AuctionApi` without HTTP: :class:`~samples.auction.api.AuctionService`'s methods,
    awaited on the event loop of a :class:`~samples._api.Direct`."""

    def __init__(self, call: Direct[AuctionService]) -> None:
        self.call, self.service = call, call.service

    def deposit(self, key: str, body: object) -> Answer:
        return self.call(self.service.deposit, key, body)

    def register(self, key: str, body: object) -> Answer:
        return self.call(self.service.register, key, body)

    def bid(self, key: str, item: str, body: object) -> Answer:
        return self.call(self.service.bid, key, item, body)

    def bid_status(self, request_id: str) -> Answer:
        return self.call(self.service.bid_status, request_id)

    def close(self, key: str, item: str) -> Answer:
        return self.call(self.service.close, key, item)

    def closing(self, item: str) -> Answer:
        return self.call(self.service.closing, item)

    def winner(self, item: str) -> Answer:
        return self.call(self.service.winner, item)

    def popular(self, limit: str) -> Answer:
        return self.call(self.service.popular, limit)


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """Sizes of one load. Ids and amounts derive from ``seed``: re-running a load is one big duplicate."""

    users: int = 8
    bidders: int = 12
    items: int = 5
    bids: int = 200
    window: float = 4.0
    """Seconds from registration to the first closing time (the others follow, up to 1.5 times
    that); bids are spread over 1.15 times the last closing time."""
    seed: int = 0
    wait: float = 60.0
    """Asynchronous variant: how long to wait for the workers to lead and count every bid, and for
    the timers to close every item."""
    timers: bool = True
    """Whether workers run the items' closing timers (a queue behind the API, ``idemflow worker``
    processes): the timers then close the items. False: the load closes them itself."""

    def closes_in(self, n: int) -> float:
        """Seconds from registration to item ``n``'s closing time: staggered from 1 to 1.5 windows.

        >>> [LoadSettings(items=3, window=10).closes_in(n) for n in range(3)]
        [10.0, 12.5, 15.0]
        """
        return self.window * (1 + 0.5 * n / max(self.items - 1, 1))


PHASES = ("early", "racing", "late")
"""When the load's auctioneers close an item: before its closing time, at it (racing the timer),
after it (after the timer finished, with timers)."""


@dataclass
class LoadReport(harness.LoadReport[LoadSettings]):
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    bids: Counter[str] = field(default_factory=Counter)
    closes: dict[str, Counter[str]] = field(default_factory=dict)
    """The auctioneers' closes by :data:`PHASES`: how many got each answer."""
    timers: Counter[str] = field(default_factory=Counter)
    """How the items' timers ended: ``sold``, ``unsold``, ... or ``already_closed`` (a client first)."""
    kills: list[str] = field(default_factory=list)
    """What the demo's killer did, for the report."""

    def lines(self) -> list[str]:
        s = self.settings
        refused = ", ".join(f"{n} {code}" for code, n in sorted(self.bids.items()) if code != "accepted")
        when = {"early": "before closing time", "racing": "at it, racing the timer"}
        when["late"] = "after the timer" if s.timers else "after closing time"
        closes = "; ".join(
            f"{when[phase]}: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(got.items()))
            for phase, got in sorted(self.closes.items(), key=lambda pair: PHASES.index(pair[0]))
        )
        closed = {outcome: n for outcome, n in self.timers.items() if outcome != "already_closed"}
        timers = f"{sum(closed.values())} closed their item: " + ", ".join(
            f"{n} {outcome}" for outcome, n in sorted(closed.items())
        )
        timers += f"; {self.timers['already_closed']} refused already_closed (a client's close came first)"
        return [
            f"  load      {s.bids} bids by {s.bidders} bidders on {s.items} items, sent {self.sent} times "
            f"by {s.users} users ({self.sent - s.bids} duplicates)",
            f"  bids      {self.bids['accepted']} accepted, refused: {refused or 'none'}",
            f"  closes    {closes}",
            *([f"  timers    {timers}"] if s.timers else []),
            f"  [{'FAIL' if self.problems else ' ok '}] answers: every copy of a request got the same "
            "answer; each item closed once, by its timer or one client, selling to the highest accepted bid",
        ]


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


Closer = tuple[str, str, str]
"""An auctioneer's close: ``(request id, item, phase)`` (one of :data:`PHASES`)."""


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


def _close_outcome(answer: Answer) -> str:
    """How a close was answered: ``sold``, ``unsold``, ``unsold (payment failed)`` or the refusal."""
    if answer.status == 200:
        failed = "payment" in str(answer.body.get("reason", ""))
        return str(answer.body["status"]) + (" (payment failed)" if failed else "")
    return str(answer.body.get("error"))


def _timer_outcome(body: Mapping[str, Any]) -> str:
    """How an item's timer ended (``GET /items/{item}/closing``), in :func:`_close_outcome`'s words."""
    if body.get("status") == "completed":
        return str(body["result"]["status"])
    reason = body.get("reason")
    code = reason.get("code") if isinstance(reason, dict) else None
    return "unsold (payment failed)" if code == "payment_failed" else str(code or body.get("status"))


def _verify(
    api: AuctionApi,
    report: LoadReport,
    plan: Sequence[tuple[str, str, dict[str, Any]]],
    bids: Mapping[str, list[Answer]],
    closers: Sequence[Closer],
    closes: Mapping[str, list[Answer]],
    timers: Mapping[str, Answer],
) -> list[str]:
    """The clients' view against the server's: closes, sales, leaders and popular counts."""
    problems: list[str] = []
    best: dict[str, dict[str, Any]] = {}
    accepted: Counter[str] = Counter()
    for key, item, _body in plan:
        first = bids[key][0]
        if first.status == 201:
            report.bids["accepted"] += 1
            accepted[item] += 1
            if item not in best or first.body["amount"] > best[item]["amount"]:
                best[item] = first.body
        else:
            report.bids[str(first.body.get("error"))] += 1
    won: dict[str, list[tuple[str, Answer]]] = {}  # who closed each item, and what they were told
    for key, item, phase in closers:
        first = closes[key][0]
        report.closes.setdefault(phase, Counter())[_close_outcome(first)] += 1
        if first.status == 200:
            won.setdefault(item, []).append((key, first))
        elif phase == "late" and timers and first.body.get("error") != "already_closed":
            problems.append(f"{item!r}: a close after its timer finished was answered {first}")
    for item, got in timers.items():
        outcome = _timer_outcome(got.body)
        report.timers[outcome] += 1
        if outcome != "already_closed":
            won.setdefault(item, []).append(("its timer", Answer(200, got.body.get("result") or {})))
    counted = {row["item"]: row["bids"] for row in api.popular("100").body.get("items", [])}
    for item in sorted({item for _key, item, _phase in closers}):
        top, polled = best.get(item), api.winner(item).body
        sale, closed = polled.get("result") or {}, won.get(item, [])
        if len(closed) != 1:
            problems.append(f"{item!r}: closed by {[who for who, _answer in closed]}, not exactly once")
        elif closed[0][1].body.get("status", sale.get("status")) != sale.get("status"):
            problems.append(f"{item!r}: {closed[0][0]} was told {closed[0][1]}, but the result is {sale}")
        elif sale.get("status") == "sold" and (
            top is None or (sale["winner"], sale["amount"]) != (top["bidder"], top["amount"])
        ):
            problems.append(f"{item!r}: sold as {sale}, but the highest accepted bid was {top}")
        elif sale.get("status") == "unsold" and (top is None) != (sale.get("reason") == "no bids"):
            problems.append(f"{item!r}: unsold ({sale.get('reason')}), the highest accepted bid was {top}")
        elif sale.get("status") not in ("sold", "unsold"):
            problems.append(f"{item!r}: closed, but the published result is {sale}")
        if polled.get("leader") != top:
            problems.append(f"{item!r}: the polled leader is not the highest accepted bid {top}")
        if counted.get(item, 0) != accepted[item]:
            problems.append(
                f"{item!r}: {accepted[item]} bids accepted, popular counts {counted.get(item, 0)}"
            )
    return problems


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
