"""Workload 11: reading running requests, doing things together, cancelling — killed and faulty.

The job (:mod:`samples.chaos.reading_flows`) publishes a ``stage`` event six times over its life
and a stream of values it closes, starts a kid now and then, makes three quotes at once with
``all_of`` at an outside provider (:mod:`samples.chaos.reading_provider`: slow calls, transient
failures, answers lost after the call was made), and waits in ``any_of`` for a nudge or a sleep.
Worker processes (``python -m samples.chaos worker reading``: faulty stores that lose commit
answers and inject transient errors and conflicts, an exit right after some commits) run on one
SQLite store and queue, SIGKILLed at random and replaced (:class:`~samples._harness.Killer`) and
now and then right after the provider recorded their call; clients in threads submit 2-3
copies of every job through a store that also crashes.

Meanwhile, in the driver, outside the workers (:mod:`samples.chaos.reading_readers`):

- a **reader** per job follows its event with ``get_event`` (the first read waits for the event
  to be set; half the readers use ``aget_event``) and its kid's, and reads its stream from offset
  0 with ``read_stream`` (half with ``aread_stream``), reading on from the offset a timeout names;
- the **client nudges** half the jobs (``send_message``, twice under one key): as soon as their
  reader sees them started, once it sees them waiting in their ``any_of``, or half a second
  after their sleep ended (the sleep must win then, however late a worker takes the request);
- the **operator cancels** a share of the jobs with ``cancel(..., children=True)`` (half with
  ``acancel``): mid-stream, while their quotes are at the provider, while they wait in their
  ``any_of``, and at any moment after they were accepted; a kid a cascade did not reach (its
  ``start`` committed after the cascade read the job's steps) is cancelled by running the
  cascade again, as an operator does, and counted.

A monitor checks :func:`~samples.chaos.reading_checks.invariants` while the round runs, and
:func:`~samples.chaos.reading_checks.check_round` at its end; nothing may be dead-lettered.

>>> plan = make_plan(random.Random(3), "t-", quick=True)
>>> len(plan.jobs), sorted(set(plan.cancels.values()))
(10, ['any time', 'calling', 'streaming', 'waiting'])
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from idemflow import IdemflowError, RequestCancelledError
from idemflow.admin import acancel, cancel
from idemflow.client import (
    Pending,
    RunStatus,
    get_event,
    send_message,
    status,
    submit,
)
from idemflow.errors import MessageNotDeliveredError
from idemflow.stores import SqliteStore, Store
from idemflow.testing import FaultyStore
from idemflow.worker import Queue, open_queue
from samples._harness import Crashes, Fleet, Killer
from samples.chaos import reading_checks as checks
from samples.chaos import reading_flows as flows
from samples.chaos.coordination import Action, Clients, Job, copies
from samples.chaos.demos import RoundFiles
from samples.chaos.faults import CLIENT_FAULTS, RETRIED, random_plan
from samples.chaos.monitor import watching
from samples.chaos.reading_provider import Provider
from samples.chaos.reading_readers import Readers
from samples.chaos.report import Options, Totals

WORKERS = 2
RELAY_EVERY = 0.5
GRACE = 2.0
"""``submit``'s grace (as the coordination workload's: a client that crashed after its claim)."""
STREAMING, CALLING, WAITING, ANY_TIME = "streaming", "calling", "waiting", "any time"
EARLY, LATE = "early", "late"
"""When the operator cancels: once the reader saw the job half-way through its stream, once the
provider recorded one of its quotes (the others in flight), once the reader saw it wait in its
``any_of``, or 0-1.5 s after it was accepted."""


@dataclass(frozen=True)
class Plan:
    """The round's jobs, and which of them the operator cancels when."""

    jobs: list[flows.JobRequest]
    cancels: dict[str, str]
    nudges: dict[str, str] = field(default_factory=dict)
    """When the client nudges each nudged job: ``early`` as soon as its reader sees it started
    (before its ``any_of``: the message waits for the receive), ``waiting`` once it waits in
    it, ``late`` half a second after its sleep ended (then the sleep must win, however late a
    worker takes the request: a message sent after the timeout loses to it)."""


def make_plan(rng: random.Random, prefix: str, quick: bool) -> Plan:
    """10 jobs (32 in a full run) writing 6-12 values (10-40); 4 cancelled, one of each kind (8),
    three in four of those with a kid, a third of the others; half of the jobs not cancelled while
    waiting are nudged, a third of those early, a third once they wait, a third late."""
    count, each = (10, 1) if quick else (32, 2)
    ids = [f"{prefix}j{n}" for n in range(count)]
    order = list(ids)
    rng.shuffle(order)
    kinds = [STREAMING, CALLING, WAITING, ANY_TIME]
    cancels = {rid: kinds[n // each] for n, rid in enumerate(order[: each * len(kinds)])}
    jobs, nudges = [], {}
    for rid in ids:
        values = rng.randint(6, 12) if quick else rng.randint(10, 40)
        kid = rng.random() < (0.75 if rid in cancels else 0.35)
        nudged = cancels.get(rid) != WAITING and rng.random() < 0.5
        mark = rng.randrange(1000)
        if nudged:
            nudges[rid] = rng.choice([EARLY, WAITING, LATE])
        jobs.append(flows.job_request(rid, values=values, mark=mark, kid=kid, nudged=nudged, quick=quick))
    return Plan(jobs, cancels, nudges)


def _submitting(req: flows.JobRequest) -> Action:
    def action(store: Store, queue: Queue, key: str) -> None:
        submit(flows.job(req), request_id=req["id"], store=store, queue=queue, signing_key=key, grace=GRACE)

    return action


@dataclass
class Operator:
    """The client's nudges, the operator's cancels and the SIGKILLs right after a call was made.

    The nudges and the cancels go through the clients' faulty store (lost answers, transient
    errors, conflicts, crashes before and after the commit), and are tried again as a client or
    an operator would; both are safe to repeat."""

    store: Store
    faulty: Store
    plan: Plan
    seen: checks.Seen
    fleet: Fleet
    rng: random.Random
    queue_url: str
    key: str
    kills: int
    """SIGKILLs right after a recorded call left this round."""
    kill_share: float = 0.05
    boundary_kills: int = 0
    cascades: int = 0
    latencies: list[tuple[float, float]] = field(default_factory=list)
    """Per cancel: how long ``cancel(..., children=True)`` took, then how long a handle's
    ``result()`` took to raise ``RequestCancelledError``."""
    _started: set[tuple[str, str]] = field(default_factory=set)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def at_recorded(self, caller: int, request: str) -> None:
        """The provider's hook: cancel a job planned to be cancelled while calling; now and then
        SIGKILL the caller (its call made, the answer never memoized)."""
        if self.plan.cancels.get(request) == CALLING:
            self.spawn(self._cancel, request)
            return
        with self._lock:
            if self.kills <= 0 or self.rng.random() >= self.kill_share:
                return
            child = next(
                (c for c in self.fleet.children if c.process is not None and c.process.pid == caller), None
            )
            if child is None or child.process is None or child.process.poll() is not None:
                return
            self.kills -= 1
            self.boundary_kills += 1
        self.fleet.kill(child)

    def at_stage(self, req: flows.JobRequest, stage: int) -> None:
        """A reader saw ``req`` reach ``stage``: nudge it, or cancel it, as the plan says."""
        kind = self.plan.cancels.get(req["id"])
        if (stage, kind) in ((1, STREAMING), (3, WAITING)):
            self.spawn(self._cancel, req["id"])
        when = self.plan.nudges.get(req["id"])
        if (when, stage) in ((EARLY, 0), (WAITING, 3), (LATE, 3)):
            self.spawn(self._nudge, req["id"], req["patience"] + 0.5 if when == LATE else 0.0)

    def start(self, clients: Clients) -> None:
        """The cancels at any time: 0-1.5 s after the job was accepted."""
        for rid, kind in sorted(self.plan.cancels.items()):
            if kind == ANY_TIME:
                self.spawn(self._cancel, rid, clients, self.rng.uniform(0.0, 1.5))

    def spawn(self, target: Callable[..., None], rid: str, *args: object) -> None:
        """Run ``target(rid, *args)`` on a thread of its own, once per job and target."""
        with self._lock:
            if (target.__name__, rid) in self._started:
                return
            self._started.add((target.__name__, rid))
            thread = threading.Thread(target=target, args=(rid, *args), daemon=True)
            self._threads.append(thread)
        thread.start()

    def _nudge(self, rid: str, delay: float) -> None:
        time.sleep(delay)
        self.seen.tried[rid] = time.time()  # the message's time is later: it is taken as it is sent
        queue = open_queue(self.queue_url)
        try:
            for _copy in range(2):  # a duplicate under the same key: taken once
                for _attempt in range(100):
                    try:
                        send_message(
                            self.faulty,
                            flows.JOB,
                            rid,
                            flows.NUDGE,
                            flows.nudge_of(rid),
                            key=f"{rid}.nudge",
                            queue=queue,
                            signing_key=self.key,
                        )
                    except MessageNotDeliveredError:
                        return  # it ended meanwhile (cancelled): nothing to nudge
                    except RETRIED:
                        continue
                    self.seen.nudged.setdefault(rid, time.time())
                    break
        finally:
            queue.close()

    def _cancel(self, rid: str, clients: Clients | None = None, delay: float = 0.0) -> None:
        deadline = time.monotonic() + 60
        while clients is not None and rid not in clients.accepted and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        started = time.monotonic()
        was = self._cascade(rid, deadline)
        if was is None:
            self.seen.note(f"{rid}: the operator's cancel never went through")
            return
        cancelled = time.monotonic()
        stage = checks.stage_of(get_event(self.store, flows.JOB, rid, flows.STAGE, timeout=0))
        length = len(checks.stored_stream(self.store, rid, 0.0))
        self.seen.at_cancel[rid] = (-1 if stage is None else stage, length)
        self.seen.cancelled[rid] = was.value
        with contextlib.suppress(RequestCancelledError):  # at once, not after its timeout
            Pending(self.store, flows.JOB, rid).result(timeout=30.0)
        with self._lock:
            self.latencies.append((cancelled - started, time.monotonic() - cancelled))
        req = next(job for job in self.plan.jobs if job["id"] == rid)
        for _again in range(5):  # a kid whose start committed after the cascade read the steps
            time.sleep(1.0)
            kid = status(self.store, flows.KID, flows.kid_id(rid)).status
            if not req["kid"] or kid is RunStatus.CANCELLED or kid.final:
                return
            if kid is RunStatus.RUNNING:
                self.seen.missed.add(rid)
                self._cascade(rid, deadline)

    def _cascade(self, rid: str, deadline: float) -> RunStatus | None:
        reason = f"operator ({self.plan.cancels[rid]})"
        while time.monotonic() < deadline:
            try:
                with self._lock:
                    self.cascades += 1
                    blocking = self.cascades % 2 == 0
                if blocking:
                    return cancel(self.faulty, flows.JOB, rid, reason=reason, children=True)
                return asyncio.run(acancel(self.faulty, flows.JOB, rid, reason=reason, children=True))
            except RETRIED:  # its answer lost, or it 'crashed': again (a cancel is safe to run twice)
                continue
            except IdemflowError:  # not claimed yet, or the store was busy: again, as an operator would
                time.sleep(0.1)
        return None

    def join(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()


def _settle(store: Store, plan: Plan, clients: list[threading.Thread], deadline: float) -> list[str]:
    """Wait until the clients are done and every job and kid ended (a cancelled one counts), or
    ``deadline``; the requests that never did."""
    left = {(flows.JOB, req["id"]) for req in plan.jobs}
    left |= {(flows.KID, flows.kid_id(req["id"])) for req in plan.jobs if req["kid"]}
    while left and time.monotonic() < deadline:
        for workflow, request_id in sorted(left):
            found = status(store, workflow, request_id).status
            parent = request_id.removesuffix(".kid")
            gone = (
                found is RunStatus.UNKNOWN and status(store, flows.JOB, parent).status is RunStatus.CANCELLED
            )
            if found.final or found in (RunStatus.FAILED, RunStatus.CANCELLED) or gone:
                left.discard((workflow, request_id))
        if left or any(thread.is_alive() for thread in clients):
            time.sleep(0.25)
    for thread in clients:
        thread.join()
    return [
        f"{workflow} {request_id} never ended: {status(store, workflow, request_id)}"
        for workflow, request_id in sorted(left)
    ]


def reading_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    """One round (see the module's docstring)."""
    files = RoundFiles.fresh("reading", opts, rng, round_no)
    round_rng = random.Random(files.seed)
    store = SqliteStore(files.path)
    plan = make_plan(round_rng, f"r{round_no}-", opts.quick)
    jobs = [Job(req["id"], _submitting(req)) for req in plan.jobs]
    placed = copies(jobs, round_rng)
    key = secrets.token_hex(16)
    faulty = FaultyStore(
        store, random_plan(random.Random(round_rng.random()), opts.fault_rate, CLIENT_FAULTS)
    )
    clients = Clients(faulty, files.queue, key)
    provider = Provider(random.Random(round_rng.random()))
    seen = checks.Seen()
    argv = ["-m", "samples.chaos", "worker", "reading", "--store", f"sqlite:{files.path}"]
    argv += ["--queue", files.queue, "--log", str(files.log), "--fault-rate", str(opts.fault_rate)]
    argv += ["--die", "0.01", "--relay-every", str(RELAY_EVERY)]
    with provider.serve() as url:
        fleet = Fleet({"IDEMFLOW_SIGNING_KEY": key, flows.PROVIDER_ENV: url})
        operator = Operator(
            store,
            faulty,
            plan,
            seen,
            fleet,
            random.Random(round_rng.random()),
            files.queue,
            key,
            kills=2 if opts.quick else 6,
        )
        provider.hook = operator.at_recorded
        readers = Readers(store, plan.jobs, seen, operator.at_stage)
        total = sum(req["values"] for req in plan.jobs)
        killer = Killer(fleet, 4 if opts.quick else 12, total, random.Random(round_rng.random()))
        invariants = checks.invariants(provider, plan.jobs)
        try:
            with watching(files.path, invariants, every=0.3) as monitor:
                try:
                    for _ in range(WORKERS):
                        fleet.start("worker", argv)
                    readers.start()
                    with killer.watching(lambda: readers.read[0]):
                        threads = clients.send(placed, 2.0 if opts.quick else 10.0)
                        operator.start(clients)
                        deadline = time.monotonic() + (60 if opts.quick else 150)
                        unfinished = _settle(store, plan, threads, deadline)
                        operator.join()
                finally:
                    fleet.stop()
                    readers.stop()
        finally:
            provider.hook = None
    books = provider.books()
    verdict = checks.check_round(store, plan.jobs, seen, books)
    store.close()
    crashes = Crashes(dict(fleet.kills), dict(fleet.exits), 0)
    problems = [*clients.problems, *unfinished, *verdict.problems]
    files.tally(totals, len(plan.jobs), len(placed), crashes, monitor, problems)
    totals.faults += len(faulty.injected)
    totals.events += sum(len(values) for values in seen.events.values())
    totals.values += sum(len(values) for values in seen.tokens.values())
    totals.quotes += len(books.made)
    totals.repeats += books.repeats
    totals.cancels += len(seen.cancelled)
    totals.kids_cancelled += verdict.kids_cancelled
    totals.nudges += verdict.nudges_won
    ends = ", ".join(f"{count} {end}" for end, count in sorted(verdict.ends.items()))
    first = sorted(
        plan.cancels[rid] for rid, was in seen.cancelled.items() if was == RunStatus.COMPLETED.value
    )
    ends += f" (cancelled {', '.join(first)})" if first else ""
    print(
        f"[chaos]   reading round {round_no}: {ends}; {len(books.made)} quotes made, "
        f"{books.repeats} repeats answered from the books, {books.transient} transient refusals, "
        f"{books.lost} answers lost, {books.late} late; {operator.boundary_kills} kills after a call "
        f"was made; any_of: {verdict.nudges_won} nudges won, {verdict.sleeps_won} sleeps "
        f"({verdict.nudges_late} nudged only after their sleep ended); "
        f"cancels took {_spread(operator.latencies, 0)}, "
        f"result() raised {_spread(operator.latencies, 1)} after; "
        f"{len(seen.cancelled)} cancelled ({verdict.kids_cancelled} kids with them, "
        f"{len(seen.missed)} kids reached by a second cascade; {verdict.went_on} published more "
        f"after the cancel, their worker going on to its next outside call); "
        f"{seen.resumed} stream reads resumed",
        flush=True,
    )


def _spread(latencies: list[tuple[float, float]], which: int) -> str:
    """The median and the longest of one column of ``latencies``, in ms.

    >>> _spread([(0.01, 0.002), (0.03, 0.001), (0.02, 0.004)], 0)
    '20-30 ms'
    """
    found = sorted(each[which] for each in latencies)
    if not found:
        return "-"
    return f"{found[len(found) // 2] * 1000:.0f}-{found[-1] * 1000:.0f} ms"
