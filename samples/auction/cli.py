"""``python -m samples.auction serve|load|check|demo``: run the API, throw bidders at it, verify.

    python -m samples.auction serve --store sqlite:auction.db [--queue sqlite:queue.db] [--port 8000]
    python -m samples.auction load  --url http://127.0.0.1:8000      (or --store URL [--queue URL])
    python -m samples.auction check --store sqlite:auction.db [--late 33]
    python -m samples.auction demo                    # all of it, with SIGKILLed processes

``load`` (:mod:`samples.auction.load`) opens wallets, registers items,
places bids from concurrent users and lets the items' closing timers close
them (``--url`` or ``--queue``: workers are expected to run them; with
``--store`` alone the load closes the items itself), every request sent 2-4
times; it verifies what the clients saw. ``check`` verifies the tables
alone — an item closed more than ``--late`` seconds after its closing time,
or still open that long after it, is a violation — and exits 1 on any.

``demo`` runs API servers and ``idemflow worker`` processes on one SQLite
store and queue under the load and SIGKILLs them: API servers while the
bids come in, workers around the items' closing times
(:class:`ClosingKiller`), when they may hold a timer's continuation. Its
report lists every item's closing time against its close and the lateness
(p50, p99, max), then ``check``, with a tolerance computed from the demo's
queue and kills (:meth:`DemoSettings.tolerance`).

The machinery (retrying HTTP client, duplicate sends, process fleet, the
command line) is :mod:`samples._harness`, shared with the survey and
transfer samples.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from idemflow.stores import Store
from samples import _harness as harness
from samples.auction import closing, workflows
from samples.auction.api import AuctionService, create_app
from samples.auction.load import (
    AuctionApi,
    AuctionDirect,
    AuctionHttp,
    LoadReport,
    LoadSettings,
    bid_plan,
    run_load,
)

# -- the demo: load through API servers and workers that get SIGKILLed -----------------------------


WORKER = (
    "-m",
    "idemflow.cli",
    "worker",
    "samples.auction.workflows:WORKFLOWS",
    "--concurrency",
    "2",
    "--relay-every",
    "1",
)
"""The demo's worker: a relay pass every second sends a timer whose API died before sending it
(the API sends it itself otherwise) long before its item closes, seconds later."""


def visibility_timeout(queue: str) -> float:
    """The visibility timeout a queue URL sets (its ``visibility_timeout``), else the queues' 30 s.

    >>> visibility_timeout("sqlite:q.sqlite3?visibility_timeout=2"), visibility_timeout("sqs:jobs")
    (2.0, 30.0)
    """
    given = parse_qs(urlsplit(queue).query).get("visibility_timeout")
    return float(given[0]) if given else 30.0


def worker_kills(kills: int) -> int:
    """How many of ``kills`` SIGKILLs :class:`ClosingKiller` aims at workers (the others at servers)."""
    return (kills + 1) // 2


@dataclass(frozen=True, slots=True)
class DemoSettings(harness.FleetSettings):
    """One auction demo: the processes (:class:`~samples._harness.FleetSettings`) and the load."""

    worker: tuple[str, ...] = WORKER
    load: LoadSettings = field(default_factory=LoadSettings)
    slack: float = closing.SLACK
    """Seconds a close may take beyond its timer and the deaths (:data:`closing.SLACK` on a
    machine of its own; the test suite, 4 workers and their servers on 2 cores, gives more:
    on time is a liveness figure, measured where it is not starved of CPU)."""

    def tolerance(self) -> tuple[float, str]:
        """How late this demo may close an item (:func:`~samples.auction.closing.tolerance`), and why.

        Every worker the killer SIGKILLs may be holding a timer's continuation: it comes back
        after the queue's visibility timeout. One death more is allowed for a worker exiting on
        its own (the chaos suite's workers do, right after a commit).

        >>> DemoSettings(kills=6).tolerance()[0]
        12.5
        """
        seconds = harness.DEMO_VISIBILITY_TIMEOUT if self.queue is None else visibility_timeout(self.queue)
        deaths = worker_kills(self.kills) + 1
        poll = closing.POLL
        why = (
            f"{closing.DELAY_RESOLUTION:g} s delay resolution + {poll:g} s poll + {self.slack:g} s slack "
            f"+ {deaths} worker deaths x ({seconds:g} s visibility timeout + {poll:g} s poll)"
        )
        return closing.tolerance(seconds, deaths, self.slack), why


class ClosingKiller:
    """SIGKILLs API servers while the bids come in and workers around the items' closing times.

    :meth:`aim` (the load calls it once the items are registered, with the
    closing times of the items no client races) draws the moments: half the
    kills (rounded down) on servers, at random between then and the first
    closing time; the others on workers, each within ``spread`` seconds of
    an item's closing time, the items taken in turn. A
    worker killed then may hold a timer's continuation (it comes back after
    the queue's visibility timeout) or be down when one falls due (the other
    worker, or this one restarted, runs it). Meanwhile it restarts the
    processes that exited on their own, as a supervisor would.
    """

    def __init__(self, kills: int, rng: random.Random, spread: float = 0.25) -> None:
        self.kills, self.rng, self.spread = kills, rng, spread
        self.done: list[str] = []
        """What was killed when, for the report."""
        self._aims: list[tuple[float, str, str | None, float]] = []  # moment, kind, item, its due
        self._lock = threading.Lock()

    def aim(self, dues: Mapping[str, float]) -> None:
        """Draw the moments of the kills from the items' closing times (epoch seconds)."""
        start, items = time.time(), sorted(dues, key=lambda item: dues[item])
        workers = worker_kills(self.kills)
        aims: list[tuple[float, str, str | None, float]] = [
            (self.rng.uniform(start, dues[items[0]]), "server", None, 0.0)
            for _ in range(self.kills - workers)
        ]
        for n in range(workers):
            item = items[n * len(items) // workers]
            due = dues[item]
            aims.append((due + self.rng.uniform(-self.spread, self.spread), "worker", item, due))
        with self._lock:
            self._aims = sorted(aims)

    @contextlib.contextmanager
    def watching(self, fleet: harness.Fleet) -> Iterator[None]:
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(fleet, stop), name="killer", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _run(self, fleet: harness.Fleet, stop: threading.Event) -> None:
        while not stop.wait(0.005):
            fleet.revive()
            with self._lock:
                aim = self._aims.pop(0) if self._aims and time.time() >= self._aims[0][0] else None
            if aim is None:
                continue
            _moment, kind, item, closes_at = aim
            fleet.kill(self.rng.choice([child for child in fleet.children if child.kind == kind]))
            at = time.time()
            aimed = (
                "while bids come in"
                if item is None
                else f"{at - closes_at:+.3f} s from {item}'s closing time"
            )
            self.done.append(f"  kill      {kind} at {closing.stamp(at)}, {aimed}")


def closing_lines(verdict: workflows.Verdict, late: float, why: str) -> list[str]:
    """Every item's closing time against its close, then the lateness and the tolerance."""
    lines = [f"  closing   {'item':<18} {'due (UTC)':<13} {'closed':<13} {'late':>9}  by     outcome"]
    for shut in verdict.closings:
        closed, lateness = (
            ("open", "") if shut.at is None else (closing.stamp(shut.at), f"{shut.late:+.3f} s")
        )
        lines.append(
            f"            {shut.item:<18} {closing.stamp(shut.due):<13} {closed:<13} {lateness:>9}  "
            f"{shut.by or '-':<6} {shut.outcome or ''}".rstrip()
        )
    found = closing.Lateness.of(verdict.closings)
    if found is not None:
        lines.append(f"  lateness  {found.line()} over {found.closed} items (closed - due)")
    lines.append(f"  tolerance {late:g} s = {why}")
    return lines


class DemoReport(harness.DemoReport[DemoSettings, LoadReport, workflows.Verdict]):
    def render(self) -> str:
        s = self.settings
        late, why = s.tolerance()
        return self.text(
            f"idemflow auction demo: {self.store}, seed {s.load.seed}",
            f"{s.servers} API servers (bids answered at the checkpoint, timers queued at registration) and "
            f"{s.workers} `idemflow worker` processes leading and counting the bids and closing each item "
            f"at its closing time, {s.load.closes_in(0):g}-{s.load.closes_in(s.load.items - 1):g} s after "
            "it was listed",
            4 if s.load.timers else 3,
            "every bid counted once, every item closed once and on time, every winner charged once",
            extra=[*self.load.kills, *closing_lines(self.verdict, late, why)],
        )


def run_demo(settings: DemoSettings) -> DemoReport:
    """Servers and workers on one store and queue, SIGKILLed during a load (workers around the
    closing times); then ``check``, judging the closes' lateness by :meth:`DemoSettings.tolerance`."""
    load = settings.load
    killer = ClosingKiller(settings.kills, random.Random(load.seed))
    late, _why = settings.tolerance()

    def check(store: Store) -> workflows.Verdict:
        return workflows.check(store, late=late, now=time.time())

    found = harness.run_demo(
        settings,
        "auction",
        workflows.TABLES,
        check,
        total=2 * (load.bidders + load.items) + 3 * load.bids,
        seed=load.seed,
        load=lambda client: run_load(AuctionHttp(client), load, aim=killer.aim),
        kills=killer.watching,
    )
    found[1].kills[:] = killer.done
    return DemoReport(settings, *found)


# -- commands -----------------------------------------------------------------------------------


def _open(url: str) -> Store:
    return harness.open_with(url, workflows.TABLES)


def _load(args: argparse.Namespace, api: AuctionApi) -> LoadReport:
    sizes = (args.users, args.bidders, args.items, args.bids, args.window, args.seed, args.wait)
    # An API server (--url) or a queue: workers are expected to run the closing timers.
    return run_load(api, LoadSettings(*sizes, timers=bool(args.url) or args.queue is not None))


def _check(store: Store, late: float = closing.ON_TIME) -> workflows.Verdict:
    """``check``: the tables now, an item closed (or still open) ``late`` seconds after its closing
    time a violation."""
    return workflows.check(store, late=late, now=time.time())


def _demo(args: argparse.Namespace) -> int:
    load = LoadSettings(bids=args.bids, seed=harness.demo_seed(args))
    print(f"auction demo: {args.bids} bids with duplicates, {args.kills} SIGKILLs ...", flush=True)
    settings = DemoSettings(
        data=args.data, kills=args.kills, workers=args.workers, load=load, slack=args.slack
    )
    result = run_demo(settings)
    print(result.render())
    return 0 if result.ok else 1


SAMPLE = harness.Sample[AuctionApi](
    "auction",
    workflows.TABLES,
    app=lambda store, queue: create_app(AuctionService(store, queue)),
    service=AuctionService,
    check=_check,
    http=AuctionHttp,
    direct=AuctionDirect,
    load=_load,
    demo=_demo,
    help={
        "queue": "queue URL: answer bids at the checkpoint, workers lead and count (async variant)",
        "load": "simulate concurrent bidders, with duplicate retries",
        "check": "verify bids, sales, money and closes on time; exit 1 on a violation",
        "demo": "load with SIGKILLed servers and workers, then check (SQLite)",
    },
    load_sizes=[
        ("--bidders", int, 12, "bidders with wallets"),
        ("--items", int, 5, "items"),
        ("--bids", int, 200, "distinct bids"),
        ("--window", float, 4.0, "seconds from listing to the first closing time"),
    ],
    demo_sizes=[
        ("--bids", int, 200, "distinct bids"),
        ("--slack", float, closing.SLACK, "seconds a close may take beyond its timer and the deaths"),
    ],
    check_options=[
        ("--late", float, closing.ON_TIME, "seconds after its closing time an item must be closed by"),
    ],
)
main = SAMPLE.main


__all__ = [
    "WORKER",
    "AuctionApi",
    "AuctionDirect",
    "AuctionHttp",
    "ClosingKiller",
    "DemoReport",
    "DemoSettings",
    "LoadReport",
    "LoadSettings",
    "bid_plan",
    "closing_lines",
    "main",
    "run_demo",
    "run_load",
    "visibility_timeout",
    "worker_kills",
]
