"""The chaos suite: the samples under sustained load while processes are killed and commits misbehave.

``python -m samples.chaos --minutes 10`` (``make chaos``) repeats four
workloads until the time is up, each checked continuously while it runs and
exactly at its end:

1. **transfer, killed** — the bank-transfer sample's own harness
   (:func:`samples.transfer.demo.run_harness`): transfers submitted 2-3 times
   to worker processes on one SQLite file, workers SIGKILLed at random and
   replaced; money conserved, every balance and audit row as one replay of
   the completed transfers, one refund per compensated transfer.
2. **transfer, faulty store** — the same workflow from threads through a
   :class:`~idemflow.testing.FaultyStore` that loses commit answers, injects
   transient errors and conflicts and crashes before and after commits;
   duplicates and reordered requests. Each copy either runs or is submitted:
   then the debit runs in the client and the rest after the checkpoint in
   worker threads, so a transfer to a missing account aborts and refunds
   its debit in a worker (compensation after a checkpoint) while copies of
   it run elsewhere. A monitor checks while it runs that no money appears
   and no balance goes negative.
3. **survey** and 4. **auction**, asynchronous — the samples' own demos
   (:func:`samples.survey.cli.run_demo`, :func:`samples.auction.cli.run_demo`):
   API servers answering at the checkpoint and worker processes finishing
   the workflows, on one SQLite store and queue; every request sent 2-4
   times, copies racing on different servers and reordered; servers and
   workers SIGKILLed at random and restarted. Here the servers and workers
   run over a faulty store (:class:`DyingStore`) that loses commit answers
   and injects transient errors and conflicts, and the workers also exit
   right after some commits — the one kill point a SIGKILL from outside
   cannot aim at — to be restarted like a supervisor would. While the load
   runs, a monitor checks the sample's invariants that hold at every instant
   (``check(store, settled=False)``: nothing counted twice, no winner charged
   twice, no money created); at the end the demo checks what the clients saw
   and ``check`` the tables (every response counted once; one winner per
   closed auction, charged once; money conserved; every accepted bid counted
   once in ``popular``), and nothing may be dead-lettered.

The summary table goes to ``benchmarks/results/chaos.md``; the exit status
is 1 if any anomaly was found. ``--quick`` runs smaller rounds (the test
suite's short run). It is a tool of this repository, run from its root.

>>> Totals("demo", requests=3, submissions=5).duplicates
2
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from returns.result import Failure, Result, Success

from idemflow import (
    ConflictError,
    IdemflowError,
    SqliteStore,
    Store,
    TransientStoreError,
    WorkflowAborted,
    open_store,
)
from idemflow.async_worklist import Pending
from idemflow.stores.base import CommitOutcome, Op
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from samples._harness import Crashes, Sample
from samples.transfer.demo import reset

DIED = 86
"""Exit status of a worker process that ended itself right after a commit."""
RETRIED = (SimulatedCrash, TransientStoreError, ConflictError)
IN_PROCESS_FAULTS = (Fault.LOST_ANSWER, Fault.TRANSIENT, Fault.CONFLICT)
"""What the servers' and workers' stores inject (a crash is the real thing there: SIGKILL, exit)."""


@dataclass
class Totals:
    """What one workload did and found, summed over its rounds."""

    workload: str
    rounds: int = 0
    requests: int = 0
    submissions: int = 0
    kills: int = 0
    faults: int = 0
    anomalies: list[str] = field(default_factory=list)
    checks: int = 0
    """Invariant checks made while the workload ran (besides the checks at the end of each round)."""

    @property
    def duplicates(self) -> int:
        return self.submissions - self.requests


@dataclass(frozen=True)
class Options:
    """One chaos run (``seconds`` scales nothing: rounds repeat until the time is up)."""

    seconds: float
    seed: int
    workdir: Path
    out: Path | None
    fault_rate: float = 0.08
    quick: bool = False
    """Smaller rounds: the short run of the test suite."""


# -- faulty stores for threads and child processes ----------------------------------------------


def random_plan(
    rng: random.Random, rate: float, faults: Sequence[Fault]
) -> Callable[[FaultPoint], Fault | None]:
    """Each commit gets one of ``faults`` with probability ``rate``.

    >>> plan = random_plan(random.Random(1), 1.0, [Fault.LOST_ANSWER])
    >>> plan(FaultPoint("commit", 0))
    <Fault.LOST_ANSWER: 'lost-answer'>
    """
    lock = threading.Lock()

    def plan(point: FaultPoint) -> Fault | None:
        with lock:
            return rng.choice(faults) if rng.random() < rate else None

    return plan


class DyingStore(FaultyStore):
    """A faulty store that logs each injected fault (one byte, so the count survives a SIGKILL)
    and, with probability ``die`` per commit, ends the whole process right after the commit applied.

    >>> import tempfile
    >>> from idemflow import MemoryStore, atomic, run
    >>> store = DyingStore(MemoryStore(), lambda p: None, 0.0, Path(tempfile.mkdtemp()) / "faults.log")
    >>> run(atomic("tablea", "p", lambda tx: 1), request_id="r", store=store)
    1
    """

    def __init__(
        self, inner: Store, plan: Callable[[FaultPoint], Fault | None], die: float, log: Path
    ) -> None:
        super().__init__(inner, plan)
        self.die = die
        self._log = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._rng = random.Random()

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        before = len(self.injected)
        try:
            return super().commit(ops)
        finally:
            if len(self.injected) > before:
                os.write(self._log, b"f")
            if self.die and self._rng.random() < self.die:
                os._exit(DIED)


def _child_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m samples.chaos {command}")
    parser.add_argument("sample", choices=["survey", "auction"])
    parser.add_argument("--store", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--log", type=Path, required=True, help="one byte per injected fault")
    parser.add_argument("--fault-rate", type=float, default=0.08)
    parser.add_argument("--die", type=float, default=0.0, help="chance to exit right after a commit")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    return parser


def _faulty(args: argparse.Namespace, tables: Sequence[str]) -> DyingStore:
    store = open_store(args.store)
    store.create_tables(*tables)
    plan = random_plan(random.Random(), args.fault_rate, IN_PROCESS_FAULTS)
    return DyingStore(store, plan, args.die, args.log)


def serve_main(argv: Sequence[str]) -> int:
    """``python -m samples.chaos serve SAMPLE --store URL --queue URL --log PATH --port P``:
    the sample's API (asynchronous) over a faulty store."""
    from idemflow.async_worklist import open_queue
    from samples._api import serve

    args = _child_parser("serve").parse_args(argv)
    sample: Sample[Any] = importlib.import_module(f"samples.{args.sample}.cli").SAMPLE
    serve(sample.app(_faulty(args, sample.tables), open_queue(args.queue)), args.host, args.port)
    return 0


def worker_main(argv: Sequence[str]) -> int:
    """``python -m samples.chaos worker SAMPLE --store URL --queue URL --log PATH --die P``:
    a worker over a faulty store that now and then exits right after a commit."""
    from idemflow.async_worklist import Worker, open_queue

    args = _child_parser("worker").parse_args(argv)
    sample = importlib.import_module(f"samples.{args.sample}.workflows")
    store = _faulty(args, sample.TABLES)
    queue = open_queue(args.queue)
    Worker(sample.WORKFLOWS, store=store, queue=queue, concurrency=2, wait=0.1, max_deliveries=1000).run()
    return 0


# -- workload 1: the transfer sample's own harness ------------------------------------------------


def transfer_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from samples.transfer.demo import Settings, run_harness

    settings = Settings(
        path=opts.workdir / f"transfer-{round_no}.sqlite3",
        workers=3,
        requests=40 if opts.quick else 80,
        accounts=6,
        kills=5 if opts.quick else 10,
        seed=rng.randrange(1 << 30),
        timeout=120.0,
    )
    reset(settings.path)
    with watching(settings.path, money_holds(settings.accounts * settings.balance)) as monitor:
        report = run_harness(settings)
    totals.checks += monitor.checks
    totals.requests += report.requests
    totals.submissions += report.submissions
    totals.kills += report.kills
    problems = [*report.problems, *monitor.problems]
    totals.anomalies += [f"transfer round {round_no} (seed {settings.seed}): {p}" for p in problems]


# -- workload 2: transfers through a faulty store, from threads ---------------------------------------


def transfer_faulty(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    """Each copy of a request either runs (``run_result``) or is submitted (``submit``: the debit
    in the client, the credit, and the refund when the destination is missing, in a worker
    after the checkpoint); clients crash before and after commits, everyone loses answers and
    meets transient errors and conflicts."""
    from idemflow import run
    from idemflow.async_worklist import MemoryQueue, Worker, submit
    from idemflow.compensation import run_result
    from samples.transfer.demo import Settings, make_requests, make_submissions
    from samples.transfer.workflows import check, open_account, transfer

    size = 60 if opts.quick else 120
    settings = Settings(
        path=opts.workdir / f"faulty-{round_no}.sqlite3", workers=6, requests=size, accounts=6
    )
    reset(settings.path)
    store = SqliteStore(settings.path)
    faults = [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER, Fault.TRANSIENT, Fault.CONFLICT]
    faulty = FaultyStore(store, random_plan(random.Random(rng.random()), opts.fault_rate, faults))
    # A worker thread cannot be killed from outside; its store loses answers and conflicts instead.
    worker_plan = random_plan(random.Random(rng.random()), opts.fault_rate, IN_PROCESS_FAULTS)
    worker_store = FaultyStore(store, worker_plan)
    queue = MemoryQueue(visibility_timeout=2.0)
    worker = Worker([transfer], store=worker_store, queue=queue, concurrency=2, wait=0.05)
    opening = {f"acct-{n}": settings.balance for n in range(settings.accounts)}
    for name, balance in opening.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    requests = make_requests(settings, rng)
    submissions = [(request, rng.random() < 0.5) for request in make_submissions(requests, settings, rng)]
    answers: dict[str, list[Any]] = {}
    pendings: list[tuple[str, Pending]] = []
    lock = threading.Lock()
    todo = list(reversed(submissions))
    anomalies: list[str] = []

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                (request_id, req), asynchronous = todo.pop()
            for _attempt in range(200):
                try:
                    if asynchronous:
                        pending = submit(transfer(req), request_id=request_id, store=faulty, queue=queue)
                    else:
                        outcome = run_result(transfer(req), request_id=request_id, store=faulty)
                except RETRIED:
                    continue
                with lock:
                    if asynchronous:
                        pendings.append((request_id, pending))  # its answer is polled for at the end
                    else:
                        answers.setdefault(request_id, []).append(outcome)
                break
            else:
                anomalies.append(f"{request_id} never finished")

    working = threading.Thread(target=worker.run)
    with watching(settings.path, money_holds(sum(opening.values()))) as monitor:
        working.start()
        threads = [threading.Thread(target=client) for _ in range(settings.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        deadline, unfinished = time.monotonic() + 120, set()
        for request_id, pending in pendings:
            final = polled(pending, deadline)
            if final is None:
                unfinished.add(request_id)
            else:
                answers.setdefault(request_id, []).append(final)
        worker.stop()
        working.join()
    anomalies += [f"{rid} submitted but never finished by a worker" for rid in sorted(unfinished)]
    anomalies += [f"dead-lettered: {reason}" for _body, reason in queue.dead_letters()]
    outcomes = {}
    for request_id, req in requests:
        got = answers.get(request_id, [])
        if any(other != got[0] for other in got[1:]):
            anomalies.append(f"{request_id}: copies answered differently: {got}")
        if got:
            outcomes[request_id] = (req, got[0])
    verdict = check(store, opening=opening, outcomes=outcomes)
    store.close()
    totals.requests += len(requests)
    totals.submissions += len(submissions)
    totals.faults += len(faulty.injected) + len(worker_store.injected)
    problems = [*anomalies, *monitor.problems, *verdict.problems]
    totals.checks += monitor.checks
    totals.anomalies += [f"faulty round {round_no}: {problem}" for problem in problems]


def polled(pending: Pending, deadline: float) -> Result[Any, WorkflowAborted] | None:
    """What a client polling a submitted transfer until ``deadline`` learns, as ``run_result``
    would have answered it; None if no worker finished it by then."""
    try:
        return Success(pending.result(timeout=max(0.0, deadline - time.monotonic())))
    except WorkflowAborted as aborted:
        return Failure(aborted)
    except TimeoutError:
        return None


# -- the continuous checks -----------------------------------------------------------------------------


class Monitor:
    """What :func:`watching` found while the block ran: how many checks, which problems (once each)."""

    def __init__(self) -> None:
        self.checks = 0
        self.problems: list[str] = []


@contextlib.contextmanager
def watching(path: Path, invariants: Callable[[Store], list[str]], every: float = 0.1) -> Iterator[Monitor]:
    """Check ``invariants`` on the SQLite file ``path`` from a thread, over and over, while the block
    runs (from when the file exists: the workload creates it).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "w.sqlite3"
    >>> SqliteStore(path).close()
    >>> with watching(path, lambda store: ["always wrong"], every=0.01) as monitor:
    ...     time.sleep(0.1)
    >>> monitor.checks > 1, monitor.problems
    (True, ['while running: always wrong'])
    """
    monitor, stop = Monitor(), threading.Event()

    def run() -> None:
        store: Store | None = None
        while not stop.wait(0 if monitor.checks == 0 else every):
            if store is None and path.exists():
                store = SqliteStore(path)
            if store is None:
                continue
            try:
                found = invariants(store)
            except IdemflowError:  # busy: check again next time
                continue
            monitor.checks += 1
            for problem in found:
                if f"while running: {problem}" not in monitor.problems:
                    monitor.problems.append(f"while running: {problem}")
        if store is not None:
            store.close()

    thread = threading.Thread(target=run, name="chaos-monitor", daemon=True)
    thread.start()
    try:
        yield monitor
    finally:
        stop.set()
        thread.join()


def money_holds(total: int) -> Callable[[Store], list[str]]:
    """The transfer sample's invariant at every instant: no money appears, no balance goes negative
    (a transfer between its debit and its credit holds some back)."""

    def invariants(store: Store) -> list[str]:
        from samples.transfer.workflows import balances

        found = balances(store)
        if sum(found.values()) > total or any(value < 0 for value in found.values()):
            return [f"balances {found} (opening total {total})"]
        return []

    return invariants


@dataclass(frozen=True)
class _Round:
    """Fresh files of one round of a sample's demo, and where its servers and workers find them."""

    sample: str
    path: Path
    queue: str
    log: Path
    seed: int

    @classmethod
    def fresh(cls, sample: str, opts: Options, rng: random.Random, round_no: int) -> _Round:
        folder = opts.workdir / f"{sample}-{round_no}"
        path, queue, log = folder / f"{sample}.sqlite3", folder / "queue.sqlite3", folder / "faults.log"
        reset(path)
        reset(queue)
        log.unlink(missing_ok=True)
        return cls(sample, path, f"sqlite:{queue}?visibility_timeout=2", log, rng.randrange(1 << 30))

    def processes(self, opts: Options) -> dict[str, Any]:
        """The :class:`~samples._harness.FleetSettings` fields: one store and queue, faulty servers and
        workers (``python -m samples.chaos serve|worker``), workers exiting after 1% of their commits."""
        faults = ("--log", str(self.log), "--fault-rate", str(opts.fault_rate))
        return {
            "store": f"sqlite:{self.path}",
            "queue": self.queue,
            "kills": 4 if opts.quick else 12,
            "server": ("-m", "samples.chaos", "serve", self.sample, *faults),
            "worker": ("-m", "samples.chaos", "worker", self.sample, *faults, "--die", "0.01"),
        }

    def tally(
        self,
        totals: Totals,
        requests: int,
        sent: int,
        crashes: Crashes,
        monitor: Monitor,
        problems: list[str],
    ) -> None:
        """Add the round to ``totals``; dead letters and processes that exited otherwise are anomalies."""
        from idemflow.async_worklist import open_queue

        queue = open_queue(self.queue)
        dead = [f"dead-lettered: {reason}" for _body, reason in queue.dead_letters()]
        queue.close()
        odd = [f"a {kind} exited with status {status}" for kind, status in crashes.exits if status != DIED]
        totals.requests += requests
        totals.submissions += sent
        totals.checks += monitor.checks
        totals.kills += sum(crashes.kills.values()) + sum(crashes.exits.values())
        totals.faults += self.log.stat().st_size if self.log.exists() else 0
        prefix = f"{self.sample} round {self.path.parent.name} (seed {self.seed})"
        problems = [*problems, *monitor.problems, *dead, *odd]
        totals.anomalies += [f"{prefix}: {problem}" for problem in problems]


def survey_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from samples.survey import cli, workflows

    files = _Round.fresh("survey", opts, rng, round_no)
    load = cli.LoadSettings(responses=80 if opts.quick else 300, seed=files.seed)
    settings = cli.DemoSettings(**files.processes(opts), load=load)
    with watching(files.path, lambda store: list(workflows.check(store, settled=False).problems)) as monitor:
        report = cli.run_demo(settings)
    problems = [*report.load.problems, *report.verdict.problems]
    files.tally(totals, load.responses, report.load.sent, report.crashes, monitor, problems)


def auction_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from samples.auction import cli, workflows

    files = _Round.fresh("auction", opts, rng, round_no)
    if opts.quick:
        load = cli.LoadSettings(bids=60, items=3, window=2.0, seed=files.seed)
    else:
        load = cli.LoadSettings(bids=200, window=3.0, seed=files.seed)
    settings = cli.DemoSettings(**files.processes(opts), load=load)
    with watching(files.path, lambda store: list(workflows.check(store, settled=False).problems)) as monitor:
        report = cli.run_demo(settings)
    problems = [*report.load.problems, *report.verdict.problems]
    files.tally(totals, load.bids, report.load.sent, report.crashes, monitor, problems)


# -- the run ---------------------------------------------------------------------------------------------


WORKLOADS: list[tuple[str, Callable[[Options, random.Random, int, Totals], None]]] = [
    ("transfer: SIGKILLed worker processes (samples/transfer harness)", transfer_killed),
    (
        "transfer, run and submit: lost answers, transient errors, conflicts, crashes (FaultyStore)",
        transfer_faulty,
    ),
    ("survey (async demo): SIGKILLed servers and workers, exits after commits, faulty stores", survey_killed),
    (
        "auction (async demo): SIGKILLed servers and workers, exits after commits, faulty stores",
        auction_killed,
    ),
]


def run_chaos(opts: Options) -> list[Totals]:
    """Repeat the workloads until ``opts.seconds`` passed (each at least once)."""
    rng = random.Random(opts.seed)
    opts.workdir.mkdir(parents=True, exist_ok=True)
    totals = [Totals(name) for name, _ in WORKLOADS]
    deadline = time.monotonic() + opts.seconds
    round_no = 0
    while round_no == 0 or time.monotonic() < deadline:
        for (_name, workload), total in zip(WORKLOADS, totals, strict=True):
            if round_no > 0 and time.monotonic() >= deadline:
                break
            workload(opts, rng, round_no, total)
            total.rounds += 1
            print(
                f"[chaos] {total.workload}: round {round_no} done, {total.kills} kills, "
                f"{len(total.anomalies)} anomalies",
                flush=True,
            )
        round_no += 1
    return totals


def render(totals: Sequence[Totals], opts: Options, seconds: float) -> str:
    """The summary table (Markdown).

    >>> text = render([Totals("w", 1, 2, 3)], Options(1, 0, Path("."), None), 1)
    >>> print(next(line for line in text.splitlines() if line.startswith("| **total**")))
    | **total** | 1 | 2 | 1 | 0 | 0 | 0 | 0 |
    """
    all_ = Totals("**total**")
    for total in totals:
        all_.rounds += total.rounds
        all_.requests += total.requests
        all_.submissions += total.submissions
        all_.kills += total.kills
        all_.faults += total.faults
        all_.checks += total.checks
        all_.anomalies += total.anomalies
    quick = " --quick" if opts.quick else ""
    lines = [
        "# Chaos run",
        "",
        f"`python -m samples.chaos --seconds {opts.seconds:g} --seed {opts.seed}{quick}`: "
        f"{seconds:.0f} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| workload | rounds | requests | duplicates | kills | injected faults | checks while running "
        "| anomalies |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in [*totals, all_]:
        lines.append(
            f"| {t.workload} | {t.rounds} | {t.requests} | {t.duplicates} | {t.kills} | {t.faults} "
            f"| {t.checks} | {len(t.anomalies)} |"
        )
    lines += [
        "",
        "Requests are distinct requests (transfers, survey responses, bids), duplicates the extra "
        "copies sent; kills count SIGKILLs and processes that ended themselves right after a commit; "
        "checks while running, how often a monitor checked the invariants that hold at every instant "
        "(each round is also checked in full at its end).",
        "",
        "Anomalies must be 0. " + ("None found." if not all_.anomalies else "Found:"),
    ]
    lines += [f"- {anomaly}" for anomaly in all_.anomalies[:50]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; exit status 0 when no anomaly was found."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["worker"]:
        return worker_main(args_list[1:])
    if args_list[:1] == ["serve"]:
        return serve_main(args_list[1:])
    parser = argparse.ArgumentParser(prog="python -m samples.chaos", description=__doc__.split("\n")[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long to run (default 10)")
    length.add_argument("--seconds", type=float, help="how long to run, in seconds")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--quick", action="store_true", help="smaller rounds (the test suite's short run)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/chaos.md"), help="summary file")
    parser.add_argument(
        "--workdir", type=Path, default=Path("demo-data/chaos"), help="where the SQLite files go"
    )
    args = parser.parse_args(args_list)
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes or 10.0)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    opts = Options(seconds=seconds, seed=seed, workdir=args.workdir, out=args.out, quick=args.quick)
    print(f"[chaos] {seconds:g} s, seed {seed}, files in {opts.workdir}", flush=True)
    started = time.monotonic()
    totals = run_chaos(opts)
    text = render(totals, opts, time.monotonic() - started)
    if opts.out is not None:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(text)
    print(text, flush=True)
    return 1 if any(total.anomalies for total in totals) else 0


if __name__ == "__main__":
    sys.exit(main())
