"""Bank transfers from several processes on one SQLite file, SIGKILLed at random.

What ``make demo`` runs (``python -m samples.transfer.demo --help``). It is
the paper's claim made visible: with no coordinator, no lock held across
steps and nothing that must expire before a retry, duplicated requests,
racing workers and processes killed mid-commit still leave the tables as if
every request had run exactly once.

1. Open ``--accounts`` accounts on a fresh :class:`~idemflow.SqliteStore`.
2. Make ``--requests`` transfer requests (random accounts and amounts; one in
   twenty to an account that does not exist, so it aborts after its debit and
   the debit is refunded; one in twelve too large, so it aborts at once) and
   submit each 2-3 times under the same request id, copies close together so
   duplicates race on different workers.
3. Worker *processes* (``spawn``; each opens its own ``SqliteStore`` on the
   file) run what the parent hands them. A request counts as done only when
   its answer reached the parent, as a client would see it.
4. The parent SIGKILLs a random busy worker at random moments and starts a
   replacement that is handed the killed worker's unanswered requests.
5. Finally :func:`~samples.transfer.workflows.check` verifies conservation of
   money, one audit row per completed request, every balance against a
   single-process replay of the completed transfers, one refund per
   compensated request, and that every copy of a request got the same answer.

The harness is importable (:func:`run_harness`) so the crash tests run it
with a fixed seed and smaller sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import random
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from idemflow import ConflictError, IdemflowError, SqliteStore, TransientStoreError, run
from idemflow.compensation import run_result
from samples.transfer.workflows import (
    Outcome,
    TransferRequest,
    Verdict,
    check,
    open_account,
    transfer,
)

Submission = tuple[str, TransferRequest]
"""A request as submitted: its request id (the idempotency key) and its input."""

DB_NAME = "transfer.sqlite3"


@dataclass(frozen=True, slots=True)
class Settings:
    """Sizes of one run. The defaults are the demo's; tests shrink them."""

    path: Path
    """The SQLite file; it and its ``-wal``/``-shm`` companions are deleted first."""
    workers: int = 4
    requests: int = 300
    accounts: int = 8
    balance: int = 1000
    kills: int = 12
    seed: int = 0
    window: int = 2
    """Requests handed to one worker before its answers come back (what a kill loses)."""
    kill_jitter: float = 0.02
    """Seconds of random delay before a due kill, so it lands anywhere in a step."""
    timeout: float = 120.0
    """Give up (and fail) if the run has not finished by then."""
    unkeyed: bool = False
    """Run every copy under its own request id, as code without idempotence keys
    would: duplicates then apply twice, and the check must FAIL."""


@dataclass(frozen=True, slots=True)
class Report:
    """Everything a run did and found; ``problems`` is empty when it passed."""

    settings: Settings
    requests: int
    submissions: int
    kills: int
    resent: int
    """Unanswered submissions of killed workers, handed to their replacements."""
    retried: int
    """Submissions a worker gave back after a transient error (e.g. conflicts past the bound)."""
    raced: int
    """Duplicates handed out while another copy of the request was running on another worker."""
    verdict: Verdict
    problems: tuple[str, ...]
    failed: frozenset[str]
    """Checks that found a problem: those of :data:`~samples.transfer.workflows.CHECKS`,
    ``answers`` (copies of a request answered differently) and ``run`` (the harness)."""
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self, *, max_problems: int = 12) -> str:
        """A few lines a person wants to read, ending in PASS or FAIL."""
        s, v = self.settings, self.verdict
        to_ghosts = v.aborted.get("no such account", 0)
        poor = v.aborted.get("insufficient funds", 0)
        other = sum(v.aborted.values()) - to_ghosts - poor

        def mark(check: str) -> str:
            return "FAIL" if check in self.failed else " ok "

        lines = [
            f"idemflow transfer demo: {s.path}, seed {s.seed}" + (" (unkeyed)" if s.unkeyed else ""),
            f"  requests  {self.requests} transfers sent {self.submissions} times: "
            f"{self.submissions - self.requests} duplicates, {self.raced} racing a copy on another worker",
            f"  crashes   {self.kills} SIGKILLs of the {s.workers} workers; replacements retried "
            f"{self.resent} unanswered submissions"
            + (f" ({self.retried} more after a transient error)" if self.retried else ""),
            f"  outcome   {v.completed} completed, {sum(v.aborted.values())} aborted "
            f"({to_ghosts} to a missing account, {poor} insufficient funds"
            + (f", {other} other)" if other else ")"),
            f"  [{mark('money')}] money conserved: {v.money_before} before, {v.money_after} after",
            f"  [{mark('audit')}] exactly once: {v.audit_rows} audit rows for {v.completed} completed "
            "transfers",
            f"  [{mark('balances')}] balances: each of the {v.accounts} accounts equals one replay of the "
            "completed transfers",
            f"  [{mark('refunds')}] compensation: {v.refunds} refunds for the {v.expected_refunds} "
            "transfers aborted after their debit",
            f"  [{mark('answers')}] answers: every copy of a request got the same answer",
        ]
        if "run" in self.failed:
            lines.append(f"  [{mark('run')}] the run itself went wrong")
        if self.ok:
            lines.append(f"PASS in {self.seconds:.1f} s: every request took effect exactly once")
        else:
            lines.append(f"FAIL in {self.seconds:.1f} s: {len(self.problems)} problems, the first:")
            lines.extend(f"  - {problem}" for problem in self.problems[:max_problems])
        return "\n".join(lines)


# -- the work --------------------------------------------------------------------


def account_names(count: int) -> list[str]:
    return [f"acct-{n}" for n in range(count)]


def make_requests(settings: Settings, rng: random.Random) -> list[Submission]:
    """Distinct transfer requests; the abort shares are fixed so small runs still cover them."""
    names = account_names(settings.accounts)
    requests: list[Submission] = []
    for n in range(settings.requests):
        src, dst = rng.sample(names, 2)
        amount = rng.randint(1, max(1, settings.balance // 5))
        if n % 20 == 7:
            dst = f"ghost-{rng.randrange(3)}"  # never opened: aborts after the debit
        elif n % 12 == 5:
            amount = rng.randint(settings.balance + 1, 3 * settings.balance)  # more than anyone has
        requests.append((f"req-{n:05d}", {"src": src, "dst": dst, "amount": amount}))
    return requests


def make_submissions(
    requests: Sequence[Submission], settings: Settings, rng: random.Random
) -> list[Submission]:
    """Each request 2-3 times, the copies a few places apart so they run concurrently."""
    spread = 2.0 * settings.workers * settings.window
    placed = [
        (n + rng.uniform(0, spread), request)
        for n, request in enumerate(requests)
        for _copy in range(rng.choice((2, 3)))
    ]
    placed.sort(key=lambda item: item[0])
    return [request for _position, request in placed]


def work(path: str, tasks: Connection, answers: Connection) -> None:
    """A worker process: run each transfer handed to it and send back its outcome.

    It holds no state worth keeping: killing it at any instant loses nothing
    that re-running the same request ids elsewhere would not restore.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    store = SqliteStore(path)
    try:
        while True:
            try:
                task = tasks.recv()
            except EOFError:
                return  # the parent is gone
            if task is None:
                return
            slot, request_id, req = task
            try:
                answers.send((slot, "answer", run_result(transfer(req), request_id=request_id, store=store)))
            except (ConflictError, TransientStoreError) as exc:  # retrying the request resumes it
                answers.send((slot, "retry", repr(exc)))
            except IdemflowError as exc:  # a bad request: retrying would not help
                answers.send((slot, "error", repr(exc)))
    finally:
        store.close()


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    tasks: Connection
    answers: Connection
    unkeyed: bool
    outstanding: dict[int, Submission] = field(default_factory=dict)
    answered: int = 0

    def send(self, slot: int, submission: Submission) -> None:
        self.outstanding[slot] = submission
        request_id, req = submission
        self.tasks.send((slot, f"{request_id}#{slot}" if self.unkeyed else request_id, req))

    def stop(self, *, kill: bool) -> None:
        if kill and self.process.pid is not None:
            os.kill(self.process.pid, signal.SIGKILL)
        elif self.process.is_alive():
            with contextlib.suppress(OSError):  # it died meanwhile: join() reaps it
                self.tasks.send(None)
        self.process.join(timeout=None if kill else 10)
        if self.process.is_alive():  # pragma: no cover - a worker that ignored the stop
            self.process.kill()
            self.process.join()
        self.tasks.close()
        self.answers.close()


def _start_worker(ctx: SpawnContext, settings: Settings) -> _Worker:
    task_out, task_in = ctx.Pipe(duplex=False)
    answer_out, answer_in = ctx.Pipe(duplex=False)
    process = ctx.Process(target=work, args=(str(settings.path), task_out, answer_in), daemon=True)
    process.start()
    # Keep only our ends: a dead worker then shows up as EOF on its answers.
    task_out.close()
    answer_in.close()
    return _Worker(process, task_in, answer_out, settings.unkeyed)


def reset(path: Path) -> None:
    """Delete the SQLite file and its WAL companions, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def run_harness(settings: Settings) -> Report:
    """Run the whole demo once and verify it (see the module docstring).

    Blocking; it starts and reaps its own worker processes. For example::

        report = run_harness(Settings(path=Path("/tmp/t.sqlite3"), workers=2, requests=50, seed=1))
        assert report.ok, report.render()
    """
    started = time.monotonic()
    rng = random.Random(settings.seed)
    reset(settings.path)
    store = SqliteStore(settings.path)
    try:
        opening = {name: settings.balance for name in account_names(settings.accounts)}
        for name, balance in opening.items():
            run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
        requests = make_requests(settings, rng)
        submissions = make_submissions(requests, settings, rng)
        answers, stats, problems = _drive(settings, submissions, rng, started)
        outcomes: dict[str, tuple[TransferRequest, Outcome]] = {}
        for request_id, req in requests:
            got = answers.get(request_id, [])
            if not got:
                problems.append(("answers", f"{request_id} never got an answer"))
                continue
            different = [other for other in got[1:] if other != got[0]]
            if different:
                problems.append(("answers", f"{request_id} answered {got[0]} and {different[0]}"))
            outcomes[request_id] = (req, got[0])
        verdict = check(store, opening=opening, outcomes=outcomes)
    finally:
        store.close()
    return Report(
        settings=settings,
        requests=len(requests),
        submissions=len(submissions),
        kills=stats["kills"],
        resent=stats["resent"],
        retried=stats["retried"],
        raced=stats["raced"],
        verdict=verdict,
        problems=verdict.problems + tuple(message for _check, message in problems),
        failed=frozenset(check for check, _message in problems) | verdict.failed,
        seconds=time.monotonic() - started,
    )


def _drive(
    settings: Settings, submissions: Sequence[Submission], rng: random.Random, started: float
) -> tuple[dict[str, list[Outcome]], Counter[str], list[tuple[str, str]]]:
    """Hand out the submissions, collect answers, kill and replace workers."""
    ctx = multiprocessing.get_context("spawn")
    workers = [_start_worker(ctx, settings) for _ in range(settings.workers)]
    pending: deque[tuple[int, Submission]] = deque(enumerate(submissions))
    answers: dict[str, list[Outcome]] = {}
    stats: Counter[str] = Counter(kills=0, resent=0, retried=0, raced=0)
    problems: list[tuple[str, str]] = []
    # Kill after these many answers (plus jitter): spread over the run, never at its very end.
    room = range(1, max(2, len(submissions) * 9 // 10))
    kill_after = deque(sorted(rng.sample(room, min(settings.kills, len(room)))))
    kill_at: float | None = None
    received = 0

    def replace(worker: _Worker, *, kill: bool) -> None:
        worker.stop(kill=kill)
        fresh = _start_worker(ctx, settings)
        for slot, submission in worker.outstanding.items():
            fresh.send(slot, submission)
        stats["resent"] += len(worker.outstanding)
        workers[workers.index(worker)] = fresh

    try:
        while pending or any(worker.outstanding for worker in workers):
            if time.monotonic() - started > settings.timeout:
                problems.append(("run", f"timed out after {settings.timeout:.0f} s with work left"))
                break
            stats["raced"] += _dispatch(workers, pending, settings.window)
            wait_for = 1.0 if kill_at is None else max(0.0, kill_at - time.monotonic())
            ready = wait([worker.answers for worker in workers], timeout=wait_for)
            for worker in [worker for worker in workers if worker.answers in ready]:
                try:
                    slot, kind, outcome = worker.answers.recv()
                except (EOFError, OSError):
                    worker.process.join()
                    code = worker.process.exitcode
                    problems.append(
                        ("run", f"a worker died on its own (exit code {code}); see its traceback")
                    )
                    stats["deaths"] += 1
                    if stats["deaths"] > settings.workers:
                        raise _GiveUp from None  # a broken setup, not bad luck: do not respawn forever
                    replace(worker, kill=False)
                    continue
                submission = worker.outstanding.pop(slot)
                worker.answered += 1
                if kind == "retry":
                    stats["retried"] += 1
                    pending.append((slot, submission))
                    continue
                if kind == "error":
                    problems.append(("run", f"{submission[0]} failed: {outcome}"))
                    continue
                answers.setdefault(submission[0], []).append(outcome)
                received += 1
                if kill_at is None and kill_after and received >= kill_after[0]:
                    kill_after.popleft()
                    kill_at = time.monotonic() + rng.uniform(0, settings.kill_jitter)
            if kill_at is not None and time.monotonic() >= kill_at:
                kill_at = None
                # A busy worker, preferably one past its start-up (it has answered): it is
                # somewhere inside a transfer, between or in the middle of its commits.
                busy = [worker for worker in workers if worker.outstanding]
                started_up = [worker for worker in busy if worker.answered]
                if busy:
                    replace(rng.choice(started_up or busy), kill=True)
                    stats["kills"] += 1
    except _GiveUp:
        problems.append(("run", "workers keep dying: gave up"))
    finally:
        for worker in workers:
            worker.stop(kill=False)
    return answers, stats, problems


class _GiveUp(Exception):
    """Stop handing out work (see :func:`_drive`)."""


def _dispatch(workers: Sequence[_Worker], pending: deque[tuple[int, Submission]], window: int) -> int:
    """One submission per worker per round, so neighbouring copies land on different workers.

    Returns how many were sent while another copy of the same request was
    still unanswered on another worker: the racing executions.
    """
    raced = 0
    progress = True
    while pending and progress:
        progress = False
        for worker in workers:
            if pending and len(worker.outstanding) < window:
                slot, submission = pending.popleft()
                request_id = submission[0]
                raced += any(
                    other is not worker and any(sent[0] == request_id for sent in other.outstanding.values())
                    for other in workers
                )
                worker.send(slot, submission)
                progress = True
    return raced


# -- command line ----------------------------------------------------------------


def parse(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m samples.transfer.demo",
        description="Bank transfers from worker processes on one SQLite file, SIGKILLed at random; "
        "then check that every request took effect exactly once.",
    )
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--requests", type=int, default=300, help="distinct transfer requests (default 300)")
    parser.add_argument("--accounts", type=int, default=8, help="accounts (default 8)")
    parser.add_argument("--balance", type=int, default=1000, help="opening balance of each (default 1000)")
    parser.add_argument("--kills", type=int, default=12, help="workers to SIGKILL (default 12)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--data", type=Path, default=Path("demo-data"), help="directory of the SQLite file")
    parser.add_argument(
        "--unkeyed",
        action="store_true",
        help="give every copy its own request id, as code without idempotence keys would (expect FAIL)",
    )
    args = parser.parse_args(argv)
    if args.workers < 1 or args.requests < 1 or args.accounts < 2 or args.kills < 0 or args.balance < 1:
        parser.error("need --workers >= 1, --requests >= 1, --accounts >= 2, --balance >= 1, --kills >= 0")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    return Settings(
        path=args.data / DB_NAME,
        workers=args.workers,
        requests=args.requests,
        accounts=args.accounts,
        balance=args.balance,
        kills=args.kills,
        unkeyed=args.unkeyed,
        seed=seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo, print the report; exit status 0 on PASS, 1 on FAIL."""
    settings = parse(argv)
    print(
        f"running {settings.requests} transfers (with duplicates) on {settings.workers} worker processes, "
        f"killing {settings.kills} of them ...",
        flush=True,
    )
    report = run_harness(settings)
    print(report.render(), flush=True)
    return 0 if report.ok else 1


__all__ = ["Report", "Settings", "Submission", "main", "make_requests", "make_submissions", "run_harness"]

if __name__ == "__main__":
    sys.exit(main())
