"""The auction sample (samples/auction): workflows under a test clock, the closing timers under a
worker on a test clock, the HTTP API over a real socket, the CLI, and the load + SIGKILL + check
cycle on SQLite and on Azure Tables (Azurite)."""

from __future__ import annotations

import doctest
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemflow import Tx, WorkflowAborted, atomic, run, run_result
from idemflow.client import RunStatus, status, submit
from idemflow.stores import Store
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash, data_rows
from idemflow.testing.servers import Azurite, Moto
from idemflow.worker import MemoryQueue, Queue, SqliteQueue, Worker, open_queue
from samples.auction import api as auction_api
from samples.auction import cli, closing, load_report, validation, views, workflows
from samples.auction.api import AuctionService, create_app
from samples.auction.workflows import (
    BIDS,
    POPULAR,
    TABLES,
    WALLETS,
    WORKFLOWS,
    auto_close,
    bid,
    check,
    close,
    deposit,
    item_view,
    popular,
    register,
    timer_id,
    wallets,
    winner_view,
)
from tests.conftest import dynamodb_url, make_factory
from tests.support.samples_http import running

OPENS = 1000.0
CLOSES = OPENS + 60
KEY = b"auction-test-key"


class Clock:
    """A clock the test moves: ``clock.now = CLOSES``."""

    def __init__(self, now: float = OPENS) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    store = make_factory(str(request.param), request, tmp_path)()
    store.create_tables(*TABLES)
    for owner, amount in [("sam", 0), ("ada", 500), ("bob", 500), ("cy", 30)]:
        run(deposit({"owner": owner, "amount": amount}), request_id=f"open-{owner}", store=store)
    return store


def go(store: Store, m: Any, request_id: str, at: float = OPENS) -> Any:
    return run(m, request_id=request_id, store=store, clock=Clock(at))


def lamp(store: Store, item: str = "lamp") -> None:
    new = {"id": item, "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60.0}
    go(store, register(new), f"list-{item}")  # type: ignore[arg-type]


def place(
    store: Store, bidder: str, amount: int, request_id: str, at: float = OPENS + 1, item: str = "lamp"
) -> Any:
    return go(store, bid({"item": item, "bidder": bidder, "amount": amount}), request_id, at)


def refusal(store: Store, m: Any, request_id: str, at: float = OPENS + 1) -> dict[str, str]:
    with pytest.raises(WorkflowAborted) as refused:
        go(store, m, request_id, at)
    assert isinstance(refused.value.reason, dict)
    return refused.value.reason


def balances(store: Store) -> dict[str, int]:
    return {owner: rows["balance"] for owner, rows in wallets(store).items()}


def test_a_sale_charges_the_winner_once_pays_the_seller_and_releases_the_losers(store: Store) -> None:
    lamp(store)
    assert place(store, "ada", 20, "b1")["seq"] == 1
    assert place(store, "bob", 30, "b2")["seq"] == 2
    assert place(store, "ada", 45, "b3")["seq"] == 3
    assert winner_view(store, "lamp")["leader"]["amount"] == 45
    sold = {"item": "lamp", "status": "sold", "winner": "ada", "amount": 45, "released": ["bob"]}
    for _ in range(3):  # the closer retries: the same answer, one charge
        assert go(store, close({"item": "lamp"}), "c1", CLOSES) == sold
    assert balances(store) == {"sam": 45, "ada": 455, "bob": 500, "cy": 30}
    assert item_view(store, "lamp")["status"] == "sold"  # type: ignore[index]
    assert winner_view(store, "lamp")["result"] == sold
    assert popular(store) == [{"item": "lamp", "bids": 3}]
    assert check(store).ok


def test_duplicate_and_racing_bids_are_recorded_once(store: Store) -> None:
    lamp(store)
    barrier = threading.Barrier(4)
    answers: list[Any] = []

    def client() -> None:
        barrier.wait()
        answers.append(place(store, "ada", 20, "b-race"))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 4 and all(answer == answers[0] for answer in answers)
    assert popular(store) == [{"item": "lamp", "bids": 1}]
    assert check(store).ok


@pytest.mark.parametrize(
    ("bidder", "amount", "at", "code", "message"),
    [
        ("ada", 9, OPENS + 1, "below_minimum", "bid 9 is below the minimum price 10"),
        ("ada", 20, CLOSES, "closed", "bidding on 'lamp' closed at 1970-01-01T00:17:40+00:00"),
        ("sam", 20, OPENS + 1, "own_item", "'sam' sells 'lamp' and cannot bid on it"),
        ("ada", 15, OPENS + 1, "too_low", "bid 15 does not beat the current maximum 15"),
    ],
)
def test_bids_are_refused_with_a_clear_reason_and_write_nothing(
    store: Store, bidder: str, amount: int, at: float, code: str, message: str
) -> None:
    lamp(store)
    place(store, "bob", 15, "first")
    before = data_rows(store, *TABLES)
    assert refusal(store, bid({"item": "lamp", "bidder": bidder, "amount": amount}), "bad", at) == {
        "code": code,
        "message": message,
    }
    assert data_rows(store, *TABLES) == before


def test_no_bid_after_the_auction_closed(store: Store) -> None:
    lamp(store)
    go(store, close({"item": "lamp"}), "c1", CLOSES)
    # a bid whose clock still read "open" (a slow client, a skewed server) is refused all the same
    assert refusal(store, bid({"item": "lamp", "bidder": "ada", "amount": 50}), "late")["code"] == "closed"
    assert refusal(store, bid({"item": "nope", "bidder": "ada", "amount": 50}), "nope")["code"] == "not_found"


def test_closing_refusals(store: Store) -> None:
    lamp(store)
    place(store, "ada", 20, "b1")
    assert refusal(store, close({"item": "lamp"}), "early", CLOSES - 1)["code"] == "still_open"
    assert refusal(store, close({"item": "lamp"}), "early", CLOSES + 5)["code"] == "still_open"  # memoized
    go(store, close({"item": "lamp"}), "c1", CLOSES)
    assert refusal(store, close({"item": "lamp"}), "c2", CLOSES)["code"] == "already_closed"
    assert refusal(store, close({"item": "ghost"}), "c3", CLOSES)["code"] == "not_found"
    assert balances(store)["ada"] == 480 and check(store).ok


def test_an_item_without_bids_ends_unsold(store: Store) -> None:
    lamp(store)
    result = go(store, close({"item": "lamp"}), "c1", CLOSES)
    assert (result["status"], result["reason"]) == ("unsold", "no bids")
    assert check(store).ok and check(store).unsold == 1


def test_a_failed_payment_is_compensated_and_the_item_ends_unsold(store: Store) -> None:
    lamp(store)
    place(store, "ada", 20, "b1")
    place(store, "cy", 40, "b2")  # cy has 30
    outcome = run_result(close({"item": "lamp"}), request_id="c1", store=store, clock=Clock(CLOSES))
    reason = {"code": "payment_failed", "message": "payment failed: 'cy' has 30, the winning bid was 40"}
    assert outcome.failure() == WorkflowAborted(reason, "close", "c1")
    assert run_result(close({"item": "lamp"}), request_id="c1", store=store, clock=Clock(CLOSES)) == outcome
    assert balances(store) == {"sam": 0, "ada": 500, "bob": 500, "cy": 30}
    view = item_view(store, "lamp")
    assert view is not None and view["status"] == "unsold"
    assert view["result"]["status"] == "unsold" and sorted(view["result"]["released"]) == ["ada", "cy"]
    sealed: Any = data_rows(store, BIDS)[(BIDS, "lamp", "closed")]
    assert sealed["outcome"] == "unsold"
    assert check(store).ok


@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER])
@pytest.mark.parametrize("payer", ["ada", "cy"])
def test_a_crash_at_any_commit_of_a_close_charges_at_most_once(
    store: Store, fault: Fault, payer: str
) -> None:
    """Sold (ada pays) or compensated (cy cannot): killed at each commit, retried, the same end."""
    # now, seal, charging, announce, then charge, pay, settle, publish, done (sold) or the charge's abort
    # memo and three compensations (unsold); the completion record after them is a cache write.
    commits, amount = (9, 25) if payer == "ada" else (8, 40)
    for point in range(commits):
        item = f"lamp{point}"
        lamp(store, item)
        place(store, payer, amount, f"b-{item}", item=item)

        def plan(p: FaultPoint, point: int = point) -> Fault | None:
            return fault if p.kind == "commit" and p.index == point else None

        faulty = FaultyStore(store, plan)
        for _attempt in range(5):
            try:
                run_result(close({"item": item}), request_id=f"c-{item}", store=faulty, clock=Clock(CLOSES))
                break
            except SimulatedCrash:
                continue
        assert len(faulty.injected) == 1, point
        assert check(store).ok, (point, check(store).problems)
    paid = 25 * commits if payer == "ada" else 0
    assert balances(store)[payer] == (500 - paid if payer == "ada" else 30) and balances(store)["sam"] == paid


def test_racing_auctioneers_sell_once(store: Store) -> None:
    lamp(store)
    place(store, "bob", 70, "b1")
    barrier = threading.Barrier(4)
    outcomes: list[Any] = []

    def auctioneer(n: int) -> None:
        barrier.wait()
        outcomes.append(
            run_result(close({"item": "lamp"}), request_id=f"c{n % 2}", store=store, clock=Clock(CLOSES))
        )

    threads = [threading.Thread(target=auctioneer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(1 for outcome in outcomes if outcome.value_or(None) is not None) == 2  # one id's two copies
    assert balances(store)["bob"] == 430 and balances(store)["sam"] == 70 and check(store).ok


def test_the_async_variant_answers_once_placed_and_workers_lead_and_count(store: Store) -> None:
    """The same ``bid`` workflow, submitted: placed (and refused) at once, led and counted by a worker."""
    new: Any = {"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60.0}
    run(register(new), request_id="list-lamp", store=store)  # submit() has no clock: the real one
    queue = MemoryQueue()
    for n, (bidder, amount) in enumerate([("ada", 20), ("bob", 30)]):
        req = {"item": "lamp", "bidder": bidder, "amount": amount}
        pending = submit(bid(req), request_id=f"async-{n}", store=store, queue=queue, signing_key=KEY)  # type: ignore[arg-type]
        assert pending.status() is RunStatus.RUNNING
    low = {"item": "lamp", "bidder": "cy", "amount": 25}
    assert submit(bid(low), request_id="low", store=store, queue=queue).status() is RunStatus.ABORTED  # type: ignore[arg-type]
    assert winner_view(store, "lamp")["leader"] is None and popular(store) == []  # placed, not led yet
    assert not check(store).ok and check(store, settled=False).ok
    stats = Worker(WORKFLOWS, store=store, queue=queue, signing_key=KEY, wait=0.01).run(idle_timeout=0.1)
    assert stats.completed == 2
    assert winner_view(store, "lamp")["leader"]["bidder"] == "bob"
    assert popular(store) == [{"item": "lamp", "bids": 2}] and check(store).ok


def test_registering_items(store: Store) -> None:
    new: Any = {"id": "vase", "title": "Vase", "seller": "nobody", "min_price": 5, "closes_in": 60.0}
    assert refusal(store, register(new), "r1")["code"] == "no_wallet"
    lamp(store)
    again: Any = {"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60.0}
    assert refusal(store, register(again), "r2")["code"] == "exists"
    past: Any = {"title": "Old", "seller": "sam", "min_price": 5, "closes_at": OPENS - 1}
    assert "has passed" in refusal(store, register(past), "r3")["message"]
    anonymous: Any = {"title": "Anon", "seller": "sam", "min_price": 5, "closes_at": CLOSES}
    made = go(store, register(anonymous), "r4")
    assert made == go(store, register(anonymous), "r4", OPENS + 30)  # same derived id, same closing time
    assert made["closes_at"] == CLOSES and item_view(store, made["id"]) is not None


# -- the closing timer: a worker on a test clock closes the item, nobody asks -----------------


@pytest.fixture(params=["memory-queue", "sqlite-queue"])
def queue_of(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Makes the queue a worker on ``clock`` reads (delays counted on that clock)."""

    def make(clock: Clock) -> Queue:
        if request.param == "memory-queue":
            return MemoryQueue(clock=clock)
        return SqliteQueue(tmp_path / f"queue-{uuid.uuid4().hex}.sqlite3", clock=clock)

    return make


def closed_row(store: Store, item: str = "lamp") -> Any:
    return data_rows(store, BIDS).get((BIDS, item, "closed"))


def drain(
    worker: Worker, queue: Queue, clock: Clock, *, item: str = "lamp", until: float = CLOSES + 30
) -> None:
    """Hand the worker every message due, moving the clock a second at a time when none is; the
    item must stay open while the clock is before its closing time."""
    while clock.now <= until:
        received = queue.receive()
        if received:
            worker.handle(received[0])
        else:
            clock.now += 1.0
        if clock.now < CLOSES:
            assert closed_row(worker.store, item) is None, f"closed before its closing time, at {clock.now}"


def timer(store: Store, item: str = "lamp") -> Any:
    return status(store, auto_close.name, timer_id(item))


def test_the_timer_closes_the_item_at_its_closing_time_without_any_close_request(
    store: Store, queue_of: Any
) -> None:
    """The item registered under ``run`` (its timer's pointer waits in the outbox), a worker's relay
    sends it; the timer sleeps until the closing time and closes the item: sealed then, not before,
    the winner charged once."""
    clock = Clock()
    queue = queue_of(clock)
    go(
        store,
        register({"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60.0}),
        "l",
    )
    place(store, "ada", 20, "b1")
    place(store, "bob", 30, "b2")
    assert timer(store).status is RunStatus.RUNNING  # claimed with the register's last step
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    assert worker.relay() == 1 and worker.relay() == 0  # the timer's pointer, sent once
    drain(worker, queue, clock)
    assert closed_row(store) == {"at": CLOSES, "outcome": "sold", "by": "timer"}  # its now(): the due time
    sold = {"item": "lamp", "status": "sold", "winner": "bob", "amount": 30, "released": ["ada"]}
    assert timer(store).status is RunStatus.COMPLETED and timer(store).result == sold
    assert winner_view(store, "lamp")["result"] == sold
    assert balances(store) == {"sam": 30, "ada": 500, "bob": 470, "cy": 30}
    assert worker.stats.suspended >= 1  # the sleep held no worker: it was queued for its due time
    verdict = check(store, late=0.0, now=clock.now)
    assert verdict.ok, verdict.problems
    assert [(c.item, c.due, c.at, c.by) for c in verdict.closings] == [("lamp", CLOSES, CLOSES, "timer")]


def test_a_duplicate_register_starts_one_timer_and_the_item_closes_once(store: Store, queue_of: Any) -> None:
    """Submitted twice (the API with a queue), then registered again under another id: one timer,
    whose pointer the submit sent at once, one close, one charge."""
    clock = Clock()
    queue = queue_of(clock)
    new: Any = {"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60.0}
    for _ in range(2):
        submit(register(new), request_id="l", store=store, queue=queue, clock=clock, signing_key=KEY)
    assert refusal(store, register(new), "l2")["code"] == "exists"
    place(store, "ada", 20, "b1")
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None, signing_key=KEY)
    assert worker.relay() == 0  # nothing left for the relay: submit sent the timer's pointer
    drain(worker, queue, clock)
    assert timer(store).status is RunStatus.COMPLETED and closed_row(store)["by"] == "timer"
    assert worker.stats.completed == 1  # one timer request ran to its end; copies met it finished
    assert balances(store)["ada"] == 480 and balances(store)["sam"] == 20
    assert check(store, late=0.0, now=clock.now).ok


def test_a_close_before_the_closing_time_is_refused_and_the_timer_still_closes(
    store: Store, queue_of: Any
) -> None:
    clock = Clock()
    queue = queue_of(clock)
    lamp(store)
    place(store, "ada", 20, "b1")
    assert refusal(store, close({"item": "lamp"}), "early", CLOSES - 1)["code"] == "still_open"
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    worker.relay()
    drain(worker, queue, clock)
    assert closed_row(store)["at"] >= CLOSES and closed_row(store)["by"] == "timer"
    assert balances(store)["ada"] == 480 and check(store).ok


def test_a_client_closing_first_wins_and_the_timer_is_refused_already_closed(
    store: Store, queue_of: Any
) -> None:
    clock = Clock()
    queue = queue_of(clock)
    lamp(store)
    place(store, "ada", 20, "b1")
    assert go(store, close({"item": "lamp"}), "c1", CLOSES)["status"] == "sold"
    clock.now = CLOSES  # the client closed it right at the closing time; the timer comes next
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    worker.relay()
    drain(worker, queue, clock)
    assert timer(store).status is RunStatus.ABORTED
    assert timer(store).reason["code"] == "already_closed"
    assert closed_row(store) == {"at": CLOSES, "outcome": "sold", "by": "client"}
    assert balances(store)["ada"] == 480 and balances(store)["sam"] == 20  # charged once
    assert check(store).ok


def test_a_timer_whose_winner_cannot_pay_ends_the_item_unsold(store: Store, queue_of: Any) -> None:
    clock = Clock()
    queue = queue_of(clock)
    lamp(store)
    place(store, "cy", 40, "b1")  # cy has 30
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    worker.relay()
    drain(worker, queue, clock)
    assert timer(store).status is RunStatus.ABORTED and timer(store).reason["code"] == "payment_failed"
    assert closed_row(store) == {"at": CLOSES, "outcome": "unsold", "by": "timer"}
    assert balances(store) == {"sam": 0, "ada": 500, "bob": 500, "cy": 30}
    assert check(store).ok


def test_the_closing_killer_aims_at_servers_while_bidding_and_at_workers_around_closing_times() -> None:
    killer = cli.ClosingKiller(5, random.Random(3), spread=0.25)
    now = time.time()
    dues = {"a": now + 10, "b": now + 12, "c": now + 14}
    killer.aim(dues)
    aims = killer._aims
    assert sorted(kind for _at, kind, _item, _due in aims) == [
        "server",
        "server",
        "worker",
        "worker",
        "worker",
    ]
    for at, kind, item, due in aims:
        if kind == "server":
            assert now <= at <= dues["a"] and item is None
        else:
            assert item is not None and due == dues[item] and abs(at - due) <= 0.25
    assert sorted(str(item) for _at, kind, item, _due in aims if kind == "worker") == ["a", "b", "c"]


# -- the checker catches each kind of violation ----------------------------------------------


def _poke(store: Store, table: str, partition: str, body: Any) -> None:
    run(atomic(table, partition, body), request_id=f"poke-{uuid.uuid4()}", store=store)


def sold_lamp(store: Store) -> None:
    lamp(store)
    place(store, "ada", 20, "b1")
    place(store, "bob", 30, "b2")
    go(store, close({"item": "lamp"}), "c1", CLOSES)
    assert check(store).ok


def test_check_catches_a_winner_charged_twice(store: Store) -> None:
    sold_lamp(store)

    def charge_again(tx: Tx) -> None:
        tx.increment("balance", -30)
        tx.put("paid:lamp", 60)

    _poke(store, WALLETS, "bob", charge_again)
    verdict = check(store)
    assert verdict.failed == {"sales", "money"}


def test_check_catches_money_created_and_a_late_bid(store: Store) -> None:
    sold_lamp(store)
    _poke(store, WALLETS, "cy", lambda tx: tx.increment("balance", 5))

    def late(tx: Tx) -> None:
        tx.put("b:late", {"bid": "late", "bidder": "cy", "amount": 99, "at": CLOSES + 1, "seq": 3})

    _poke(store, BIDS, "lamp", late)
    verdict = check(store)
    assert verdict.failed == {"bids", "money"}
    assert any("should have been refused" in problem for problem in verdict.problems)


def test_check_while_bids_are_led_and_closes_run(store: Store) -> None:
    """``settled=False`` (what the chaos suite checks continuously) lets a leader, a count and a
    sale trail the bids; it never lets money be moved twice or to the wrong wallet."""
    sold_lamp(store)
    assert check(store, settled=False).ok
    _poke(store, POPULAR, "all", lambda tx: tx.increment("lamp", -1))  # a count still to come: fine
    assert check(store, settled=False).ok and not check(store).ok

    def charge_a_loser(tx: Tx) -> None:
        tx.increment("balance", -20)
        tx.put("paid:lamp", 20)

    _poke(store, WALLETS, "ada", charge_a_loser)
    verdict = check(store, settled=False)
    assert verdict.failed == {"sales"}, verdict.problems  # ada lost the auction: never charged


def test_check_catches_a_close_before_the_closing_time_and_a_late_or_overdue_one(store: Store) -> None:
    sold_lamp(store)  # closed by a client right at CLOSES
    assert check(store, late=0.0).ok
    _poke(store, BIDS, "lamp", lambda tx: tx.put("closed", {**tx.get("closed"), "at": CLOSES + 40}))
    assert check(store).ok  # lateness is judged only against a tolerance
    verdict = check(store, late=33.0)
    assert verdict.failed == {"closing"}
    assert verdict.problems == (
        "'lamp' was closed 40.000 s after its closing time 00:17:40.000: later than the 33 s tolerance "
        "(was its timer late, or no worker running?)",
    )
    _poke(store, BIDS, "lamp", lambda tx: tx.put("closed", {**tx.get("closed"), "at": CLOSES - 5}))
    verdict = check(store)  # early: always a violation
    assert verdict.failed == {"closing"}
    assert verdict.problems == ("'lamp' was closed at 00:17:35.000, before its closing time 00:17:40.000",)
    lamp(store, "vase")  # open, its timer never run (no worker)
    assert check(store, late=5.0, now=CLOSES + 5).failed == {"closing"}  # lamp's early close only
    overdue = check(store, late=5.0, now=CLOSES + 6).problems
    assert "'vase' is still open 6.0 s after its closing time 00:17:40.000" in overdue[-1]


def test_check_catches_an_item_closed_by_both_its_timer_and_a_client(store: Store) -> None:
    """The timer's request and the bids must tell one story: here the timer closed the item (and
    completed) but the bids are changed to say a client did — as if both had closed it."""
    clock = Clock()
    queue = MemoryQueue(clock=clock)
    lamp(store)
    place(store, "ada", 20, "b1")
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    worker.relay()
    drain(worker, queue, clock)
    assert check(store).ok
    _poke(store, BIDS, "lamp", lambda tx: tx.put("closed", {**tx.get("closed"), "by": "client"}))
    verdict = check(store)
    assert verdict.failed == {"closing"}
    assert verdict.problems[0].startswith(
        "'lamp''s timer (auto_close 'close-lamp') closed it, but so did a client"
    )
    assert check(store, settled=False).ok  # timers are compared once settled


def test_check_catches_an_item_without_a_timer(store: Store) -> None:
    terms = {"id": "ghost", "title": "Ghost", "seller": "sam", "min_price": 5, "closes_at": CLOSES}
    _poke(store, workflows.ITEMS, "ghost", lambda tx: tx.put("terms", terms) or tx.put("status", "open"))
    _poke(store, BIDS, "ghost", lambda tx: tx.put("terms", terms))
    verdict = check(store)
    assert verdict.failed == {"closing"}
    assert verdict.problems == ("'ghost' has no closing timer (auto_close 'close-ghost') to close it",)


def test_the_sample_docstrings_run() -> None:
    for module in (workflows, validation, views, auction_api, closing, load_report, cli):
        failed, attempted = doctest.testmod(module)
        assert attempted > 0 and failed == 0


# -- the HTTP API, through a real socket -----------------------------------------------------------


def test_the_http_api(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'api.sqlite3'}"
    store = cli._open(store_url)
    clock = Clock()
    service = AuctionService(store_url, clock=clock)
    with running(create_app(service)) as url, httpx.Client(base_url=url) as http:

        def post(path: str, body: Any, key: str | None) -> httpx.Response:
            return http.post(path, json=body, headers={"Idempotency-Key": key} if key else {})

        assert post("/wallets", {"owner": "sam", "amount": 0}, None).status_code == 400
        for owner, amount in [("sam", 0), ("ada", 100), ("bob", 20)]:
            assert post("/wallets", {"owner": owner, "amount": amount}, f"w-{owner}").status_code == 200
        assert post("/wallets", {"owner": "ada", "amount": -5}, "w-x").status_code == 422
        item = {"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60}
        listed = post("/items", item, "i1")
        assert (listed.status_code, listed.json()["closes_at"]) == (201, CLOSES)
        reused = post("/items", {**item, "min_price": 11}, "i1")
        assert (reused.status_code, reused.json()["error"]) == (422, "idempotency_key_reused")
        assert post("/items", {"title": "x"}, "i2").status_code == 422
        assert http.post("/items", content=b"[", headers={"Idempotency-Key": "i3"}).status_code == 400

        clock.now = OPENS + 1
        low = post("/items/lamp/bids", {"bidder": "ada", "amount": 5}, "b1")
        assert (low.status_code, low.json()["error"]) == (422, "below_minimum")
        assert "minimum price 10" in low.json()["detail"]
        placed = post("/items/lamp/bids", {"bidder": "ada", "amount": 15}, "b2")
        assert placed.status_code == 201 and placed.json()["seq"] == 1
        assert post("/items/lamp/bids", {"bidder": "ada", "amount": 15}, "b2").json() == placed.json()
        beaten = post("/items/lamp/bids", {"bidder": "bob", "amount": 15}, "b3")
        assert (beaten.status_code, beaten.json()["error"]) == (409, "too_low")
        assert post("/items/lamp/bids", {"bidder": "bob", "amount": 18}, "b4").status_code == 201
        assert post("/items/ghost/bids", {"bidder": "bob", "amount": 18}, "b5").status_code == 404
        assert http.get("/items/lamp/winner").json()["leader"]["bidder"] == "bob"
        timer = http.get("/items/lamp/closing")  # registered under run: sent by a worker's relay
        assert (timer.status_code, timer.json()["status"]) == (202, "running")
        assert http.get("/items/ghost/closing").status_code == 404
        early = post("/items/lamp/close", {}, "c0")
        assert (early.status_code, early.json()["error"]) == (409, "still_open")

        clock.now = CLOSES
        late = post("/items/lamp/bids", {"bidder": "ada", "amount": 50}, "b6")
        assert (late.status_code, late.json()["error"]) == (409, "closed")
        closed = post("/items/lamp/close", {}, "c1")
        assert closed.status_code == 200
        assert closed.json() == {
            "item": "lamp",
            "status": "sold",
            "winner": "bob",
            "amount": 18,
            "released": ["ada"],
        }
        assert post("/items/lamp/close", {}, "c1").json() == closed.json()
        assert post("/items/lamp/close", {}, "c2").json()["error"] == "already_closed"
        assert http.get("/items/lamp/closing").json()["status"] == "running"  # no worker: never ran
        assert http.get("/items/lamp").json()["status"] == "sold"
        assert http.get("/wallets/bob").json()["balance"] == 2
        assert http.get("/wallets/nobody").status_code == 404
        assert http.get("/popular").json() == {"items": [{"item": "lamp", "bids": 2}]}
        assert http.get("/popular", params={"limit": "x"}).status_code == 422
        assert http.get("/items/ghost").status_code == 404
    assert check(store).ok


def test_the_http_api_with_a_queue_answers_bids_202_and_workers_lead_and_count(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'api.sqlite3'}"
    store = cli._open(store_url)
    queue = MemoryQueue()  # shared with the worker below; the server calls it from threads
    service = AuctionService(store_url, queue, signing_key=KEY)  # a submitted bid reads the real clock
    with running(create_app(service)) as url, httpx.Client(base_url=url) as http:
        lamp = {"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60}
        http.post("/wallets", json={"owner": "sam", "amount": 0}, headers={"Idempotency-Key": "w1"})
        listed = http.post("/items", json=lamp, headers={"Idempotency-Key": "i1"})
        assert listed.status_code == 201 and listed.json()["id"] == "lamp"
        assert queue.approximate_size() == 1  # register was submitted: the timer's pointer went at once
        assert http.post("/items", json=lamp, headers={"Idempotency-Key": "i1"}).json() == listed.json()

        def post(body: Any, key: str) -> httpx.Response:
            return http.post("/items/lamp/bids", json=body, headers={"Idempotency-Key": key})

        accepted = post({"bidder": "ada", "amount": 15}, "b1")
        assert accepted.headers["Location"] == "/bids/b1"
        assert (accepted.status_code, accepted.json()) == (
            202,
            {
                "request_id": "b1",
                "status": "running",
                "status_url": "/bids/b1",
                "item": "lamp",
                "bidder": "ada",
                "amount": 15,
            },
        )
        assert http.get("/bids/b1").json()["status"] == "running"
        assert http.get("/items/lamp/winner").json()["leader"] is None  # placed, not led yet
        low = post({"bidder": "bob", "amount": 12}, "b2")  # refused in the first step: at once
        assert (low.status_code, low.json()["error"]) == (409, "too_low")
        Worker(workflows.WORKFLOWS, store=store, queue=queue, signing_key=KEY, wait=0.01).run(
            idle_timeout=0.1
        )
        done = http.get("/bids/b1").json()
        assert done["status"] == "completed" and done["result"]["amount"] == 15
        timer = http.get("/items/lamp/closing")  # taken by the worker, asleep until the closing time
        assert (timer.status_code, timer.json()["status"]) == (202, "running")
        again = post({"bidder": "ada", "amount": 15}, "b1")
        assert (again.status_code, again.json()) == (201, done["result"])
        assert http.get("/items/lamp/winner").json()["leader"] == done["result"]
        assert http.get("/popular").json() == {"items": [{"item": "lamp", "bids": 1}]}
        assert http.get("/bids/nobody").status_code == 404
    assert check(store).ok


def test_a_failed_payment_over_http_answers_unsold(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'api.sqlite3'}"
    store = cli._open(store_url)
    lamp: Any = {"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 10, "closes_in": 60}
    go(store, deposit({"owner": "sam", "amount": 0}), "w1")
    go(store, register(lamp), "i1")
    go(store, bid({"item": "lamp", "bidder": "pauper", "amount": 99}), "b1", OPENS + 1)
    service = AuctionService(store_url, clock=Clock(CLOSES))
    with running(create_app(service)) as url, httpx.Client(base_url=url) as http:
        for _ in range(2):
            answer = http.post("/items/lamp/close", json={}, headers={"Idempotency-Key": "c1"})
            assert answer.status_code == 200
            assert answer.json() == {
                "item": "lamp",
                "status": "unsold",
                "reason": "payment failed: 'pauper' has 0, the winning bid was 99",
            }
        assert http.get("/items/lamp/winner").json()["result"]["released"] == ["pauper"]
    assert check(store).ok


# -- the command line ------------------------------------------------------------------------------


def test_load_and_check_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:{tmp_path / 'cli.sqlite3'}"
    # A window long enough that a loaded machine still sends the early below-minimum bids before
    # their item closes (they would be refused as closed instead).
    args = ["--store", url, "--bids", "60", "--users", "4", "--items", "3", "--window", "4"]
    assert cli.main(["load", *args]) == 0
    out = capsys.readouterr().out
    assert "[ ok ] answers" in out and "below_minimum" in out and "closed" in out
    assert cli.main(["check", "--store", url]) == 0
    assert (
        "[ ok ] closing: 3 of 3 items closed, each once (0 by its timer, 3 by a client)"
        in capsys.readouterr().out
    )
    # No worker ran the timers: the load closed each item itself, after its closing time (+0.2 s).
    assert cli.main(["check", "--store", url, "--late", "0.1"]) == 1
    assert "s after its closing time" in capsys.readouterr().out
    store = cli._open(url)
    run(
        atomic(WALLETS, "load0-seller0", lambda tx: tx.increment("balance", 1)),
        request_id="gift",
        store=store,
    )
    store.close()
    assert cli.main(["check", "--store", url]) == 1
    assert "money not conserved" in capsys.readouterr().out


def test_load_with_a_queue_leaves_the_closing_to_the_workers_timers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``load --store --queue``: no client needs to close anything; a worker runs the timers."""
    url, queue_url = f"sqlite:{tmp_path / 'cli.sqlite3'}", f"sqlite:{tmp_path / 'queue.sqlite3'}"
    store = cli._open(url)
    worker = Worker(WORKFLOWS, store=store, queue=open_queue(queue_url), wait=0.1, relay_every=0.5)
    thread = threading.Thread(target=worker.run, name="auction-worker", daemon=True)
    thread.start()
    try:
        args = ["--store", url, "--queue", queue_url, "--bids", "30", "--users", "4", "--items", "2"]
        assert cli.main(["load", *args, "--window", "2"]) == 0
    finally:
        worker.stop()
        thread.join()
    out = capsys.readouterr().out
    assert "before closing time: 2 still_open" in out and "after the timer: 2 already_closed" in out
    assert "[ ok ] answers" in out and "  timers    " in out
    assert cli.main(["check", "--store", url]) == 0
    verdict = check(store)
    assert [shut.at is not None and shut.at >= shut.due for shut in verdict.closings] == [True, True]


# -- load + SIGKILL + check: API servers and `idemflow worker` processes killed mid-request ---------


@pytest.mark.slow
def test_demo_with_sigkilled_servers_and_workers_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four kills (their tolerance of late closes grows with the workers killed: fewer would make
    it tighter on a loaded machine), on 60 bids."""
    slack = ["--slack", str(closing.LOADED_SLACK)]
    assert (
        cli.main(["demo", "--data", str(tmp_path), "--bids", "60", "--kills", "4", "--seed", "5", *slack])
        == 0
    )
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out and "4 SIGKILLs (2 API servers, 2 workers)" in out
    assert "seed 5" in out
    assert out.count("  kill      worker at ") == 2 and "s from load5-item" in out  # aimed at closing times
    assert "  lateness  p50 " in out and "[ ok ] closing: 5 of 5 items closed, each once" in out


@pytest.mark.slow
def test_demo_with_sigkilled_servers_and_workers_on_azurite(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    prefix = f"au{uuid.uuid4().hex[:8]}"
    settings = cli.DemoSettings(
        store=f"azure:?prefix={prefix}",
        queue=f"azure-queue:{prefix}?visibility_timeout=2",
        kills=3,
        slack=closing.LOADED_SLACK,
        load=cli.LoadSettings(bids=40, items=3, bidders=6, users=4, window=5.0, seed=13),
    )
    report = cli.run_demo(settings)
    assert report.ok, report.render()
    assert sum(report.crashes.kills.values()) == 3
    assert report.verdict.bids == report.load.bids["accepted"] > 0


@pytest.mark.slow
def test_demo_on_dynamodb_local_under_the_services_conflicts(
    moto: Moto, request: pytest.FixtureRequest
) -> None:
    """AWS's own engine, every process meeting transaction conflicts (overlaps and 5% phantoms)."""
    prefix = f"au{uuid.uuid4().hex[:8]}"
    settings = cli.DemoSettings(
        store=dynamodb_url("dynamodb-local", request, prefix),
        queue=f"sqs:{prefix}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=2",
        kills=2,
        slack=closing.LOADED_SLACK,
        load=cli.LoadSettings(bids=40, items=3, bidders=6, users=8, window=5.0, seed=17),
    )
    report = cli.run_demo(settings)
    assert report.ok, report.render()
    assert report.verdict.bids == report.load.bids["accepted"] > 0
