"""DBOS Transact in a process of its own, one per database, served request by request over a pipe
(``python -m benchmarks.cost.dbos_process SETUP``: the child's side).

Why a process: DBOS is one instance per process (``DBOS(config=...)`` is a singleton with one
system database), so DBOS on SQLite and DBOS on PostgreSQL cannot share ``cost``'s process, and an
interleaved run needs both. A process each also keeps DBOS's background threads (its queue
poller, its notification listener) off the CPU figure of every other variant.

What the child measures, so that the pipe is no part of it: each request's latency
(``perf_counter`` around the workflow call), its own CPU (``getrusage``: user + system, every
thread, as ``cost`` measures its own), and DBOS's transactions and statements on every SQLAlchemy
engine (its system database and the datasource), split by thread as in ``cost``: on the caller's
thread (the child's main thread) or off it.

Protocol: one line per request from the parent (``c N`` serve request N; ``u`` CPU seconds so far;
``n`` the counts so far), one JSON line back each; end of input ends DBOS and the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from benchmarks.cost.meter import Counted
from benchmarks.cost.rounds import cpu_seconds
from benchmarks.peers.dbos import DbosSetup, launch_dbos

ROOT = Path(__file__).resolve().parents[2]


class DbosCounts:
    """Transactions and statements of every SQLAlchemy engine (DBOS's system and application
    databases are its only ones here), on the caller's thread or off it."""

    def __init__(self) -> None:
        from sqlalchemy import event as sa_event  # SQLAlchemy: the bench extra, with DBOS
        from sqlalchemy.engine import Engine  # the same

        self.counted = Counted()
        self._lock = threading.Lock()
        sa_event.listen(Engine, "commit", self._transaction)
        sa_event.listen(Engine, "rollback", self._transaction)
        sa_event.listen(Engine, "before_cursor_execute", self._statement)

    def _transaction(self, *_: Any) -> None:
        with self._lock:
            if threading.current_thread() is threading.main_thread():
                self.counted.path += 1
            else:
                self.counted.off += 1
            self.counted.ops["transactions"] += 1

    def _statement(self, *_: Any) -> None:
        with self._lock:
            self.counted.ops["statements"] += 1

    def snapshot(self) -> Counted:
        with self._lock:
            return Counted(self.counted.path, self.counted.off, ops=Counter(self.counted.ops))


class DbosProcess:
    """The parent's handle on one child: :meth:`call`, :meth:`cpu` and :meth:`counted` ask it."""

    def __init__(self, setup: DbosSetup) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        command = [sys.executable, "-m", "benchmarks.cost.dbos_process", json.dumps(asdict(setup))]
        self._child = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=env, text=True
        )
        self._ask(None)  # its first line: DBOS launched

    def _ask(self, line: str | None) -> Any:
        assert self._child.stdin is not None and self._child.stdout is not None
        if line is not None:
            self._child.stdin.write(line + "\n")
            self._child.stdin.flush()
        answer = self._child.stdout.readline()
        if not answer:
            raise RuntimeError(f"the DBOS process exited ({self._child.wait()}): see its output above")
        return json.loads(answer)

    def call(self, number: int) -> float:
        """Serve request ``number``; the seconds it took in the child."""
        return float(self._ask(f"c {number}"))

    def cpu(self) -> float:
        return float(self._ask("u"))

    def counted(self) -> Counted:
        path, off, ops = self._ask("n")
        return Counted(path, off, ops=Counter(ops))

    def close(self) -> None:
        assert self._child.stdin is not None
        self._child.stdin.close()
        try:
            self._child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()


def serve(setup: DbosSetup, requests: IO[str], answers: IO[str]) -> None:
    """The child: launch DBOS on ``setup``, then answer ``requests`` until they end."""
    counts = DbosCounts()
    call, destroy = launch_dbos(setup)

    def answer(value: Any) -> None:
        answers.write(json.dumps(value) + "\n")
        answers.flush()

    answer("ready")
    try:
        for line in requests:
            what, _, number = line.strip().partition(" ")
            if what == "c":
                began = time.perf_counter()
                call(int(number))
                answer(time.perf_counter() - began)
            elif what == "u":
                answer(cpu_seconds())
            else:
                got = counts.snapshot()
                answer([got.path, got.off, dict(got.ops)])
    finally:
        destroy()


def main() -> None:
    """The child's entry: answers on a copy of stdout, stdout itself sent to stderr (whatever DBOS
    prints must not reach the parent as an answer)."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    fields = json.loads(sys.argv[1])
    fields["schema"] = tuple(fields["schema"])
    serve(DbosSetup(**fields), sys.stdin, answers)


if __name__ == "__main__":
    main()
