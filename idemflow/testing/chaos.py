"""The chaos suite: sustained load while worker processes are killed and commits misbehave.

``python -m idemflow.testing.chaos --minutes 10`` (``make chaos``) repeats, until
the time is up, three workloads, each checked continuously while it runs and
exactly at its end:

1. **transfer, killed** — the bank-transfer sample's own harness
   (:func:`samples.transfer.demo.run_harness`): transfers submitted 2-3 times
   to worker processes on one SQLite file, workers SIGKILLed at random and
   replaced; money conserved, every balance and audit row as one replay of
   the completed transfers, one refund per compensated transfer.
2. **transfer, faulty store** — the same workflow from threads through a
   :class:`~idemflow.testing.FaultyStore` that loses commit answers, injects
   transient errors and conflicts and crashes before and after commits;
   duplicates and reordered requests; a monitor checks while it runs that no
   money appears and no balance goes negative.
3. **survey, asynchronous** — :mod:`idemflow.testing.chaos_workflows`
   submitted (duplicated, shuffled) to a SQLite queue; worker processes
   (a real :class:`~idemflow.async_worklist.Worker` over a faulty store that
   also exits the process right after some commits) are SIGKILLed at random;
   a monitor checks that no answer is counted more often than recorded;
   at the end every request finished, every answer counted exactly once,
   spam compensated, nothing dead-lettered.

The summary table goes to ``benchmarks/results/chaos.md``; the exit status
is 1 if any anomaly was found. The transfer workloads need the ``samples``
package of the idemflow repository (run from its root).

>>> Totals("demo", requests=3, submissions=5).duplicates
2
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idemflow.errors import ConflictError, TransientStoreError
from idemflow.stores.base import CommitOutcome, Op, Store
from idemflow.stores.sqlite import SqliteStore
from idemflow.testing import chaos_workflows as cw
from idemflow.testing.faults import Fault, FaultPoint, FaultyStore, SimulatedCrash

ROOT = Path(__file__).resolve().parents[2]
"""Where ``idemflow`` (and, in the repository, ``samples``) can be imported from."""
KEY = "chaos-signing-key"
DIED = 86
"""Exit status of a worker process that killed itself right after a commit."""
RETRIED = (SimulatedCrash, TransientStoreError, ConflictError)


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

    @property
    def duplicates(self) -> int:
        return self.submissions - self.requests


@dataclass(frozen=True)
class Options:
    """One chaos run's sizes (``--seconds`` scales nothing: rounds repeat until the time is up)."""

    seconds: float
    seed: int
    workdir: Path
    out: Path | None
    fault_rate: float = 0.08


# -- the faulty store used by the threads and the worker processes --------------------------


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
    """A faulty store that also ends the whole process, now and then, right after a commit
    applied: the one kill point a SIGKILL from outside can never aim at.

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
                os.write(self._log, b"f")  # one byte per injected fault: survives a SIGKILL
            if self._rng.random() < self.die:
                os._exit(DIED)


def worker_main(argv: Sequence[str]) -> int:
    """``python -m idemflow.testing.chaos worker STORE QUEUE LOG RATE DIE``: a worker process."""
    from idemflow.async_worklist import Worker, open_queue

    store_path, queue_url, log, rate, die = argv
    plan = random_plan(random.Random(), float(rate), [Fault.LOST_ANSWER, Fault.TRANSIENT, Fault.CONFLICT])
    store = DyingStore(SqliteStore(store_path), plan, float(die), Path(log))
    worker = Worker(
        cw.WORKFLOWS,
        store=store,
        queue=open_queue(queue_url),
        concurrency=2,
        signing_key=KEY,
        wait=0.1,
        max_deliveries=1000,
    )
    worker.run()
    return 0


# -- workload 1: the transfer sample's own harness ------------------------------------------------


def transfer_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from samples.transfer.demo import Settings, run_harness

    settings = Settings(
        path=opts.workdir / f"transfer-{round_no}.sqlite3",
        workers=3,
        requests=80,
        accounts=6,
        kills=10,
        seed=rng.randrange(1 << 30),
        timeout=120.0,
    )
    report = run_harness(settings)
    totals.requests += report.requests
    totals.submissions += report.submissions
    totals.kills += report.kills
    totals.anomalies += [f"transfer round {round_no} (seed {settings.seed}): {p}" for p in report.problems]


# -- workload 2: transfers through a faulty store, from threads ---------------------------------------


def transfer_faulty(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from idemflow import run
    from idemflow.compensation import run_result
    from samples.transfer.demo import Settings, make_requests, make_submissions
    from samples.transfer.workflows import balances, check, open_account, transfer

    settings = Settings(path=opts.workdir / f"faulty-{round_no}.sqlite3", workers=6, requests=120, accounts=6)
    store = SqliteStore(settings.path)
    faults = [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER, Fault.TRANSIENT, Fault.CONFLICT]
    faulty = FaultyStore(store, random_plan(random.Random(rng.random()), opts.fault_rate, faults))
    opening = {f"acct-{n}": settings.balance for n in range(settings.accounts)}
    for name, balance in opening.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    requests = make_requests(settings, rng)
    submissions = make_submissions(requests, settings, rng)
    answers: dict[str, list[Any]] = {}
    lock = threading.Lock()
    todo = list(reversed(submissions))
    anomalies: list[str] = []

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                request_id, req = todo.pop()
            for _attempt in range(200):
                try:
                    outcome = run_result(transfer(req), request_id=request_id, store=faulty)
                except RETRIED:
                    continue
                with lock:
                    answers.setdefault(request_id, []).append(outcome)
                break
            else:
                anomalies.append(f"{request_id} never finished")

    def watch(stop: threading.Event) -> None:
        total = sum(opening.values())
        monitor = SqliteStore(settings.path)
        while not stop.wait(0.05):
            found = balances(monitor)
            if sum(found.values()) > total or any(value < 0 for value in found.values()):
                anomalies.append(f"while running: balances {found} (opening total {total})")
        monitor.close()

    stop = threading.Event()
    monitor = threading.Thread(target=watch, args=(stop,))
    monitor.start()
    threads = [threading.Thread(target=client) for _ in range(settings.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    monitor.join()
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
    totals.faults += len(faulty.injected)
    totals.anomalies += [f"faulty round {round_no}: {problem}" for problem in [*anomalies, *verdict.problems]]


# -- workload 3: asynchronous surveys, worker processes killed -----------------------------------------


def start_worker(opts: Options, store: Path, queue_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "idemflow.testing.chaos", "worker", str(store), queue_url, str(log)]
    command += [str(opts.fault_rate), "0.01"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def survey_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from idemflow.async_worklist import SqliteQueue, status, submit
    from idemflow.records import RunStatus

    store_path = opts.workdir / f"survey-{round_no}.sqlite3"
    queue_url = f"sqlite:{opts.workdir / f'survey-{round_no}-queue.sqlite3'}?visibility_timeout=1"
    log = opts.workdir / f"survey-{round_no}-faults.log"
    store = SqliteStore(store_path)
    queue = SqliteQueue(opts.workdir / f"survey-{round_no}-queue.sqlite3", visibility_timeout=1)
    answers = ("red", "green", "blue", cw.SPAM)
    requests = [(f"r{n}", {"poll": "p", "user": f"u{n}", "answer": answers[n % 4]}) for n in range(120)]
    submissions = [request for request in requests for _ in range(rng.choice((1, 2, 3)))]
    rng.shuffle(submissions)
    anomalies: list[str] = []
    half = len(submissions) // 2
    for request_id, response in submissions[:half]:
        submit(cw.survey(response), request_id=request_id, store=store, queue=queue, signing_key=KEY)
    workers = [start_worker(opts, store_path, queue_url, log) for _ in range(2)]
    kills = 0
    deadline = time.monotonic() + 120
    next_kill = time.monotonic() + rng.uniform(0.2, 0.8)
    late = submissions[half:]
    try:
        while time.monotonic() < deadline:
            if late:
                request_id, response = late.pop()
                submit(cw.survey(response), request_id=request_id, store=store, queue=queue, signing_key=KEY)
            anomalies += survey_invariants(store, requests, final=False)
            states = [status(store, "chaos_survey", request_id).status for request_id, _ in requests]
            if not late and all(s in (RunStatus.COMPLETED, RunStatus.ABORTED) for s in states):
                break
            time.sleep(0.005 if late else 0.05)
            if time.monotonic() >= next_kill:
                next_kill = time.monotonic() + rng.uniform(0.2, 0.8)
                victim = rng.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                kills += 1
                workers[victim] = start_worker(opts, store_path, queue_url, log)
            for n, worker in enumerate(workers):
                if worker.poll() is not None:  # died right after a commit (DIED) or on its own
                    kills += worker.returncode == DIED
                    if worker.returncode != DIED:
                        anomalies.append(f"a survey worker exited with status {worker.returncode}")
                    workers[n] = start_worker(opts, store_path, queue_url, log)
        else:
            anomalies.append("survey round did not finish within 120 s")
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    anomalies += survey_invariants(store, requests, final=True)
    anomalies += [f"dead-lettered: {reason}" for _body, reason in queue.dead_letters()]
    store.close()
    queue.close()
    totals.requests += len(requests)
    totals.submissions += len(submissions)
    totals.kills += kills
    totals.faults += log.stat().st_size if log.exists() else 0
    totals.anomalies += [f"survey round {round_no}: {problem}" for problem in anomalies]


def survey_invariants(
    store: Store, requests: Sequence[tuple[str, dict[str, str]]], *, final: bool
) -> list[str]:
    """No answer counted more often than recorded (tallies read first: they only trail the
    responses); at the end, each counted exactly once, spam un-recorded, one audit row each.

    >>> from idemflow import MemoryStore
    >>> for problem in survey_invariants(MemoryStore(), [("r1", {"user": "u", "answer": "red"})], final=True):
    ...     print(problem)
    responses differ from one run each: 0 rows, 1 expected
    tallies {}, one count per response gives {'red': 1}
    0 audit rows for 1 counted responses
    """
    tallies = cw.tallies(store, "p")
    recorded = cw.responses(store, "p")
    problems = []
    if cw.SPAM in tallies:
        problems.append(f"spam was counted: {tallies}")
    for answer, count in tallies.items():
        have = sum(1 for value in recorded.values() if value == answer)
        if not isinstance(count, int) or count > have:
            problems.append(f"answer {answer!r} counted {count} times but recorded {have} times")
    if final:
        expected = {r["user"]: r["answer"] for _, r in requests if r["answer"] != cw.SPAM}
        counts = {a: sum(1 for v in expected.values() if v == a) for a in set(expected.values())}
        if recorded != expected:
            problems.append(
                f"responses differ from one run each: {len(recorded)} rows, {len(expected)} expected"
            )
        if tallies != counts:
            problems.append(f"tallies {tallies}, one count per response gives {counts}")
        if len(cw.audit_rows(store, "p")) != len(expected):
            problems.append(
                f"{len(cw.audit_rows(store, 'p'))} audit rows for {len(expected)} counted responses"
            )
    return problems


# -- the run ---------------------------------------------------------------------------------------------


WORKLOADS: list[tuple[str, Callable[[Options, random.Random, int, Totals], None]]] = [
    ("transfer: SIGKILLed worker processes (samples/transfer harness)", transfer_killed),
    ("transfer: lost answers, transient errors, conflicts, crashes (FaultyStore)", transfer_faulty),
    ("survey (async): SIGKILLed workers, exits after commits, faulty store", survey_killed),
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
                f"[chaos] {total.workload}: round {round_no} done, {len(total.anomalies)} anomalies",
                flush=True,
            )
        round_no += 1
    return totals


def render(totals: Sequence[Totals], opts: Options, seconds: float) -> str:
    """The summary table (Markdown).

    >>> print(render([Totals("w", 1, 2, 3)], Options(1, 0, Path("."), None), 1).splitlines()[-3])
    | **total** | 1 | 2 | 1 | 0 | 0 | 0 |
    """
    all_ = Totals("**total**")
    for total in totals:
        all_.rounds += total.rounds
        all_.requests += total.requests
        all_.submissions += total.submissions
        all_.kills += total.kills
        all_.faults += total.faults
        all_.anomalies += total.anomalies
    lines = [
        "# Chaos run",
        "",
        f"`python -m idemflow.testing.chaos --seconds {opts.seconds:g} --seed {opts.seed}`: "
        f"{seconds:.0f} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| workload | rounds | requests | duplicates | kills | injected faults | anomalies |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for t in [*totals, all_]:
        lines.append(
            f"| {t.workload} | {t.rounds} | {t.requests} | {t.duplicates} | {t.kills} | {t.faults} "
            f"| {len(t.anomalies)} |"
        )
    lines += ["", "Anomalies must be 0. " + ("None found." if not all_.anomalies else "Found:")]
    lines += [f"- {anomaly}" for anomaly in all_.anomalies[:50]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; exit status 0 when no anomaly was found."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["worker"]:
        return worker_main(args_list[1:])
    parser = argparse.ArgumentParser(
        prog="python -m idemflow.testing.chaos", description=__doc__.split("\n")[0]
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long to run (default 10)")
    length.add_argument("--seconds", type=float, help="how long to run, in seconds")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/chaos.md"), help="summary file")
    parser.add_argument("--workdir", type=Path, default=Path("chaos-data"), help="where the SQLite files go")
    args = parser.parse_args(args_list)
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes or 10.0)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    opts = Options(seconds=seconds, seed=seed, workdir=args.workdir, out=args.out)
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
