"""Workload 9: a booking saga that pays through an outside provider — down, declining, late, killed.

The saga (:mod:`samples.chaos.payments_flows`): hold a seat, charge the card through the payment
provider with ``effect(charge, compensate=refund, timeout=, retry=StepRetry(...))``, wait for the
customer's confirmation, take a meal (sold out for some). The provider
(:mod:`samples.chaos.payments_provider`) is an HTTP service in this driver process, outside the
workers, keeping its own books by idempotency key; while the round runs it

- goes down for 2-30 s at a time (0.5-2 s in a quick run): every call answered 503, retried by
  the policy as delayed continuations;
- declines one card in ten (402: non-retryable, the request is compensated and ends ``aborted``
  without trying again);
- answers one call in ten later than the effect's timeout (the money moved, the attempt failed);
- SIGKILLs the calling worker process right at an effect boundary now and then: as a charge or a
  refund arrives (nothing recorded) or once it is recorded (the answer never sent).

Worker processes (``python -m samples.chaos worker payments``: faulty stores that lose commit
answers and inject transient errors and conflicts, an exit right after some commits) run on one
SQLite store and queue and are also SIGKILLed at random (:class:`~samples._harness.Killer`);
clients in threads submit 2-3 copies of every request (some racing) and send the confirmations
(2-3 copies each, one key) through a store that also crashes; a fifth of the requests are never
confirmed. The operator aborts requests in flight with :func:`idemflow.admin.abort_request`: some
while they wait for their confirmation, at any moment, while their charge is in flight (the
provider answers it late and the abort starts as it is recorded), and right after their worker
was SIGKILLed inside the charge, which the provider writes to its books a moment later.

Both gaps of the library this workload once found are closed, and the quick run (the test
suite's) meets them too: an operator's abort racing a charge in flight, or one right after the
worker died inside it, undoes the call again once it can no longer land (so a charge that lands
late is refunded), and a worker whose commit of a failed attempt's count loses its answer reads
its own write back as such.

The monitor checks :func:`~samples.chaos.payments_checks.invariants` while the round runs, and
:func:`~samples.chaos.payments_checks.check_round` at its end: every charge belongs to a completed
request or is refunded exactly once, never a refund twice or of a charge never made, every request
ended, seats and meals held equal the completed bookings; nothing dead-lettered.

>>> plan = make_plan(random.Random(3), "t-", quick=True)
>>> len(plan.bookings), sorted(set(plan.aborts.values()))
(10, ['any time', 'killed mid-charge', 'mid-charge', 'waiting'])
"""

from __future__ import annotations

import contextlib
import math
import random
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from idemflow import CompensationError, IdemflowError
from idemflow.admin import abort_request as abort
from idemflow.client import RequestStatus, RunStatus, send_message, status, submit
from idemflow.errors import MessageNotDeliveredError
from idemflow.stores import SqliteStore, Store
from idemflow.testing import FaultyStore
from idemflow.worker import Queue
from samples._harness import Crashes, Fleet, Killer
from samples.chaos import payments_checks as checks
from samples.chaos import payments_flows as flows
from samples.chaos.coordination import Action, Clients, Job, copies
from samples.chaos.demos import RoundFiles
from samples.chaos.faults import CLIENT_FAULTS, random_plan
from samples.chaos.monitor import watching
from samples.chaos.payments_provider import Outages, Provider
from samples.chaos.report import Options, Totals

WORKERS = 2
RELAY_EVERY = 0.5
WAITING, MID_CHARGE, ANY_TIME, KILLED = "waiting", "mid-charge", "any time", "killed mid-charge"
"""When the operator aborts: while the request waits for its confirmation, while its charge is in
flight, at a random moment after it was submitted, or right after its worker was SIGKILLed inside
the charge (which lands at the provider a while later: the undo must still refund it)."""


@dataclass
class Plan:
    """The round's bookings, which of them are never confirmed, and which the operator aborts."""

    bookings: list[flows.Booking]
    unconfirmed: frozenset[str]
    aborts: dict[str, str]

    def capacities(self) -> dict[str, tuple[int, int]]:
        return {booking["flight"]: (booking["seats"], booking["meals"]) for booking in self.bookings}


def make_plan(rng: random.Random, prefix: str, quick: bool) -> Plan:
    """10 bookings on 2 flights (40 on 4); a flight's seats are 90% of its bookings, its meals
    60%; one card in ten declined; a fifth never confirmed, half of those aborted by the operator
    while they wait, one (three in a full run) aborted mid-charge, one (three) at any time, and
    two (three) right after their worker was SIGKILLed inside the charge."""
    count, flights = (10, 2) if quick else (40, 4)
    on: Counter[int] = Counter(n % flights for n in range(count))
    bookings = []
    for n in range(count):
        flight = n % flights
        card = flows.DECLINED_CARD if rng.random() < 0.1 or n == 3 else f"42424242{rng.randrange(10**8):08d}"
        seats, meals = math.ceil(on[flight] * 0.9), math.ceil(on[flight] * 0.6)
        booking = flows.booking_request(
            f"{prefix}b{n}", f"{prefix}F{flight}", seats, meals, card, rng.randint(20, 400), quick=quick
        )
        bookings.append(booking)
    payers = [b["id"] for b in bookings if b["card"] != flows.DECLINED_CARD]
    rng.shuffle(payers)
    unconfirmed = payers[: max(2, count // 5)]
    aborts = dict.fromkeys(unconfirmed[: len(unconfirmed) // 2], WAITING)
    each = 1 if quick else 3
    at = len(unconfirmed)
    aborts.update(dict.fromkeys(payers[at : at + each], MID_CHARGE))
    aborts.update(dict.fromkeys(payers[at + each : at + 2 * each], ANY_TIME))
    aborts.update(dict.fromkeys(payers[at + 2 * each : at + 2 * each + (2 if quick else 3)], KILLED))
    return Plan(bookings, frozenset(unconfirmed), aborts)


GRACE = 3.0
"""The outbox's grace: a client that crashed after its claim and retries at once sends nothing (a
copy within ``submit``'s takeover time enqueues nothing), so the relay sends the continuation,
this long after the claim; the default (30 s) would stall a round that long."""


def _submitting(booking: flows.Booking) -> Action:
    def action(store: Store, queue: Queue, key: str) -> None:
        m = flows.booking(booking)
        submit(m, request_id=booking["id"], store=store, queue=queue, signing_key=key, grace=GRACE)

    return action


def _confirming(request_id: str) -> Action:
    def action(store: Store, queue: Queue, key: str) -> None:
        with contextlib.suppress(MessageNotDeliveredError):  # it ended meanwhile: nothing to confirm
            send_message(
                store,
                flows.BOOKING,
                request_id,
                flows.CONFIRM,
                "yes",
                key=f"{request_id}.confirm",
                queue=queue,
                signing_key=key,
            )

    return action


def make_jobs(plan: Plan, rng: random.Random) -> list[Job]:
    """The submissions in a random order, each confirmation 2-8 jobs after its booking (its
    first copy waits until the booking was accepted)."""
    jobs = [Job(booking["id"], _submitting(booking)) for booking in plan.bookings]
    rng.shuffle(jobs)
    for booking in plan.bookings:
        if booking["id"] in plan.unconfirmed:
            continue
        at = next(n for n, job in enumerate(jobs) if job.request_id == booking["id"])
        confirm = Job(f"{booking['id']}.confirm", _confirming(booking["id"]), frozenset({booking["id"]}))
        jobs.insert(min(len(jobs), at + rng.randint(2, 8)), confirm)
    return jobs


@dataclass
class Operator:
    """The operator's aborts, and the SIGKILLs at effect boundaries the provider's hook asks for."""

    store: Store
    plan: Plan
    fleet: Fleet
    rng: random.Random
    kills: int
    """SIGKILLs at effect boundaries left this round."""
    kill_share: float = 0.08
    issued: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    boundary_kills: Counter[str] = field(default_factory=Counter)
    _threads: list[threading.Thread] = field(default_factory=list)
    _killed: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def at_boundary(self, call: str, moment: str, caller: int, request: str) -> None:
        """The provider's hook: abort a request whose charge is in flight; SIGKILL the caller."""
        if (call, moment) == ("charge", "recorded") and self.plan.aborts.get(request) == MID_CHARGE:
            self._spawn(request, MID_CHARGE, 0.0)
        if (call, moment) == ("charge", "arrived") and self.plan.aborts.get(request) == KILLED:
            if self._kill_caller(caller, "charge arrived, then abort", request):
                self._spawn(request, KILLED, 0.0)  # at once: the charge has not landed yet
            return
        with self._lock:
            if self.kills <= 0 or self.rng.random() >= self.kill_share:
                return
            child = next(
                (c for c in self.fleet.children if c.process is not None and c.process.pid == caller), None
            )
            if child is None or child.process is None or child.process.poll() is not None:
                return  # the driver's own call (an operator's refund), or one that died already
            self.kills -= 1
            self.boundary_kills[f"{call} {moment}"] += 1
        self.fleet.kill(child)

    def _kill_caller(self, caller: int, why: str, request: str) -> bool:
        """SIGKILL the worker process making a call (once per request); False if the caller is not
        a live worker (the driver's own call) or the request was handled already."""
        with self._lock:
            if request in self._killed:
                return False
            child = next(
                (c for c in self.fleet.children if c.process is not None and c.process.pid == caller), None
            )
            if child is None or child.process is None or child.process.poll() is not None:
                return False
            self._killed.add(request)
            self.boundary_kills[why] += 1
        self.fleet.kill(child)
        return True

    def start(self, clients: Clients) -> None:
        """The aborts that do not wait for the provider: those of waiting requests, and (full run)
        those at any time, a random 0-2 s after the request was accepted."""
        for request, kind in sorted(self.plan.aborts.items()):
            if kind == WAITING:
                self._spawn(request, kind, 0.0)
            elif kind == ANY_TIME:
                self._spawn(request, kind, self.rng.uniform(0.0, 2.0), clients)

    def _spawn(self, request: str, kind: str, delay: float, clients: Clients | None = None) -> None:
        thread = threading.Thread(
            target=self._abort, args=(request, kind, delay, clients), name=f"operator-{request}", daemon=True
        )
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _abort(self, request: str, kind: str, delay: float, clients: Clients | None) -> None:
        deadline = time.monotonic() + 120
        while clients is not None and request not in clients.accepted and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        while kind == WAITING and time.monotonic() < deadline:  # until it waits for its confirmation
            found = status(self.store, flows.BOOKING, request)
            if found.status.final or flows.CONFIRM in (found.waiting or ""):
                break
            time.sleep(0.05)
        with self._lock:
            self.issued[kind] += 1
        while time.monotonic() < deadline:
            try:
                ended = abort(
                    self.store, flows.WORKFLOWS, flows.BOOKING, request, reason=f"operator ({kind})"
                )
            except CompensationError:
                outcome = "failed (refund owed)"
            except IdemflowError:  # not submitted yet, or the store was busy: as an operator would, again
                time.sleep(0.1)
                continue
            else:
                outcome = ended.status.value
            with self._lock:
                self.outcomes[outcome] += 1
            return
        with self._lock:
            self.outcomes["never done"] += 1

    def join(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()


def _settle(store: Store, plan: Plan, deadline: float) -> dict[str, RequestStatus]:
    """Wait until every booking ended (or failed), or ``deadline``; their statuses."""
    seen: dict[str, RequestStatus] = {}
    while time.monotonic() < deadline:
        for booking in plan.bookings:
            if booking["id"] not in seen:
                found = status(store, flows.BOOKING, booking["id"])
                if found.status.final or found.status is RunStatus.FAILED:
                    seen[booking["id"]] = found
        if len(seen) == len(plan.bookings):
            break
        time.sleep(0.25)
    return {b["id"]: seen.get(b["id"]) or status(store, flows.BOOKING, b["id"]) for b in plan.bookings}


def payments_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    """One round (see the module's docstring)."""
    files = RoundFiles.fresh("payments", opts, rng, round_no)
    round_rng = random.Random(files.seed)
    store = SqliteStore(files.path)
    store.create_tables(*flows.TABLES)
    plan = make_plan(round_rng, f"r{round_no}-", opts.quick)
    placed = copies(make_jobs(plan, round_rng), round_rng)
    key = secrets.token_hex(16)
    faulty = FaultyStore(
        store, random_plan(random.Random(round_rng.random()), opts.fault_rate, CLIENT_FAULTS)
    )
    clients = Clients(faulty, files.queue, key)
    late = (0.6, 1.2) if opts.quick else (1.5, 3.0)
    provider = Provider(random.Random(round_rng.random()), late_share=0.1, late_seconds=late)
    provider.slow_requests |= {request for request, kind in plan.aborts.items() if kind == MID_CHARGE}
    lag = 0.25 if opts.quick else 0.6  # within the charge's timeout (0.4 s, 1 s): it may still land
    provider.landing_late |= {request: lag for request, kind in plan.aborts.items() if kind == KILLED}
    lengths, gaps = ((0.5, 2.0), (0.3, 1.0)) if opts.quick else ((2.0, 30.0), (3.0, 12.0))
    argv = ["-m", "samples.chaos", "worker", "payments", "--store", f"sqlite:{files.path}"]
    argv += ["--queue", files.queue, "--log", str(files.log), "--fault-rate", str(opts.fault_rate)]
    argv += ["--die", "0.01", "--relay-every", str(RELAY_EVERY)]
    with provider.serve() as url:
        flows.use_provider(url)
        fleet = Fleet({"IDEMFLOW_SIGNING_KEY": key, flows.PROVIDER_ENV: url})
        operator = Operator(store, plan, fleet, random.Random(round_rng.random()), 2 if opts.quick else 6)
        provider.hook = operator.at_boundary
        killer = Killer(fleet, 3 if opts.quick else 8, len(plan.bookings), random.Random(round_rng.random()))
        outages = Outages(provider, random.Random(round_rng.random()), lengths, gaps)
        try:
            with watching(files.path, checks.invariants(provider, plan.capacities())) as monitor:
                try:
                    for _ in range(WORKERS):
                        fleet.start("worker", argv)
                    with killer.watching(provider.reached):
                        with outages:  # ends with the clients: an outage in progress is lived through
                            threads = clients.send(placed, 2.0 if opts.quick else 20.0)
                            operator.start(clients)
                            for thread in threads:
                                thread.join()
                        seen = _settle(store, plan, time.monotonic() + (60 if opts.quick else 150))
                        operator.join()
                finally:
                    fleet.stop()
        finally:
            provider.hook = None
            flows.use_provider(None)
    ledger = provider.ledger()
    crashes = Crashes(dict(fleet.kills), dict(fleet.exits), 0)
    logged = files.log.stat().st_size if files.log.exists() else 0
    repeats = 3 + sum(crashes.kills.values()) + sum(crashes.exits.values()) + logged + len(faulty.injected)
    verdict = checks.check_round(store, ledger, plan.bookings, seen, repeats)
    store.close()
    submitted = sum(1 for job, _first in placed if not job.request_id.endswith(".confirm"))
    problems = [*clients.problems, *verdict.problems]
    files.tally(totals, len(plan.bookings), submitted, crashes, monitor, problems)
    totals.faults += len(faulty.injected)
    totals.charges += len(ledger.charges)
    totals.refunds += len(ledger.refunds)
    totals.declines += len(ledger.declines)
    totals.outages += outages.count
    totals.late += ledger.late
    totals.aborts += sum(operator.issued.values())
    totals.owed += verdict.owed
    ends = ", ".join(f"{count} {end}" for end, count in sorted(verdict.ends.items()))
    print(
        f"[chaos]   payments round {round_no}: {ends}; {len(ledger.charges)} charges, "
        f"{len(ledger.refunds)} refunds, {sum(ledger.declines.values())} declined calls, "
        f"{ledger.repeats} repeats answered from the books, {ledger.late} late answers, "
        f"{ledger.outage_answers} calls refused in {outages.count} outages ({outages.seconds:.0f} s); "
        f"kills at effect boundaries {dict(operator.boundary_kills)}; operator aborts "
        f"{dict(operator.issued)} -> {dict(operator.outcomes)}",
        flush=True,
    )
