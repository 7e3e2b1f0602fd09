"""The SQLite file itself: a connection opened on it (its busy timeout, WAL mode, the
``synchronous`` level, the schema, made or upgraded), and its size on disk.

Many processes may open a new file at once, and SQLite answers their race for it with "locked"
instead of waiting: opening retries that, and maps what cannot be retried to one error naming
the path. That is the file's concern, not the store's operations, so it is written here once;
:class:`~idemflow.stores.sqlite.SqliteStore` keeps one connection per thread and role.
"""

from __future__ import annotations

import os
import sqlite3

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random

from idemflow.stores._sqlite_errors import sqlite_error
from idemflow.stores._sqlite_runs import upgrade

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idemflow_rows (
    tbl TEXT NOT NULL,
    part TEXT NOT NULL,
    rk TEXT NOT NULL,
    v TEXT NOT NULL,
    ver INTEGER NOT NULL,
    expires REAL,
    started REAL,
    PRIMARY KEY (tbl, part, rk)
) WITHOUT ROWID
"""
_FLOOR_SCHEMA = """
CREATE TABLE IF NOT EXISTS idemflow_floor (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    ver INTEGER NOT NULL
)
"""


def connect(path: str, busy_ms: int, synchronous: str) -> sqlite3.Connection:
    """A connection to the file at ``path``, set up (WAL, ``synchronous``, the schema), waiting
    ``busy_ms`` for other writers; the :class:`~idemflow.errors.BackendError` its failure means
    (:func:`~idemflow.stores._sqlite_errors.sqlite_error`), naming the path, if it cannot be opened."""
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        prepare = Retrying(
            stop=stop_after_delay(max(busy_ms / 1000, 1.0)),
            wait=wait_random(0.005, 0.05),
            retry=retry_if_exception(_locked),
            reraise=True,
        )
        prepare(_set_up, conn, synchronous)
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise sqlite_error(f"cannot open SQLite store at {path!r}", exc, "connect", opening=True) from exc
    return conn


def _set_up(conn: sqlite3.Connection, synchronous: str) -> None:
    """WAL mode and the schema, on a connection to a file other processes may be opening too.

    ``auto_vacuum`` first, on a new (empty) file only: SQLite takes it only before the first
    table, and on an existing file the statement would take the write lock to rewrite the header
    (an existing file keeps its mode)."""
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute(_SCHEMA)
    conn.execute(_FLOOR_SCHEMA)
    upgrade(conn)  # the index of run records by start time (a file from before 1.0 gets it)


def file_size(path: str) -> int:
    """The database file and its write-ahead log, in bytes."""
    return sum(os.path.getsize(name) for name in (path, path + "-wal") if os.path.exists(name))


def _locked(exc: BaseException) -> bool:
    """SQLite answers "locked" without waiting in its busy handler when processes race to
    create a file or switch it to WAL mode: that race resolves itself, so retry it."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
