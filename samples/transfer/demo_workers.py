"""The transfer demo's worker processes, and the loop that hands them work and kills them.

Steps 3 and 4 of :mod:`samples.transfer.demo`: spawned workers run the submissions on the SQLite
file, the parent collects their answers, SIGKILLs busy workers and starts replacements. Apart from
what is sent (:mod:`samples.transfer.demo_requests`) and checked (:mod:`samples.transfer.demo_run`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess

from idemflow import ConflictError, IdemflowError, TransientError, run_result
from idemflow.stores import SqliteStore
from samples.transfer.demo_requests import Settings, Submission
from samples.transfer.workflows import Outcome, transfer


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
            except (ConflictError, TransientError) as exc:  # retrying the request resumes it
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


def drive(
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
            # Once nothing is left to hand out the jitter could outlast the run: kill now.
            if kill_at is not None and (time.monotonic() >= kill_at or not pending):
                # A busy worker, preferably one past its start-up (it has answered): it is
                # somewhere inside a transfer, between or in the middle of its commits. With
                # none busy the kill waits for the next one, so every kill asked for happens.
                busy = [worker for worker in workers if worker.outstanding]
                started_up = [worker for worker in busy if worker.answered]
                if busy:
                    kill_at = None
                    replace(rng.choice(started_up or busy), kill=True)
                    stats["kills"] += 1
    except _GiveUp:
        problems.append(("run", "workers keep dying: gave up"))
    finally:
        for worker in workers:
            worker.stop(kill=False)
    return answers, stats, problems


class _GiveUp(Exception):
    """Stop handing out work (see :func:`drive`)."""


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


__all__ = ["drive", "work"]
