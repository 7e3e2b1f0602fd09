"""Workflows under limits that count themselves in an outside table, for worker processes
(``idemflow worker tests.limit_workflows:WORKFLOWS``).

The outside table is a SQLite file named by ``IDEMFLOW_TEST_LIMITS_FILE``, outside the store:
``inside`` is how many executions are between their entry and their exit right now and
``peak`` the most there ever were; ``open`` lists who is inside, by process, so a test that
SIGKILLs a process takes its entries out (a dead process is inside nothing); ``starts`` keeps
each paced request's start time, as its ``now()`` step read it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Generator
from typing import Any

from idemflow import Concurrency, Rate, atomic, effect, now, workflow

FILE_ENV = "IDEMFLOW_TEST_LIMITS_FILE"
LEASE = 6.0
"""The pair's lease: a SIGKILLed holder's slot is free this long after its last renewal. Not
shorter: moto serves one call at a time, and under 24 threads one call can wait seconds, which a
holder must not spend past its lease (docs/flow-control.md)."""
INSIDE = 0.15
"""Seconds an execution of the pair stays inside: long enough for the workers' 24 threads to pile up."""


def connect(path: str | None = None) -> sqlite3.Connection:
    db = sqlite3.connect(path or os.environ[FILE_ENV], timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def create(path: str) -> None:
    with connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS open (token TEXT PRIMARY KEY, pid INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS stats (inside INTEGER, peak INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS starts (n INTEGER PRIMARY KEY, at REAL)")
        db.execute("INSERT INTO stats SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM stats)")


def take_out(db: sqlite3.Connection, pid: int) -> int:
    """Remove a killed process's entries: it is inside nothing now."""
    db.execute("BEGIN IMMEDIATE")
    gone = db.execute("DELETE FROM open WHERE pid = ?", (pid,)).rowcount
    db.execute("UPDATE stats SET inside = inside - ?", (gone,))
    db.execute("COMMIT")
    return int(gone)


def _inside(key: str) -> str:
    token = f"{key}/{secrets.token_hex(4)}"  # a retried call is another entry
    db = connect()
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO open VALUES (?, ?)", (token, os.getpid()))
        db.execute("UPDATE stats SET inside = inside + 1, peak = MAX(peak, inside + 1)")
        db.execute("COMMIT")
        threading.Event().wait(INSIDE)
        db.execute("BEGIN IMMEDIATE")
        if db.execute("DELETE FROM open WHERE token = ?", (token,)).rowcount:
            db.execute("UPDATE stats SET inside = inside - 1")
        db.execute("COMMIT")
    finally:
        db.close()
    return token


@workflow("pair", concurrency=Concurrency(2, lease=LEASE))
def pair(n: int) -> Generator[Any, Any, int]:
    """Never more than two requests inside, across every process sharing the store."""
    yield effect(_inside)
    yield atomic("tablea", f"pair{n}", lambda tx: tx.increment("done"))
    return n


def _started(n: int, at: float) -> Any:
    def record(key: str) -> None:
        db = connect()
        try:
            db.execute("INSERT OR IGNORE INTO starts VALUES (?, ?)", (n, at))
        finally:
            db.close()

    return effect(record)


PACE = Rate(5, per=1.0)


@workflow("paced", rate=PACE)
def paced(n: int) -> Generator[Any, Any, int]:
    """At most five starts a second, plus the burst of five."""
    at = yield now()
    yield _started(n, at)
    yield atomic("tablea", f"paced{n}", lambda tx: tx.increment("done"))
    return n


WORKFLOWS = [pair, paced]
