"""Real processes, really killed: SIGKILL against workflows sharing one SQLite file.

The fault-injecting store proves the algorithm; these prove the durable
store under it. A process killed with SIGKILL gets no chance to roll back,
close its connection or finish a write, so what the file holds afterwards is
exactly what SQLite's WAL made durable. The harness is the one ``make demo``
runs (:mod:`samples.transfer.demo`), at a fixed seed and smaller sizes.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
from collections import Counter
from collections.abc import Callable, Generator
from contextlib import closing
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from idemflow import Idem, Tx, atomic, run, workflow
from idemflow.keys import parse_memo_key
from idemflow.stores import SqliteStore
from idemflow.testing import data_rows
from samples.transfer.demo import Settings, main, run_harness

pytestmark = pytest.mark.slow

SEED = 20130123  # POPL 2013


def test_transfers_take_effect_exactly_once_under_sigkill(tmp_path: Path) -> None:
    settings = Settings(
        path=tmp_path / "transfer.sqlite3", workers=3, requests=150, accounts=6, kills=12, seed=SEED
    )
    report = run_harness(settings)
    assert report.ok, report.render()
    verdict = report.verdict
    assert report.kills == 12
    assert report.resent >= report.kills  # every kill interrupted at least one unanswered submission
    assert report.submissions > report.requests  # duplicates were sent
    assert verdict.money_before == verdict.money_after == 6 * settings.balance
    assert verdict.completed + sum(verdict.aborted.values()) == report.requests
    assert verdict.audit_rows == verdict.completed
    assert verdict.refunds == verdict.expected_refunds == verdict.aborted["no such account"] > 0


def test_demo_command_line_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--data", str(tmp_path), "--workers", "2", "--requests", "40", "--kills", "3", "--seed", "7"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out
    assert "3 SIGKILLs" in out and "seed 7" in out


def test_the_check_fails_when_duplicates_run_under_fresh_request_ids(tmp_path: Path) -> None:
    """The harness has teeth: without idempotence keys duplicates apply twice and it says so."""
    settings = Settings(
        path=tmp_path / "transfer.sqlite3", workers=2, requests=30, kills=0, seed=SEED, unkeyed=True
    )
    report = run_harness(settings)
    assert not report.ok
    assert {"audit", "balances", "answers"} <= report.failed
    assert "FAIL" in report.render()


# -- a commit-heavy loop, killed again and again -------------------------------------

ROWS = 8
"""Rows each ``batch`` step writes in one commit: all of them must survive a kill, or none."""
PARTS = 3


def _write_rows(n: int) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        for i in range(ROWS):
            tx.put(f"{n}-{i}", n)
        tx.increment("rows", ROWS)
        return n

    return body


def _count(tx: Tx) -> None:
    tx.increment("done")


@workflow("batch")
def batch(n: int) -> Generator[Idem[Any], Any, int]:
    yield atomic("items", f"p{n % PARTS}", _write_rows(n), name="rows")
    yield atomic("items", "totals", _count, name="count")
    return n


def _commit_loop(path: str, start: int, stop: int, progress: Connection) -> None:
    """Child process: run batches back to back; most of its time is spent inside commits,
    so a kill at a random moment usually lands in the middle of one."""
    store = SqliteStore(path)
    for n in range(start, stop):
        run(batch(n), request_id=f"batch-{n}", store=store)
        progress.send(n)


def _assert_consistent(path: Path) -> set[int]:
    """The file is sound and every commit is all-or-nothing; returns the batches whose rows exist."""
    with closing(sqlite3.connect(path)) as conn:  # opening it recovers the WAL a killed writer left
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = SqliteStore(path)
    try:
        rows = data_rows(store, "items")
        memos: Counter[tuple[str, str]] = Counter()
        memo_partitions: dict[tuple[str, str], str] = {}
        for partition, row_key, _row in store.scan("items"):
            parsed = parse_memo_key(row_key)
            if parsed is not None:
                memos[(parsed[1], parsed[2])] += 1
                memo_partitions[(parsed[1], parsed[2])] = partition
    finally:
        store.close()
    written: set[int] = set()
    for n in {int(key.split("-")[0]) for (_t, _p, key) in rows if key[0].isdigit()}:
        present = [("items", f"p{n % PARTS}", f"{n}-{i}") in rows for i in range(ROWS)]
        assert all(present), f"batch {n}: only some of its rows survived"
        assert memos[(f"batch-{n}", "s1")] == 1, f"batch {n}: rows without their memo"
        written.add(n)
    first_steps = {request for (request, tag) in memos if tag == "s1"}
    assert first_steps == {f"batch-{n}" for n in written}, "a memo without its rows"
    for part in range(PARTS):
        expected = ROWS * sum(1 for n in written if n % PARTS == part)
        assert rows.get(("items", f"p{part}", "rows"), 0) == expected, f"p{part}: counter and rows disagree"
    counted = sum(1 for (_request, tag) in memos if tag == "s2")
    assert rows.get(("items", "totals", "done"), 0) == counted, "the counter and its memos disagree"
    return written


def test_sigkill_mid_commit_leaves_the_file_consistent_and_resumable(tmp_path: Path) -> None:
    total, kills = 600, 12
    path = tmp_path / "loop.sqlite3"
    SqliteStore(path).close()
    rng = random.Random(SEED)
    ctx = multiprocessing.get_context("spawn")
    start = 0
    for _kill in range(kills):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_commit_loop, args=(str(path), start, total, send), daemon=True)
        child.start()
        send.close()
        last = start
        for _ in range(rng.randint(3, 40)):
            last = receive.recv()
        receive.poll(rng.uniform(0, 0.005))  # a random moment inside the next batches
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL
        receive.close()
        written = _assert_consistent(path)
        assert set(range(last + 1)) <= written
        start = last  # a retry: the last answered batch again, then the one that was in flight
    store = SqliteStore(path)
    try:
        assert [run(batch(n), request_id=f"batch-{n}", store=store) for n in range(total)] == list(
            range(total)
        )
    finally:
        store.close()
    assert _assert_consistent(path) == set(range(total))
    store = SqliteStore(path)
    try:
        assert data_rows(store, "items")[("items", "totals", "done")] == total  # each batch counted once
    finally:
        store.close()
