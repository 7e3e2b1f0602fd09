"""The flow-control workload's workflow, for ``idemflow worker samples.chaos.limits_flows:WORKFLOWS``.

``guarded`` is limited to :data:`SLOTS` at once and counts itself in an outside SQLite file
(``CHAOS_LIMITS_FILE``): ``inside`` now, the ``peak`` ever seen, and who is inside by process
(``open``), so the driver can take a SIGKILLed process's entries out: a dead process is inside
nothing.

>>> guarded.limits[0].concurrency
Concurrency(slots=2, lease=4.0)
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Generator
from typing import Any

from idemflow import Concurrency, atomic, effect, workflow

FILE_ENV = "CHAOS_LIMITS_FILE"
SLOTS = 2
LEASE = 4.0
TABLES = ("guarded",)


def connect(path: str | None = None) -> sqlite3.Connection:
    db = sqlite3.connect(path or os.environ[FILE_ENV], timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def create(path: str) -> None:
    db = connect(path)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS open (token TEXT PRIMARY KEY, pid INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS stats (inside INTEGER, peak INTEGER)")
        db.execute("INSERT INTO stats SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM stats)")
    finally:
        db.close()


def take_out(path: str, pid: int) -> None:
    """A killed process's entries go: it is inside nothing now."""
    db = connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        gone = db.execute("DELETE FROM open WHERE pid = ?", (pid,)).rowcount
        db.execute("UPDATE stats SET inside = inside - ?", (gone,))
        db.execute("COMMIT")
    finally:
        db.close()


def stats(path: str) -> tuple[int, int]:
    """``(inside, peak)``."""
    db = connect(path)
    try:
        inside, peak = db.execute("SELECT inside, peak FROM stats").fetchone()
        return int(inside), int(peak)
    finally:
        db.close()


def _inside(key: str) -> None:
    token = f"{key}/{secrets.token_hex(4)}"
    db = connect()
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO open VALUES (?, ?)", (token, os.getpid()))
        db.execute("UPDATE stats SET inside = inside + 1, peak = MAX(peak, inside + 1)")
        db.execute("COMMIT")
        threading.Event().wait(0.05)
        db.execute("BEGIN IMMEDIATE")
        if db.execute("DELETE FROM open WHERE token = ?", (token,)).rowcount:
            db.execute("UPDATE stats SET inside = inside - 1")
        db.execute("COMMIT")
    finally:
        db.close()


@workflow("guarded", concurrency=Concurrency(SLOTS, lease=LEASE))
def guarded(n: int) -> Generator[Any, Any, int]:
    yield effect(_inside)
    yield atomic("guarded", f"g{n}", lambda tx: tx.increment("done"))
    return n


WORKFLOWS = [guarded]
