"""Workload 3: version 2 of the transfer workflow deployed while version 1 requests are in flight.

Worker processes (``python -m samples.chaos worker transfer --hold ...``: a faulty store, an exit
right after some commits, SIGKILLed at random throughout) share one SQLite store and queue with
clients in threads that ``submit`` through a faulty store (crashes, lost answers, transient
errors, conflicts). A round goes through a deploy (docs/deploying.md), the wrong way round first:

1. clients submit version 1 to workers holding version 1;
2. the workers are replaced by workers holding only version 2 while clients still submit version 1:
   those requests must wait (``status().waiting`` says for what), never run on version 2;
3. the clients switch to version 2 (copies of requests that started on version 1 too);
4. the workers are replaced by workers holding both, and everything finishes.

One request in eight carries an input larger than the queue's body limit. A client whose submit
'crashed' gives the copy up half the time (its process died), and one request in ten is sent only
by clients that die between its claim and the send: the outbox relay must send those
continuations. Before the last deploy, every version 1 request in flight must say it waits for a
worker holding version 1 (``status().waiting``). At the end: the transfer sample's ``check`` and
``ledger``; every request finished on the version it started with (its result and
``status().version`` say so); the screenings per source account equal the requests claimed on
version 2; no version 2 request ever waited; nothing dead-lettered.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

from returns.result import Failure, Success

from idemflow import WorkflowAborted, run
from idemflow.client import RequestStatus, RunStatus, status, submit
from idemflow.stores import SqliteStore, Store
from idemflow.testing import FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue, Queue, open_queue
from samples._harness import Crashes, Fleet
from samples.chaos.demos import RoundFiles
from samples.chaos.faults import CLIENT_FAULTS, RETRIED, random_plan
from samples.chaos.monitor import money_holds, watching
from samples.chaos.report import Options, Totals
from samples.chaos.versions import TABLES, VERSIONS, ChaosRequest, padded, plain, screens
from samples.transfer.workflows import Outcome, Receipt, TransferRequest, check, ledger, open_account


@dataclass(frozen=True)
class Phase:
    """One stretch of a round: what the clients submit, what the workers hold."""

    clients: int
    """The version the clients submit."""
    workers: tuple[int, ...] | None
    """The versions the workers are deployed to hold as the phase starts (None: no change)."""
    share: float
    """Its share of the submissions."""
    seconds: float
    """How long its submissions are spread over in a quick round (:data:`FULL` times that in a
    full one)."""


PHASES = (
    Phase(1, (1,), 0.30, 0.6),
    Phase(1, (2,), 0.20, 0.3),
    Phase(2, None, 0.30, 0.5),
    Phase(2, (1, 2), 0.20, 0.3),
)
FULL = 5.0
WORKERS = 2
VERSION_WAIT = 0.5
"""``--version-wait`` of the workers: how soon a request they cannot run is offered again."""
RELAY_EVERY = 0.3
GRACE = 1.0
"""``submit``'s grace: how soon a relay sends a continuation its client did not send."""
GIVE_UP = 0.5
"""The chance that a client whose submit crashed gives that copy up instead of retrying."""
DOOMED = 10
"""One request in this many is sent only by clients that die between its claim and the send:
the outbox relay alone sends its continuation."""
WAITING = "waiting for a worker holding version 1 of 'transfer'"
WAIT_NOTED = 30.0
"""Seconds the version 1 requests get, once only version 2 workers run, for a worker to take each
and note what it waits for. It ends as soon as every one says why; a bound that a loaded machine
meets (a redelivery after a SIGKILL, workers starting) would report a request that was fine."""
UNCLAIMED = (RunStatus.UNKNOWN, RunStatus.PENDING)


class DyingQueue(MemoryQueue):
    """Where a client that dies right before its send sends: the process is gone (a crash)."""

    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise SimulatedCrash("the client died before sending the continuation")


class Workers:
    """The worker processes: deploys replace the whole fleet (rolling: the new one starts, then the
    old one stops, finishing what it holds); :meth:`killing` SIGKILLs one at random now and then
    and restarts those that exited on their own."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv, self.env = argv, env
        self.fleets: list[Fleet] = []
        self.deploys = 0
        self._lock = threading.Lock()

    def deploy(self, versions: Sequence[int]) -> None:
        fresh = Fleet(self.env)
        for _ in range(WORKERS):
            fresh.start("worker", [*self.argv, "--hold", ",".join(map(str, versions))])
        with self._lock:
            old = self.fleets[-1] if self.fleets else None
            self.fleets.append(fresh)
        if old is not None:
            old.stop()
            self.deploys += 1

    @contextlib.contextmanager
    def killing(self, rng: random.Random, gap: tuple[float, float]) -> Iterator[None]:
        stop = threading.Event()

        def loop() -> None:
            due = time.monotonic() + rng.uniform(*gap)
            while not stop.wait(0.02):
                with self._lock:
                    if not self.fleets:
                        continue
                    fleet = self.fleets[-1]
                    fleet.revive()
                    if time.monotonic() >= due:
                        fleet.kill(rng.choice(fleet.children))
                        due = time.monotonic() + rng.uniform(*gap)

        thread = threading.Thread(target=loop, name="chaos-killer", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def stop(self) -> None:
        with self._lock:
            fleets = list(self.fleets)
        for fleet in fleets:
            fleet.stop()

    def crashes(self) -> Crashes:
        kills: Counter[str] = Counter()
        exits: Counter[tuple[str, int]] = Counter()
        for fleet in self.fleets:
            kills.update(fleet.kills)
            exits.update(fleet.exits)
        return Crashes(dict(kills), dict(exits), 0)


@dataclass
class Clients:
    """Client threads submitting through a faulty store; what they tried, by request."""

    faulty: FaultyStore
    queue_url: str
    key: str
    rng: random.Random
    doomed: set[str] = field(default_factory=set)
    """Requests whose clients all die between the claim and the send (:data:`DOOMED`)."""
    tried: dict[str, list[int]] = field(default_factory=dict)
    """The versions of a request's copies up to its first accepted one: one of them claimed it."""
    accepted: set[str] = field(default_factory=set)
    abandoned: int = 0
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, batch: Sequence[tuple[str, ChaosRequest]], version: int, seconds: float) -> None:
        """Submit ``batch`` on ``version`` from 4 threads, spread over ``seconds``."""
        queue = open_queue(self.queue_url)
        start, gap = time.monotonic(), seconds / max(1, len(batch))
        todo = list(enumerate(batch))[::-1]

        def client() -> None:
            while True:
                with self._lock:
                    if not todo:
                        return
                    n, (request_id, req) = todo.pop()
                time.sleep(max(0.0, start + n * gap - time.monotonic()))
                self._one(queue, request_id, req, version)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        queue.close()

    def _one(self, queue: Queue, request_id: str, req: ChaosRequest, version: int) -> None:
        doomed = request_id in self.doomed
        for _attempt in range(200):
            with self._lock:
                if request_id not in self.accepted:
                    self.tried.setdefault(request_id, []).append(version)
                give_up = self.rng.random() < GIVE_UP
            try:
                submit(
                    VERSIONS[version](req),
                    request_id=request_id,
                    store=self.faulty,
                    queue=DyingQueue() if doomed else queue,
                    signing_key=self.key,
                    grace=GRACE,
                )
            except SimulatedCrash:
                if give_up or doomed:  # the client died: if the claim committed, the relay sends
                    with self._lock:
                        self.abandoned += 1
                    return
                continue
            except RETRIED:
                continue
            with self._lock:
                self.accepted.add(request_id)
            return
        with self._lock:
            self.problems.append(f"{request_id}: submit never went through")


def transfer_deploy(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from samples.transfer.demo import Settings, make_requests, make_submissions

    files = RoundFiles.fresh("deploy", opts, rng, round_no, visibility=1.0)
    scale = 1.0 if opts.quick else FULL
    settings = Settings(path=files.path, workers=4, requests=32 if opts.quick else 120, accounts=6)
    store = SqliteStore(files.path)
    store.create_tables(*TABLES)
    opening = {f"acct-{n}": settings.balance for n in range(settings.accounts)}
    for name, balance in opening.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    round_rng = random.Random(files.seed)
    requests = padded(make_requests(settings, round_rng))
    padded_by_id = dict(requests)
    submissions = [(rid, padded_by_id[rid]) for rid, _req in make_submissions(requests, settings, round_rng)]
    key = secrets.token_hex(16)
    plan = random_plan(random.Random(round_rng.random()), opts.fault_rate, CLIENT_FAULTS)
    clients = Clients(FaultyStore(store, plan), files.queue, key, random.Random(round_rng.random()))
    clients.doomed = {request_id for n, (request_id, _req) in enumerate(requests) if n % DOOMED == 7}
    argv = ["-m", "samples.chaos", "worker", "transfer", "--store", f"sqlite:{files.path}"]
    argv += ["--queue", files.queue, "--log", str(files.log), "--fault-rate", str(opts.fault_rate)]
    argv += ["--die", "0.01", "--version-wait", str(VERSION_WAIT), "--relay-every", str(RELAY_EVERY)]
    workers = Workers(argv, {"IDEMFLOW_SIGNING_KEY": key})
    waited: dict[str, str | None] = {}
    seen: dict[str, RequestStatus] = {}
    killer = random.Random(round_rng.random())
    with watching(files.path, money_holds(sum(opening.values()))) as monitor:
        try:
            with workers.killing(killer, (0.8, 2.0)):  # as often in a quick round as in a full one
                done = 0.0
                for phase in PHASES:
                    if phase.workers == (1, 2):  # the version 1 requests waiting for this deploy
                        waited = _waiting(store, clients, time.monotonic() + WAIT_NOTED)
                    if phase.workers is not None:
                        workers.deploy(phase.workers)
                    first, done = round(done * len(submissions)), done + phase.share
                    batch = submissions[first : round(done * len(submissions))]
                    clients.send(batch, phase.clients, phase.seconds * scale)
                seen = _settle(store, clients, time.monotonic() + (60 if opts.quick else 120))
        finally:
            workers.stop()
    problems = [*clients.problems, *verify_versions(requests, clients, seen, waited)]
    problems += check_tables(store, opening, requests, seen)
    store.close()
    print(
        f"[chaos]   deploy round {round_no}: {len(waited)} version 1 requests in flight at the last "
        f"deploy, {sum((why or '').startswith(WAITING) for why in waited.values())} of them said they "
        f"waited for version 1; {clients.abandoned} copies given up by their clients after a crash, "
        f"{len(clients.doomed.intersection(seen) - clients.accepted)} continuations left to the relay",
        flush=True,
    )
    totals.faults += len(clients.faulty.injected)
    totals.deploys += workers.deploys
    totals.oversize += sum("padding" in req for _request_id, req in requests)
    files.tally(totals, len(requests), len(submissions), workers.crashes(), monitor, problems)


def check_tables(
    store: Store,
    opening: dict[str, int],
    requests: Sequence[tuple[str, ChaosRequest]],
    seen: dict[str, RequestStatus],
) -> list[str]:
    """The sample's ``check`` and ``ledger`` of the tables; one screening per version 2 request."""
    outcomes: dict[str, tuple[TransferRequest, Outcome]] = {}
    for request_id, req in requests:
        found = seen.get(request_id)
        if found is not None and found.status is RunStatus.COMPLETED:
            outcomes[request_id] = (plain(req), Success(cast(Receipt, found.result)))
        elif found is not None and found.status is RunStatus.ABORTED:
            aborted = WorkflowAborted(found.reason, "transfer", request_id)
            outcomes[request_id] = (plain(req), Failure(aborted))
    problems = [*check(store, opening=opening, outcomes=outcomes).problems, *ledger(store).problems]
    claimed_v2 = Counter(req["src"] for rid, req in requests if rid in seen and seen[rid].version == 2)
    screened = screens(store)
    for account in sorted(set(claimed_v2) | set(screened)):
        if screened.get(account, 0) != claimed_v2[account]:
            problems.append(
                f"account {account}: screened {screened.get(account, 0)} times, but "
                f"{claimed_v2[account]} requests from it were claimed on version 2"
            )
    return problems


def _waiting(store: Store, clients: Clients, deadline: float) -> dict[str, str | None]:
    """The version 1 requests not finished while only version 2 workers run, and why each waits,
    once each says why (a worker holding version 2 took it) or ``deadline`` passed."""
    while True:
        found = {}
        for request_id, tried in list(clients.tried.items()):
            if set(tried) == {1}:
                now = status(store, "transfer", request_id)
                if now.status not in UNCLAIMED and not now.status.final:
                    found[request_id] = now.waiting
        if all(found.values()) or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def _settle(store: Store, clients: Clients, deadline: float) -> dict[str, RequestStatus]:
    """Wait until every claimed request finished (or ``deadline``); the last status of each claimed."""
    seen: dict[str, RequestStatus] = {}
    left = set(clients.tried)
    while True:
        for request_id in sorted(left):
            now = status(store, "transfer", request_id)
            if now.status in UNCLAIMED and request_id not in clients.accepted:
                left.discard(request_id)  # every copy was given up before its claim committed
                continue
            seen[request_id] = now
            if now.status.final or now.status is RunStatus.FAILED:
                left.discard(request_id)
        if not left or time.monotonic() >= deadline:
            return seen
        time.sleep(0.1)


def verify_versions(
    requests: Sequence[tuple[str, ChaosRequest]],
    clients: Clients,
    seen: dict[str, RequestStatus],
    waited: dict[str, str | None],
) -> list[str]:
    """Every claimed request finished, on the version it started with; waiting only for version 1."""
    problems = []
    for request_id, _req in requests:
        found = seen.get(request_id)
        if found is None:
            continue
        tried = sorted(set(clients.tried[request_id]))
        if found.status is RunStatus.FAILED:
            problems.append(f"{request_id} failed: {found.failure}")
        elif not found.status.final:
            problems.append(f"{request_id} never finished: {found.status.value}, waiting {found.waiting!r}")
        if found.version not in tried:
            problems.append(f"{request_id} runs on version {found.version}, but was submitted on {tried}")
        if found.status is RunStatus.COMPLETED:
            said = found.result.get("version", 1) if isinstance(found.result, dict) else None
            if said != found.version:
                problems.append(f"{request_id} claimed on version {found.version} answered {found.result}")
        if found.version == 2 and found.waiting:
            problems.append(f"{request_id} (version 2) waited: {found.waiting}")
    for request_id, why in sorted(waited.items()):
        if not (why or "").startswith(WAITING):
            problems.append(f"{request_id} (version 1, only version 2 workers running) waiting {why!r}")
    return problems
