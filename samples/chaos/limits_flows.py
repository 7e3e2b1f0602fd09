"""The flow-control workload's workflows, for ``idemflow worker samples.chaos.limits_flows:WORKFLOWS``,
and the outside count they keep of themselves.

``guarded`` is limited to :data:`SLOTS` at once; ``supplied`` and ``resupplied`` call one
supplier whose effect names a limit group of :data:`SLOTS` calls at once. Each counts itself in
an outside SQLite file (``CHAOS_LIMITS_FILE``), by kind of limit: ``inside`` now, the ``peak``
ever seen, and who is inside by process (``open``), so the driver can take a SIGKILLed process's
entries out: a dead process is inside nothing. The test suite's workflows under limits
(``tests/support/limit_workflows.py``) keep the same count.

>>> guarded.limits[0].concurrency
Concurrency(slots=2, lease=4.0)
>>> SUPPLIER
LimitGroup('supplier', concurrency=2, rate=None)
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Generator, Iterable
from typing import Any

from idemflow import Concurrency, LimitGroup, atomic, checkpoint, effect, workflow

FILE_ENV = "CHAOS_LIMITS_FILE"
SLOTS = 2
LEASE = 4.0
TABLES = ("guarded",)
KINDS = ("workflow", "effect")
"""What a count is of: executions inside a limited workflow, calls inside a limited effect."""


def connect(path: str | None = None) -> sqlite3.Connection:
    db = sqlite3.connect(path or os.environ[FILE_ENV], timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def create(path: str, kinds: Iterable[str] = KINDS) -> None:
    db = connect(path)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS open (token TEXT PRIMARY KEY, pid INTEGER, kind TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS stats (kind TEXT PRIMARY KEY, inside INTEGER, peak INTEGER)")
        db.executemany("INSERT OR IGNORE INTO stats VALUES (?, 0, 0)", [(kind,) for kind in kinds])
    finally:
        db.close()


def take_out(path: str, pid: int) -> int:
    """A killed process's entries go: it is inside nothing now. How many it had."""
    db = connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        gone = db.execute("SELECT kind, COUNT(*) FROM open WHERE pid = ? GROUP BY kind", (pid,)).fetchall()
        db.execute("DELETE FROM open WHERE pid = ?", (pid,))
        db.executemany("UPDATE stats SET inside = inside - ? WHERE kind = ?", [(n, kind) for kind, n in gone])
        db.execute("COMMIT")
        return sum(int(n) for _, n in gone)
    finally:
        db.close()


def holders(path: str) -> list[tuple[int, str]]:
    """``(pid, kind)`` of every process inside something now."""
    db = connect(path)
    try:
        return [(int(pid), str(kind)) for pid, kind in db.execute("SELECT pid, kind FROM open")]
    finally:
        db.close()


def stats(path: str) -> dict[str, tuple[int, int]]:
    """``{kind: (inside, peak)}``."""
    db = connect(path)
    try:
        rows = db.execute("SELECT kind, inside, peak FROM stats")
        return {str(kind): (int(inside), int(peak)) for kind, inside, peak in rows}
    finally:
        db.close()


RENDEZVOUS_POLL = 0.01
"""Seconds between looks at the peak of an entry waiting for company (:func:`counted`)."""


def counted(kind: str, key: str, seconds: float, *, company: int = 0, patience: float = 0.0) -> str:
    """Be inside for ``seconds``, counted as ``kind``; the entry's token (a retry is another).

    With ``company``, an entry then stays until ``company`` entries were inside at once (the
    peak says so), for at most ``patience`` more seconds: a test that demands the limit be
    reached forces it instead of hoping that a loaded machine overlaps two short calls. Once the
    peak was reached nobody waits; keep ``patience`` well inside the slot's lease, or a waiter's
    slot would end under it and let one more in."""
    token = f"{key}/{secrets.token_hex(4)}"
    db = connect()
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO open VALUES (?, ?, ?)", (token, os.getpid(), kind))
        entered = "UPDATE stats SET inside = inside + 1, peak = MAX(peak, inside + 1) WHERE kind = ?"
        db.execute(entered, (kind,))
        db.execute("COMMIT")
        threading.Event().wait(seconds)
        deadline = time.monotonic() + patience
        while company and time.monotonic() < deadline:
            (peak,) = db.execute("SELECT peak FROM stats WHERE kind = ?", (kind,)).fetchone()
            if int(peak) >= company:
                break
            threading.Event().wait(RENDEZVOUS_POLL)
        db.execute("BEGIN IMMEDIATE")
        if db.execute("DELETE FROM open WHERE token = ?", (token,)).rowcount:
            db.execute("UPDATE stats SET inside = inside - 1 WHERE kind = ?", (kind,))
        db.execute("COMMIT")
    finally:
        db.close()
    return token


@workflow("guarded", concurrency=Concurrency(SLOTS, lease=LEASE))
def guarded(n: int) -> Generator[Any, Any, int]:
    yield effect(lambda key: counted("workflow", key, 0.05), name="inside")
    yield atomic("guarded", f"g{n}", lambda tx: tx.increment("done"))
    return n


SUPPLIER = LimitGroup("supplier", concurrency=Concurrency(SLOTS, lease=LEASE))
"""A supplier taking two calls at once, from both workflows that call it."""


def _supply(key: str) -> str:
    return counted("effect", key, 0.05)


@workflow("supplied")
def supplied(n: int) -> Generator[Any, Any, int]:
    yield checkpoint()  # the workers' (the driver counts nothing itself)
    yield atomic("guarded", f"s{n}", lambda tx: tx.increment("ordered"))
    yield effect(_supply, group=SUPPLIER)
    yield atomic("guarded", f"s{n}", lambda tx: tx.increment("done"))
    return n


@workflow("resupplied")
def resupplied(n: int) -> Generator[Any, Any, int]:
    yield checkpoint()
    yield effect(_supply, group=SUPPLIER)
    yield atomic("guarded", f"r{n}", lambda tx: tx.increment("done"))
    return n


WORKFLOWS = [guarded, supplied, resupplied]
