"""The chaos suite (``python -m samples.chaos``): a short run inside the test suite, and proof
that its checks would notice a double count, a double charge, a worker ending itself, a
request finished on a version it did not start on, a timer early, a step, a child or a
message twice, a message lost, and a charge kept by an aborted booking, refunded twice or
refunded without ever being made (the reading workload's checks: test_chaos_reading.py)."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import os
import pkgutil
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from idemflow import atomic, run
from idemflow.client import RunStatus, get, status, submit
from idemflow.stores import MemoryStore, SqliteStore, Store
from idemflow.testing import FaultyStore
from idemflow.testing.servers import DynamoDBLocal
from idemflow.worker import SqliteQueue
from samples import chaos
from samples.auction import workflows as auction
from samples.survey import workflows as survey
from tests.support.selection import backend_marks

ROOT = Path(__file__).resolve().parents[2]
LUNCH: survey.NewSurvey = {
    "id": "lunch",
    "title": "Lunch",
    "questions": [{"id": "main", "text": "Main course?", "options": ["soup", "salad"]}],
}


SHORT_RUNS: dict[str, tuple[str, ...]] = {
    "transfer": ("transfer: ", "transfer, run"),  # the two cheapest, with the totals row checked
    "deploy": ("transfer, deploy",),
    "survey": ("survey (",),
    "auction": ("auction (",),
    "survey-on-dynamodb": ("survey on",),
    "auction-on-dynamodb": ("auction on",),
    "coordination": ("coordination",),
    "payments": ("payments",),
    "flow-control": ("flow control",),
    "reading": ("reading",),
}
"""The short run's workloads (``--only`` prefixes), a case each so they spread over the test
workers; together every workload of :data:`samples.chaos.WORKLOADS` once."""


def test_the_short_runs_take_every_workload_once() -> None:
    taken = [name for name, _ in chaos.WORKLOADS for only in SHORT_RUNS.values() if name.startswith(only)]
    assert taken == [name for name, _ in chaos.WORKLOADS]


def _short_run(only: tuple[str, ...], tmp_path: Path, request: pytest.FixtureRequest) -> tuple[int, str]:
    """``python -m samples.chaos --seconds 0 --quick --only ...``: its exit status and summary. The
    workloads on DynamoDB Local take the session's server (``make chaos`` starts its own: main's
    ``_dynamodb_local``); the others run through ``main`` itself."""
    out = tmp_path / "chaos.md"
    if not any(name.startswith(("survey on", "auction on")) for name in only):
        argv = ["--seconds", "0", "--quick", "--seed", "7", "--workdir", str(tmp_path / "data")]
        argv += ["--out", str(out), *(arg for name in only for arg in ("--only", name))]
        return chaos.main(argv), out.read_text()
    server: DynamoDBLocal = request.getfixturevalue("dynamodb_local")
    opts = chaos.Options(0.0, 7, tmp_path / "data", out, quick=True, dynamodb=server.endpoint, only=only)
    started = time.monotonic()
    totals = chaos.run_chaos(opts)
    summary = chaos.render(totals, opts, time.monotonic() - started)
    return int(any(total.anomalies for total in totals)), summary


@pytest.mark.slow
@pytest.mark.parametrize(
    "only",
    [
        pytest.param(only, id=name, marks=backend_marks("dynamodb-local") if "dynamodb" in name else [])
        for name, only in SHORT_RUNS.items()
    ],
)
def test_a_short_chaos_run_finds_no_anomaly(
    only: tuple[str, ...], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One round of the workloads named (``--quick``; the deadline passes during it)."""
    started = time.monotonic()
    status_, summary = _short_run(only, tmp_path, request)
    assert status_ == 0, summary
    numbers = r"\| (\d+) " * 9
    rows = {
        name: tuple(map(int, found))
        for name, *found in re.findall(r"\| ([^|]+?) " + numbers + r"\|", summary)
    }
    chosen = [name for name, _ in chaos.WORKLOADS if name.startswith(only)]
    assert list(rows) == [*chosen, "**total**"]
    deploying = any(name.startswith("transfer, deploy") for name in chosen)
    for name, counts in rows.items():
        rounds, requests, duplicates, oversize, kills, deploys, faults, checks, anomalies = counts
        assert rounds >= 1 and requests > 0 and duplicates > 0 and anomalies == 0, name
        if name.startswith(
            ("survey", "auction", "transfer, deploy", "coordination", "payments", "reading")
        ):  # killed, faulty, watched
            assert kills > 0 and faults > 0 and checks > 0, name
        if name.startswith(("transfer, run", "transfer, deploy")):  # inputs over the queue's body limit
            assert oversize > 0, name
        assert (deploys > 0) is (name.startswith("transfer, deploy") or (name == "**total**" and deploying))
    if len(chosen) > 1:  # the totals row adds the workloads' rows up
        assert rows["**total**"] == tuple(map(sum, zip(*(rows[name] for name in chosen), strict=True)))
    assert "None found." in summary
    if only == ("payments",):
        [paid] = re.findall(r"(?m)^\| payments [^|]+" + r"\| (\d+) " * 7 + r"\|$", summary)  # its 2nd table
        charges, refunds, declined, outages, _late, aborts, owed = map(int, paid)
        assert charges > refunds > 0 and declined > 0 and outages > 0 and aborts > 0 and owed == 0, paid
    if only == ("reading",):
        [read] = re.findall(r"(?m)^\| reading [^|]+" + r"\| (\d+) " * 7 + r"\|$", summary)  # its 3rd table
        events, values, quotes, _repeats, cancels, kids, _nudges = map(int, read)
        assert events > 0 and values > 0 and quotes > 0 and cancels > 0 and kids > 0, read
    assert time.monotonic() - started < 600  # a runaway guard, not a measurement


def test_the_summary_table_adds_up(tmp_path: Path) -> None:
    totals = [
        chaos.Totals("a", 1, 10, 15, 2, 3, deploys=2, oversize=1),
        chaos.Totals("b", 2, 5, 5, 0, 1, ["bad thing"], 7, oversize=3),
    ]
    text = chaos.render(totals, chaos.Options(1.0, 1, tmp_path, None), 1.0)
    assert "| **total** | 3 | 15 | 5 | 4 | 2 | 2 | 4 | 7 | 1 |" in text and "- bad thing" in text


def test_only_runs_the_workloads_named(tmp_path: Path) -> None:
    opts = chaos.Options(0.0, 1, tmp_path, None, only=("no such workload",))
    assert chaos.run_chaos(opts) == []
    assert "--only 'no such workload'" in chaos.render([], opts, 0.0)


def test_the_chaos_docstrings_run() -> None:
    names = [chaos.__name__, *(f"{chaos.__name__}.{m.name}" for m in pkgutil.iter_modules(chaos.__path__))]
    results = {name: doctest.testmod(importlib.import_module(name)) for name in names}
    assert all(result.failed == 0 for result in results.values()), results
    examples = ("", ".report", ".faults", ".monitor", ".versions", ".children", ".coordination_flows")
    examples += (".reading", ".reading_flows", ".reading_checks", ".reading_provider", ".reading_readers")
    assert all(results[chaos.__name__ + name].attempted > 0 for name in examples), results


# -- the checks made while a workload runs notice what must never happen ------------------------------


def _sqlite(tmp_path: Path, tables: tuple[str, ...]) -> tuple[Path, Store]:
    path = tmp_path / "watched.sqlite3"
    store = SqliteStore(path)
    store.create_tables(*tables)
    return path, store


def _watch(path: Path, check: Callable[[Store], list[str]]) -> list[str]:
    with chaos.watching(path, check, every=0.01) as monitor:
        deadline = time.monotonic() + 60
        while monitor.checks < 2 and time.monotonic() < deadline:  # a loaded machine is slower
            time.sleep(0.01)
    assert monitor.checks > 1
    return monitor.problems


def test_the_monitor_notices_a_response_counted_twice(tmp_path: Path) -> None:
    path, store = _sqlite(tmp_path, survey.TABLES)
    run(survey.create_survey(LUNCH), request_id="c", store=store)
    answer: survey.Response = {"survey": "lunch", "respondent": "ada", "answers": {"main": "soup"}}
    run(survey.respond(answer), request_id="r", store=store)

    def invariants(watched: Store) -> list[str]:
        return list(survey.check(watched, settled=False).problems)

    assert _watch(path, invariants) == []
    run(
        atomic(survey.SUMMARIES, "lunch", lambda tx: tx.increment("q:main:soup")), request_id="x", store=store
    )
    assert _watch(path, invariants) == [
        "while running: survey 'lunch': option 'soup' of 'main' counted 2 times, chosen by 1 responses"
    ]


def test_the_monitor_notices_a_winner_charged_twice(tmp_path: Path) -> None:
    path, store = _sqlite(tmp_path, auction.TABLES)
    clock = [1000.0]

    def go(m: Any, request_id: str) -> Any:
        return run(m, request_id=request_id, store=store, clock=lambda: clock[0])

    for owner, amount in [("sam", 0), ("ada", 100)]:
        go(auction.deposit({"owner": owner, "amount": amount}), f"d-{owner}")
    go(
        auction.register({"id": "lamp", "title": "Lamp", "seller": "sam", "min_price": 5, "closes_in": 60}),
        "i",
    )
    go(auction.bid({"item": "lamp", "bidder": "ada", "amount": 40}), "b")
    clock[0] = 1060.0
    go(auction.close({"item": "lamp"}), "c")

    def invariants(watched: Store) -> list[str]:
        return list(auction.check(watched, settled=False).problems)

    assert _watch(path, invariants) == []
    run(atomic(auction.WALLETS, "ada", lambda tx: tx.increment("balance", -40)), request_id="y", store=store)
    assert any("wallet 'ada'" in problem for problem in _watch(path, invariants))


def test_a_chaos_worker_ends_itself_right_after_a_commit_that_applied(tmp_path: Path) -> None:
    """``--die 1``: the first commit a worker makes is its last; the work it did is there."""
    path, store = _sqlite(tmp_path, survey.TABLES)
    run(survey.create_survey(LUNCH), request_id="c", store=store)
    queue_path = tmp_path / "queue.sqlite3"
    queue = SqliteQueue(queue_path, visibility_timeout=1)
    answer: survey.Response = {"survey": "lunch", "respondent": "bo", "answers": {"main": "salad"}}
    submit(survey.respond(answer), request_id="r-bo", store=store, queue=queue, signing_key="k")
    argv = ["worker", "survey", "--store", f"sqlite:{path}", "--queue", f"sqlite:{queue_path}"]
    argv += ["--log", str(tmp_path / "faults.log"), "--fault-rate", "0", "--die", "1"]
    env = {**os.environ, "IDEMFLOW_SIGNING_KEY": "k", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "samples.chaos", *argv], env=env, timeout=60, capture_output=True, check=False
    )
    assert done.returncode == chaos.DIED, done.stderr.decode()[-2000:]
    assert survey.results(store, "lunch")["questions"]["main"]["salad"] == 1  # type: ignore[index]
    # Its one commit was the request's last step, and the outcome rode in it.
    assert status(store, "respond", "r-bo").status is RunStatus.COMPLETED
    queue.close()


def test_the_deploy_checks_notice_a_request_on_another_version_and_a_screening_too_many() -> None:
    """What :mod:`samples.chaos.deploy` checks at the end of a round would notice a request finished
    on a version it was not submitted on, an answer of another version, a version 1 request not
    saying why it waits, and a screening no version 2 request made."""
    from samples.chaos import deploy, versions
    from samples.transfer.workflows import open_account, transfer

    store = MemoryStore()
    opening = {"a": 100, "b": 100}
    for name, balance in opening.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    requests: list[tuple[str, versions.ChaosRequest]] = [
        ("r1", {"src": "a", "dst": "b", "amount": 5}),
        ("r2", {"src": "b", "dst": "a", "amount": 7, "padding": "x" * versions.PADDING}),
    ]
    run(transfer(requests[0][1]), request_id="r1", store=store)
    run(versions.transfer_v2(requests[1][1]), request_id="r2", store=store)
    clients = deploy.Clients(FaultyStore(store, lambda _point: None), "", "", random.Random())
    clients.tried.update({"r1": [1], "r2": [1, 2]})
    seen = {request_id: status(store, "transfer", request_id) for request_id, _req in requests}
    assert deploy.verify_versions(requests, clients, seen, {"r3": deploy.WAITING + " (holds 2)"}) == []
    assert deploy.check_tables(store, opening, requests, seen) == []

    clients.tried["r1"] = [2]
    seen["r2"] = dataclasses.replace(seen["r2"], result={"transfer": "t", "left": 93})
    waited = {"r3": None, "r4": "the code of version 1 differs from what the request ran"}
    assert deploy.verify_versions(requests, clients, seen, waited) == [
        "r1 runs on version 1, but was submitted on [2]",
        "r2 claimed on version 2 answered {'transfer': 't', 'left': 93}",
        "r3 (version 1, only version 2 workers running) waiting None",
        "r4 (version 1, only version 2 workers running) waiting 'the code of version 1 differs from what "
        "the request ran'",
    ]
    run(atomic(versions.SCREENS, "a", lambda tx: tx.increment("screened")), request_id="x", store=store)
    seen = {request_id: status(store, "transfer", request_id) for request_id, _req in requests}
    assert deploy.check_tables(store, opening, requests, seen) == [
        "account a: screened 1 times, but 0 requests from it were claimed on version 2"
    ]


# -- the coordination workload's checks notice a timer early, a step, child or message twice, a loss ----


def _coordinated(store: Store) -> Any:
    """A round of :mod:`samples.chaos.coordination_flows` run under ``run`` (nothing wrong yet):
    a nap, a parent whose child completes and one whose child aborts, a receiver with a sender
    and an outside sender of two messages each, sent before it started."""
    from idemflow.client import send_message
    from samples.chaos import coordination_flows as flows

    plan = flows.Plan(
        naps=[("n1", {"id": "n1", "seconds": 0.05})],
        parents=[("p1", {"id": "p1", "verdict": "ok"}), ("p2", {"id": "p2", "verdict": "abort"})],
        receivers=[("r1", {"id": "r1", "expected": 4, "timeout": 1.0})],
        senders=[("r1.s", {"id": "r1.s", "to": "r1", "count": 2, "in_client": True, "pause": 0.0})],
        outside=[("r1", "r1.out", 2)],
    )
    run(flows.nap(plan.naps[0][1]), request_id="n1", store=store)
    for rid, req in plan.parents:
        run(flows.parent(req), request_id=rid, store=store)
    run(flows.sender(plan.senders[0][1]), request_id="r1.s", store=store)
    for n in range(2):
        send_message(store, flows.RECEIVER, "r1", flows.TOPIC, flows.note("r1.out", n, 2), key=f"r1.out.{n}")
    got: Any = run(flows.receiver(plan.receivers[0][1]), request_id="r1", store=store)
    in_order = [("r1.s", 0), ("r1.s", 1), ("r1.out", 0), ("r1.out", 1)]  # its senders went first
    assert got["got"] == [flows.note(sender, n, 2) for sender, n in in_order]
    assert flows.invariants(store) == [] and flows.check_round(store, plan) == []
    return plan


def test_the_coordination_checks_notice_a_step_and_a_message_twice(tmp_path: Path) -> None:
    from idemflow import send
    from samples.chaos import coordination_flows as flows

    path, store = _sqlite(tmp_path, flows.TABLES)
    plan = _coordinated(store)
    assert _watch(path, flows.invariants) == []
    run(atomic(flows.NAPS, "n1", lambda tx: tx.increment("second")), request_id="x1", store=store)
    run(atomic(flows.MAIL, "r1", lambda tx: tx.increment("got:r1.s:0")), request_id="x2", store=store)
    # A step's send (send_message refuses a finished receiver): a second copy no one will take.
    run(send(flows.RECEIVER, "r1", flows.TOPIC, flows.note("r1.out", 1, 2)), request_id="again", store=store)
    found = [
        "nap n1: second applied 2 times",
        "receiver r1: message 0 of r1.s taken 2 times",
        "receiver r1: message 1 of r1.out taken and still waiting",
    ]
    assert _watch(path, flows.invariants) == [f"while running: {problem}" for problem in found]
    assert flows.check_round(store, plan) == [
        *found,
        "nap n1: steps applied 1 and 2 times",
        "receiver r1: 4 taken + 1 waiting, 5 message rows, 4 sent",
    ]


def test_the_coordination_checks_notice_an_early_timer_an_orphan_child_and_a_lost_message() -> None:
    from samples.chaos import coordination_flows as flows

    store = MemoryStore()
    plan = _coordinated(store)
    woke = get(store, flows.NAPS, "n1", "after")
    run(atomic(flows.NAPS, "n1", lambda tx: tx.put("after", woke - 1.0)), request_id="x1", store=store)
    run(flows.kid({"parent": "ghost", "verdict": "ok", "seconds": 0.0}), request_id="ghost.kid", store=store)
    lost = dataclasses.replace(plan, senders=[("r1.s", {**plan.senders[0][1], "count": 3})])
    problems = flows.check_round(store, lost)
    assert any(problem.startswith("nap n1: woke at") and "early" in problem for problem in problems), problems
    assert "parent ghost: kid without before" in problems
    assert "a child without a parent: ghost.kid" in problems
    assert "receiver r1: message 2 of r1.s never taken" in problems
    assert "receiver r1: 4 taken + 0 waiting, 4 message rows, 5 sent" in problems
    assert "chaos-sender r1.s: answered 2, its rows say 3" in problems


# -- the payments workload's checks notice money kept, refunded twice, or refunded never charged ------


def test_the_payment_checks_notice_money_kept_a_refund_twice_and_a_seat_too_many(tmp_path: Path) -> None:
    """Two bookings run against the provider over HTTP, as the workers call it: one completes, one
    pays and then aborts, sold out, and is refunded. Then the books and the tables are spoiled."""
    from idemflow import WorkflowAborted
    from idemflow.client import send_message
    from samples.chaos import payments_checks as checks
    from samples.chaos import payments_flows as flows
    from samples.chaos.payments_provider import Provider

    _path, store = _sqlite(tmp_path, flows.TABLES)
    provider = Provider(random.Random(1), late_share=0.0)
    bookings = [
        flows.booking_request("ok", "F1", 2, 2, "4242", 10, quick=True),
        flows.booking_request("gone", "F2", 2, 0, "4242", 20, quick=True),  # no meals: sold out
    ]
    with provider.serve() as url:
        flows.use_provider(url)
        try:
            for booking in bookings:
                rid = booking["id"]
                send_message(store, flows.BOOKING, rid, flows.CONFIRM, "yes", key=f"{rid}.confirm")
                try:
                    run(flows.booking(booking), request_id=rid, store=store)
                except WorkflowAborted as aborted:
                    assert (rid, aborted.reason) == ("gone", "sold out")
        finally:
            flows.use_provider(None)
    capacities = {"F1": (2, 2), "F2": (2, 0)}
    seen = {booking["id"]: status(store, flows.BOOKING, booking["id"]) for booking in bookings}
    ledger = provider.ledger()
    assert (len(ledger.charges), len(ledger.refunds)) == (2, 1)
    assert checks.invariants(provider, capacities)(store) == []
    assert checks.check_round(store, ledger, bookings, seen, 3).problems == []

    charge_ok, charge_gone = sorted(ledger.charges)  # ch-1 (ok), ch-2 (gone)
    provider.call("/refund", {"key": "again", "charge": charge_gone, "request": "gone"}, 0)
    provider.call("/refund", {"key": "ok-undo", "charge": charge_ok, "request": "ok"}, 0)
    provider.call("/refund", {"key": "stray", "charge": "ch-77", "request": "nobody"}, 0)
    provider.call("/charge", {"key": "k2", "request": "gone", "card": "4242", "amount": 20}, 0)
    run(atomic(flows.SEATS, "F1", lambda tx: tx.increment(flows.HELD)), request_id="x", store=store)
    found = checks.invariants(provider, capacities)(store)
    assert found == [
        "refund stray of ch-77, never charged (request nobody)",
        f"charge {charge_gone} of gone refunded 2 times",
        "gone charged 2 times: ['ch-2', 'ch-3']",
        f"ok completed, but its charge {charge_ok} was refunded",
        "gone aborted, but its charge ch-3 was never refunded",
        "payseats/F1: held 2, but 1 holders",
    ]
    problems = checks.check_round(store, provider.ledger(), bookings, seen, 3).problems
    assert "ok completed with 1 charges, 1 refunds" in problems
    assert "payseats/F1: 2 held, 1 completed bookings" in problems
