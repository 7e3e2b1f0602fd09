"""``python -m samples.auction serve|load|check|demo``: run the API, throw bidders at it, verify.

    python -m samples.auction serve --store sqlite:auction.db [--queue sqlite:queue.db] [--port 8000]
    python -m samples.auction load  --url http://127.0.0.1:8000      (or --store URL [--queue URL])
    python -m samples.auction check --store sqlite:auction.db
    python -m samples.auction demo                    # all of it, with SIGKILLed processes

``load`` opens wallets, registers items closing ``--window`` seconds later,
then ``--users`` concurrent users (threads) place ``--bids`` bids spread over
the window — a few after it, which must be refused — and finally close
every item, some twice under different request ids (two auctioneers
racing). Every request is sent 2-4 times under the same request id. Bids
answered ``202`` (asynchronous: a queue behind the API) are waited for
until the workers led and counted them. It verifies what the clients saw:
copies of a request got the same answer, exactly one close per item
succeeded, each sale went to the highest bid the clients saw accepted, the
polled leader is that bid and the popular counts match the accepted bids.
``check`` verifies the tables alone and exits 1 on any violation.

The machinery (retrying HTTP client, duplicate sends, process fleet and
killer, the command line) is :mod:`samples._harness`, shared with the
survey and transfer samples.
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from idemflow import Store
from samples import _harness as harness
from samples._api import Answer, Direct
from samples.auction import workflows
from samples.auction.api import AuctionService, create_app


class AuctionApi(Protocol):
    """What the load calls: :class:`AuctionHttp`, or :class:`AuctionDirect` (no HTTP)."""

    def deposit(self, key: str, body: object) -> Answer: ...
    def register(self, key: str, body: object) -> Answer: ...
    def bid(self, key: str, item: str, body: object) -> Answer: ...
    def bid_status(self, request_id: str) -> Answer: ...
    def close(self, key: str, item: str) -> Answer: ...
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
    """Seconds from registration to closing time; bids are spread over 1.15 times that."""
    seed: int = 0
    wait: float = 60.0
    """Asynchronous variant: how long to wait for the workers to lead and count every bid."""


@dataclass
class LoadReport(harness.LoadReport[LoadSettings]):
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    bids: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        s = self.settings
        refused = ", ".join(f"{n} {code}" for code, n in sorted(self.bids.items()) if code != "accepted")
        closes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.closes.items()))
        return [
            f"  load      {s.bids} bids by {s.bidders} bidders on {s.items} items, sent {self.sent} times "
            f"by {s.users} users ({self.sent - s.bids} duplicates)",
            f"  bids      {self.bids['accepted']} accepted, refused: {refused or 'none'}",
            f"  closes    {closes}",
            f"  [{'FAIL' if self.problems else ' ok '}] answers: every copy of a request got the same "
            "answer; one close per item won, selling to the highest accepted bid",
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


def run_load(api: AuctionApi, settings: LoadSettings) -> LoadReport:
    """Wallets, items, paced bids, closes — each request with duplicates; verify what the clients saw."""
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
            "closes_in": settings.window,
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
    closes_at = max((got[0].body.get("closes_at", 0.0) for got in registered.values()), default=0.0)
    plan = bid_plan(settings, minimums, rng)
    sends = {key: functools.partial(api.bid, key, item, body) for key, item, body in plan}
    start, span = time.time(), 1.15 * settings.window
    bids = harness.send_all(
        [
            (key, functools.partial(_at, start + span * n / len(plan), sends[key]))
            for n, (key, _item, _body) in enumerate(plan)
        ],
        users=users,
        rng=rng,
        label="bids",
    )
    time.sleep(max(0.0, closes_at + 0.2 - time.time()))
    closers = [(f"{tag}-close-{item}", item) for item in items]
    closers += [(f"{tag}-close2-{item}", item) for n, item in enumerate(items) if n % 2 == 0]
    closes = harness.send_all(
        [(key, functools.partial(api.close, key, item)) for key, item in closers],
        users=users,
        rng=rng,
        label="closes",
    )
    report.sent = sum(map(len, bids.values()))
    report.problems += harness.settle(bids, sends, api.bid_status, done=201, wait=settings.wait, what="bid")
    report.problems += harness.disagreements({**opened, **registered, **bids, **closes})
    report.problems += _verify(api, report, plan, bids, closers, closes)
    return report


def _verify(
    api: AuctionApi,
    report: LoadReport,
    plan: Sequence[tuple[str, str, dict[str, Any]]],
    bids: Mapping[str, list[Answer]],
    closers: Sequence[tuple[str, str]],
    closes: Mapping[str, list[Answer]],
) -> list[str]:
    """The clients' view against the server's: sales, leaders and popular counts."""
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
    won: dict[str, list[dict[str, Any]]] = {}
    for key, item in closers:
        first = closes[key][0]
        if first.status == 200:
            won.setdefault(item, []).append(first.body)
            reason = str(first.body.get("reason", ""))
            report.closes[first.body["status"] + (" (payment failed)" if "payment" in reason else "")] += 1
        else:
            report.closes[str(first.body.get("error"))] += 1
    counted = {row["item"]: row["bids"] for row in api.popular("100").body.get("items", [])}
    for item in sorted({item for _key, item in closers}):
        top, sales = best.get(item), won.get(item, [])
        if len(sales) != 1:
            problems.append(f"{item!r}: {len(sales)} closes succeeded, not one")
        elif sales[0]["status"] == "sold" and (
            top is None or (sales[0]["winner"], sales[0]["amount"]) != (top["bidder"], top["amount"])
        ):
            problems.append(f"{item!r}: sold as {sales[0]}, but the highest accepted bid was {top}")
        elif sales[0]["status"] == "unsold" and (top is None) != (sales[0].get("reason") == "no bids"):
            problems.append(
                f"{item!r}: unsold ({sales[0].get('reason')}), the highest accepted bid was {top}"
            )
        if api.winner(item).body.get("leader") != top:
            problems.append(f"{item!r}: the polled leader is not the highest accepted bid {top}")
        if counted.get(item, 0) != accepted[item]:
            problems.append(
                f"{item!r}: {accepted[item]} bids accepted, popular counts {counted.get(item, 0)}"
            )
    return problems


# -- the demo: load through API servers and workers that get SIGKILLed -----------------------------


@dataclass(frozen=True, slots=True)
class DemoSettings(harness.FleetSettings):
    """One auction demo: the processes (:class:`~samples._harness.FleetSettings`) and the load."""

    load: LoadSettings = LoadSettings()


class DemoReport(harness.DemoReport[DemoSettings, LoadReport, workflows.Verdict]):
    def render(self) -> str:
        s = self.settings
        return self.text(
            f"idemflow auction demo: {self.store}, seed {s.load.seed}",
            f"{s.servers} API servers (bids answered at the checkpoint) and {s.workers} `idemflow worker` "
            f"processes leading and counting them; bidding open {s.load.window:g} s",
            3,
            "every bid counted once, every winner charged once",
        )


def run_demo(settings: DemoSettings) -> DemoReport:
    """Servers and workers on one store and queue, SIGKILLed during a load; then ``check``."""
    load = settings.load
    found = harness.run_demo(
        settings,
        "auction",
        workflows.TABLES,
        workflows.check,
        total=2 * (load.bidders + load.items) + 3 * load.bids,
        seed=load.seed,
        load=lambda client: run_load(AuctionHttp(client), load),
    )
    return DemoReport(settings, *found)


# -- commands -----------------------------------------------------------------------------------


def _open(url: str) -> Store:
    return harness.open_with(url, workflows.TABLES)


def _load(args: argparse.Namespace, api: AuctionApi) -> LoadReport:
    sizes = (args.users, args.bidders, args.items, args.bids, args.window, args.seed, args.wait)
    return run_load(api, LoadSettings(*sizes))


def _demo(args: argparse.Namespace) -> int:
    load = LoadSettings(bids=args.bids, seed=harness.demo_seed(args))
    print(f"auction demo: {args.bids} bids with duplicates, {args.kills} SIGKILLs ...", flush=True)
    result = run_demo(DemoSettings(data=args.data, kills=args.kills, workers=args.workers, load=load))
    print(result.render())
    return 0 if result.ok else 1


SAMPLE = harness.Sample[AuctionApi](
    "auction",
    workflows.TABLES,
    app=lambda store, queue: create_app(AuctionService(store, queue)),
    service=AuctionService,
    check=workflows.check,
    http=AuctionHttp,
    direct=AuctionDirect,
    load=_load,
    demo=_demo,
    help={
        "queue": "queue URL: answer bids at the checkpoint, workers lead and count (async variant)",
        "load": "simulate concurrent bidders, with duplicate retries",
        "check": "verify bids, sales and money; exit 1 on a violation",
        "demo": "load with SIGKILLed servers and workers, then check (SQLite)",
    },
    load_sizes=[
        ("--bidders", int, 12, "bidders with wallets"),
        ("--items", int, 5, "items"),
        ("--bids", int, 200, "distinct bids"),
        ("--window", float, 4.0, "seconds of bidding"),
    ],
    demo_sizes=[("--bids", int, 200, "distinct bids")],
)
main = SAMPLE.main


__all__ = [
    "AuctionApi",
    "AuctionDirect",
    "AuctionHttp",
    "DemoReport",
    "DemoSettings",
    "LoadReport",
    "LoadSettings",
    "bid_plan",
    "main",
    "run_demo",
    "run_load",
]
