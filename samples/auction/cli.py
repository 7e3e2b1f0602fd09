"""``python -m samples.auction serve|load|check|demo``: run the API, throw bidders at it, verify.

    python -m samples.auction serve --store sqlite:auction.db [--port 8000]
    python -m samples.auction load  --url http://127.0.0.1:8000      (or --store URL: direct calls)
    python -m samples.auction check --store sqlite:auction.db
    python -m samples.auction demo                    # all of it, with SIGKILLed API servers

``load`` opens wallets, registers items closing ``--window`` seconds later,
then ``--users`` concurrent users (threads) place ``--bids`` bids spread over
the window — a few after it, which must be refused — and finally close
every item, some twice under different request ids (two auctioneers
racing). Every request is sent 2-4 times under the same request id. It
verifies what the clients saw: copies of a request got the same answer,
exactly one close per item succeeded, each sale went to the highest bid
the clients saw accepted, and the popular counts match the accepted bids.
``check`` verifies the tables alone and exits 1 on any violation.

The load tooling (progress bar, retrying HTTP client, process fleet and
killer) is the survey sample's.
"""

from __future__ import annotations

import argparse
import functools
import random
import secrets
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from idemflow import IdemflowError, Store, open_store
from samples.auction import workflows
from samples.auction.api import AuctionService, create_app
from samples.survey.api import Answer, serve
from samples.survey.cli import Fleet, HttpClient, Killer, disagreements, send_all
from samples.transfer.demo import reset


class AuctionApi(Protocol):
    """What the load calls: :class:`~samples.auction.api.AuctionService` directly, or :class:`AuctionHttp`."""

    def deposit(self, key: str | None, body: object) -> Answer: ...
    def register(self, key: str | None, body: object) -> Answer: ...
    def bid(self, key: str | None, item: str, body: object) -> Answer: ...
    def close(self, key: str | None, item: str) -> Answer: ...
    def winner(self, item: str) -> Answer: ...
    def popular(self, limit: str) -> Answer: ...


class AuctionHttp:
    """:class:`AuctionApi` over HTTP."""

    def __init__(self, client: HttpClient) -> None:
        self.client = client

    def deposit(self, key: str | None, body: object) -> Answer:
        return self.client.request("POST", "/wallets", key=key, body=body)

    def register(self, key: str | None, body: object) -> Answer:
        return self.client.request("POST", "/items", key=key, body=body)

    def bid(self, key: str | None, item: str, body: object) -> Answer:
        return self.client.request("POST", f"/items/{item}/bids", key=key, body=body)

    def close(self, key: str | None, item: str) -> Answer:
        return self.client.request("POST", f"/items/{item}/close", key=key, body={})

    def winner(self, item: str) -> Answer:
        return self.client.request("GET", f"/items/{item}/winner")

    def popular(self, limit: str) -> Answer:
        return self.client.request("GET", "/popular", params={"limit": limit})


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


@dataclass
class LoadReport:
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    settings: LoadSettings
    sent: int = 0
    bids: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

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


def _at(moment: float, send: functools.partial[Answer]) -> Answer:
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
    opened = send_all(
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
    registered = send_all(
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
    start, span = time.time(), 1.15 * settings.window
    bids = send_all(
        [
            (
                key,
                functools.partial(
                    _at, start + span * n / len(plan), functools.partial(api.bid, key, item, body)
                ),
            )
            for n, (key, item, body) in enumerate(plan)
        ],
        users=users,
        rng=rng,
        label="bids",
    )
    time.sleep(max(0.0, closes_at + 0.2 - time.time()))
    closers = [(f"{tag}-close-{item}", item) for item in items]
    closers += [(f"{tag}-close2-{item}", item) for n, item in enumerate(items) if n % 2 == 0]
    closes = send_all(
        [(key, functools.partial(api.close, key, item)) for key, item in closers],
        users=users,
        rng=rng,
        label="closes",
    )
    report.sent = sum(map(len, bids.values()))
    report.problems += disagreements({**opened, **registered, **bids, **closes})
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


# -- the demo: load through API servers that get SIGKILLed -------------------------------------


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """One demo run; without a ``store`` URL it uses a fresh SQLite file in ``data``."""

    data: Path = Path("demo-data")
    store: str | None = None
    servers: int = 2
    kills: int = 6
    load: LoadSettings = LoadSettings()


@dataclass(frozen=True, slots=True)
class DemoReport:
    settings: DemoSettings
    store: str
    load: LoadReport
    verdict: workflows.Verdict
    kills: int
    retries: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.load.problems

    def render(self) -> str:
        s = self.settings
        lines = [
            f"idemflow auction demo: {self.store}, seed {s.load.seed}",
            f"  setup     {s.servers} API servers on one store; bidding open {s.load.window:.0f} s",
            *self.load.lines()[:3],
            f"  crashes   {self.kills} SIGKILLs of API servers mid-request, each restarted; clients retried "
            f"{self.retries} times",
            *self.load.lines()[3:],
            *self.verdict.lines(),
            *(f"  - {problem}" for problem in self.load.problems[:10]),
        ]
        verdict = "PASS" if self.ok else "FAIL"
        tail = "every bid counted once, every winner charged once" if self.ok else "see the problems above"
        return "\n".join([*lines, f"{verdict} in {self.seconds:.1f} s: {tail}"])


def run_demo(settings: DemoSettings) -> DemoReport:
    """API servers on one store, SIGKILLed during a load; then ``check``."""
    started = time.monotonic()
    store_url = settings.store
    if store_url is None:
        reset(settings.data / "auction.sqlite3")
        store_url = f"sqlite:{settings.data / 'auction.sqlite3'}"
    store = _open(store_url)
    fleet = Fleet()
    try:
        urls = [
            fleet.server(["-m", "samples.auction", "serve", "--store", store_url])
            for _ in range(settings.servers)
        ]
        client = HttpClient(urls)
        load = settings.load
        total = 2 * (load.bidders + load.items) + 3 * load.bids
        with Killer(fleet, settings.kills, total, random.Random(load.seed)).watching(lambda: client.sent):
            report = run_load(AuctionHttp(client), load)
    finally:
        fleet.stop()
    try:
        verdict = workflows.check(store)
    finally:
        store.close()
    shown = store_url if settings.store is None else store_url.split(":", 1)[0] + " store"
    kills = sum(fleet.kills.values())
    return DemoReport(settings, shown, report, verdict, kills, client.retries, time.monotonic() - started)


# -- commands -----------------------------------------------------------------------------------


def _open(url: str) -> Store:
    store = open_store(url)
    store.create_tables(*workflows.TABLES)
    return store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m samples.auction", description="The auction sample.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_ = commands.add_parser("serve", help="run the HTTP API")
    serve_.add_argument("--store", required=True, help="store URL, e.g. sqlite:auction.db")
    serve_.add_argument("--host", default="127.0.0.1")
    serve_.add_argument("--port", type=int, default=8000)
    load = commands.add_parser("load", help="simulate concurrent bidders, with duplicate retries")
    load.add_argument("--url", action="append", default=[], help="API server URL (repeatable)")
    load.add_argument("--store", help="store URL: call the workflows directly instead of an API")
    load.add_argument("--users", type=int, default=8, help="concurrent users (default 8)")
    load.add_argument("--bidders", type=int, default=12, help="bidders with wallets (default 12)")
    load.add_argument("--items", type=int, default=5, help="items (default 5)")
    load.add_argument("--bids", type=int, default=200, help="distinct bids (default 200)")
    load.add_argument("--window", type=float, default=4.0, help="seconds of bidding (default 4)")
    load.add_argument("--seed", type=int, default=0, help="the same seed sends the same requests again")
    check_ = commands.add_parser("check", help="verify bids, sales and money; exit 1 on a violation")
    check_.add_argument("--store", required=True)
    demo = commands.add_parser("demo", help="load with SIGKILLed API servers, then check (SQLite)")
    demo.add_argument("--data", type=Path, default=Path("demo-data"), help="directory of the SQLite file")
    demo.add_argument("--bids", type=int, default=200, help="distinct bids (default 200)")
    demo.add_argument("--kills", type=int, default=6, help="API servers to SIGKILL (default 6)")
    demo.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is 0 when everything checked out, 1 if not, 2 on an error."""
    args = _parser().parse_args(argv)
    try:
        return _command(args)
    except (IdemflowError, httpx.TransportError) as exc:  # a bad URL, an unreachable server or store
        print(f"python -m samples.auction: error: {exc}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace) -> int:
    if args.command == "serve":
        serve(create_app(AuctionService(_open(args.store))), args.host, args.port)
        return 0
    if args.command == "check":
        verdict = workflows.check(_open(args.store))
        print("\n".join(["idemflow auction check", *verdict.lines(), "PASS" if verdict.ok else "FAIL"]))
        return 0 if verdict.ok else 1
    if args.command == "load":
        settings = LoadSettings(args.users, args.bidders, args.items, args.bids, args.window, args.seed)
        api: AuctionApi
        if args.url:
            api = AuctionHttp(HttpClient(args.url))
        elif args.store:
            api = AuctionService(_open(args.store))
        else:
            print("load needs --url (an API server) or --store (direct calls)", file=sys.stderr)
            return 2
        report = run_load(api, settings)
        print(
            "\n".join(["idemflow auction load", *report.lines(), *(f"  - {p}" for p in report.problems[:20])])
        )
        return 0 if not report.problems else 1
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    load = LoadSettings(bids=args.bids, seed=seed)
    print(f"auction demo: {args.bids} bids with duplicates, {args.kills} SIGKILLs ...", flush=True)
    result = run_demo(DemoSettings(data=args.data, kills=args.kills, load=load))
    print(result.render())
    return 0 if result.ok else 1


__all__ = [
    "AuctionApi",
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
