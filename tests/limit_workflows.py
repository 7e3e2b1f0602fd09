"""Workflows under limits that count themselves in an outside table, for worker processes
(``idemflow worker tests.limit_workflows:WORKFLOWS``).

The outside table is a SQLite file named by ``IDEMFLOW_TEST_LIMITS_FILE``, outside the store:
for each kind of call (``pair``: inside a workflow limited to 2; ``provider``: inside a call
whose effect names a group of 2, from two workflows), ``inside`` is how many are between their
entry and their exit right now and ``peak`` the most there ever were; ``open`` lists who is
inside, by process, so a test that SIGKILLs a process takes its entries out (a dead process is
inside nothing); ``starts`` keeps each paced request's start time, as its ``now()`` step read it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Generator
from typing import Any

from idemflow import Concurrency, LimitGroup, Rate, atomic, checkpoint, effect, now, workflow

FILE_ENV = "IDEMFLOW_TEST_LIMITS_FILE"
KINDS = ("pair", "provider")
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
        db.execute("CREATE TABLE IF NOT EXISTS open (token TEXT PRIMARY KEY, pid INTEGER, kind TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS stats (kind TEXT PRIMARY KEY, inside INTEGER, peak INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS starts (n INTEGER PRIMARY KEY, at REAL)")
        db.executemany("INSERT OR IGNORE INTO stats VALUES (?, 0, 0)", [(kind,) for kind in KINDS])


def take_out(db: sqlite3.Connection, pid: int) -> int:
    """Remove a killed process's entries: it is inside nothing now."""
    db.execute("BEGIN IMMEDIATE")
    gone = db.execute("SELECT kind, COUNT(*) FROM open WHERE pid = ? GROUP BY kind", (pid,)).fetchall()
    db.execute("DELETE FROM open WHERE pid = ?", (pid,))
    db.executemany("UPDATE stats SET inside = inside - ? WHERE kind = ?", [(n, kind) for kind, n in gone])
    db.execute("COMMIT")
    return sum(int(n) for _, n in gone)


def peaks(db: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """``{kind: (inside, peak)}``."""
    return {kind: (int(inside), int(peak)) for kind, inside, peak in db.execute("SELECT * FROM stats")}


def _counted(kind: str, key: str) -> str:
    token = f"{key}/{secrets.token_hex(4)}"  # a retried call is another entry
    db = connect()
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO open VALUES (?, ?, ?)", (token, os.getpid(), kind))
        db.execute(
            "UPDATE stats SET inside = inside + 1, peak = MAX(peak, inside + 1) WHERE kind = ?", (kind,)
        )
        db.execute("COMMIT")
        threading.Event().wait(INSIDE)
        db.execute("BEGIN IMMEDIATE")
        if db.execute("DELETE FROM open WHERE token = ?", (token,)).rowcount:
            db.execute("UPDATE stats SET inside = inside - 1 WHERE kind = ?", (kind,))
        db.execute("COMMIT")
    finally:
        db.close()
    return token


def _inside(key: str) -> str:
    return _counted("pair", key)


def _provider(key: str) -> str:
    return _counted("provider", key)


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


PROVIDER = LimitGroup("provider", concurrency=Concurrency(2, lease=LEASE))
"""A provider taking two calls at once, from every workflow that calls it."""


@workflow("booking")
def booking(n: int) -> Generator[Any, Any, int]:
    """Two calls inside the provider at most, with the booking's other steps outside it."""
    yield atomic("tablea", f"booking{n}", lambda tx: tx.increment("held"))
    yield checkpoint()  # the rest is the workers'
    yield effect(_provider, group=PROVIDER)
    yield atomic("tablea", f"booking{n}", lambda tx: tx.increment("done"))
    return n


@workflow("refunding")
def refunding(n: int) -> Generator[Any, Any, int]:
    """The same provider, from another workflow."""
    yield checkpoint()
    yield effect(_provider, group=PROVIDER)
    yield atomic("tablea", f"refunding{n}", lambda tx: tx.increment("done"))
    return n


WORKFLOWS = [pair, paced, booking, refunding]
