"""How a SQLite store finds its expired rows and gives freed pages back: a moving window over the
file, paced by what the writers add, and bounded steps of ``incremental_vacuum``.

Why a window over the primary key and not an index on ``expires``: an index costs every commit
one more page written (measured: +50% WAL pages, about +9% per request at ``synchronous=FULL``);
a window costs nothing on the commit path. What a window must get right is its pace: it reads
data rows and held run records it can never delete, so a fixed amount per minute falls behind a
file that grows faster than that (measured, ``python -m benchmarks soak``: 2,000 rows a minute
against about 7,000 written, 22,000 memos expired and still there after 10 minutes, the oldest
419 s late, and more each minute). :class:`Window` reads at least :data:`READ_PER_WRITE` rows per
row committed and the whole file at least once per :data:`PASS_SECONDS`, so an expired row waits
at most one pass: N / (8 W) seconds for N rows written at W rows a second, and never more than
half an hour, whatever the file's size (docs/decisions.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from idemflow.stores.base import Expired, RowRef

_KEY_AFTER = "(tbl, part, rk) > (?, ?, ?)"
_WINDOW_END = (
    f"SELECT tbl, part, rk FROM idemflow_rows WHERE {_KEY_AFTER} ORDER BY tbl, part, rk LIMIT 1 OFFSET ?"
)
_EXPIRED_IN = (
    "SELECT tbl, part, rk, ver, expires, v FROM idemflow_rows "
    f"WHERE {_KEY_AFTER} AND (tbl, part, rk) <= (?, ?, ?) AND expires < ? ORDER BY tbl, part, rk LIMIT ?"
)
_EXPIRED_AFTER = (
    "SELECT tbl, part, rk, ver, expires, v FROM idemflow_rows "
    f"WHERE {_KEY_AFTER} AND expires < ? ORDER BY tbl, part, rk LIMIT ?"
)
_COUNT_IN = f"SELECT count(*) FROM idemflow_rows WHERE {_KEY_AFTER} AND (tbl, part, rk) <= (?, ?, ?)"
_COUNT_AFTER = f"SELECT count(*) FROM idemflow_rows WHERE {_KEY_AFTER}"
WINDOW_ROWS = 2000
"""Rows one sweep reads (about 0.5 ms): the unit the pace is counted in."""
READ_PER_WRITE = 8
"""Rows the sweeps read per row committed: a pass over a file of N rows written at W rows a
second takes at most N / (8 W) seconds, so the expired rows waiting stay a bounded share of
what is written (the cost: about 2 µs of reading per row committed, off no caller's fsync)."""
PASS_SECONDS = 1800.0
"""The longest a pass may take, whatever the writers do: the sweeps read at least the last
pass's rows per this many seconds, so an expired row is met within about half an hour even in
a large file written slowly (10 million rows: about 5,600 rows a second, about 1% of a core)."""
_START = ("", "", "")
ROW_BYTES = 40
"""Bytes a row is taken to fill, to estimate a file's rows from its pages before a pass has
counted them: a small data row's size (a memo or run record fills 200-600), so the first pass
after a store opens errs on the fast side (a file of big rows is read several times quicker
than it needs, once)."""

KEEP_FREE_PAGES = 1024
"""Free pages a sweep leaves in the file for new rows to reuse (4 MiB at the default page size):
giving back pages the next minute's writes take again would only move them around."""
RELEASE_PAGES = 256
"""Most free pages one sweep (or one step of ``release``) gives back: bounded work per call."""


class Window:
    """Where the next sweep reads, and how far the sweeps are behind the writers.

    ``written`` is bumped by ``commit`` (rows in each commit; a lost update between threads
    costs nothing but a slightly later sweep); a sweep is due early once
    ``written > allowance``. The counts start again at each pass's end: a pass met every row
    there was, so it kept pace with whatever was written during it.

    >>> window = Window(now=0.0, rows=0)
    >>> window.written = 600
    >>> window.written > window.allowance, window.behind(now=0.0)
    (True, True)
    """

    __slots__ = ("allowance", "cursor", "last_pass", "read", "started", "written")

    def __init__(self, now: float, rows: int) -> None:
        self.cursor = _START
        self.written = 0
        self.read = 0
        self.last_pass = rows  # until the first pass ends: an estimate (:func:`rows_estimate`)
        self.started = now
        self.allowance = WINDOW_ROWS // READ_PER_WRITE

    def next(self, conn: sqlite3.Connection, now: float, limit: int) -> tuple[list[Expired], int, bool]:
        """The expired rows (at most ``limit``) of the next window, how many rows it covered, and
        whether it reached the end of the file (the next one starts again from the first row).

        SQLite walks the window, not Python: one query finds where the window ends (the
        :data:`WINDOW_ROWS`-th key), another returns only its expired rows, so the rows it cannot
        delete cost no Python object each (measured: 0.46 ms a window of 2,000 rows, 1.44 ms as
        rows handed to Python). A window counts its rows only when it stops short (the last
        window of a pass, or ``limit`` expired rows met first)."""
        start = self.cursor
        end = conn.execute(_WINDOW_END, (*start, WINDOW_ROWS - 1)).fetchone()
        if end is None:  # the window runs past the last row
            found = conn.execute(_EXPIRED_AFTER, (*start, now, limit)).fetchall()
        else:
            found = conn.execute(_EXPIRED_IN, (*start, *end, now, limit)).fetchall()
        rows = [Expired(RowRef(tbl, part, rk), ver, at, text) for tbl, part, rk, ver, at, text in found]
        if len(rows) >= limit:  # stopped at the limit: the next window starts after its last row
            last = (found[-1][0], found[-1][1], found[-1][2])
            covered = int(conn.execute(_COUNT_IN, (*start, *last)).fetchone()[0])
            self.cursor = last
            return rows, covered, False
        if end is None:
            covered = int(conn.execute(_COUNT_AFTER, start).fetchone()[0])
            self.cursor = _START
            return rows, covered, True
        self.cursor = (end[0], end[1], end[2])
        return rows, WINDOW_ROWS, False

    def advanced(self, covered: int, wrapped: bool, now: float) -> None:
        """A sweep read ``covered`` rows (and ended the pass if ``wrapped``)."""
        self.read += covered
        if wrapped:
            self.last_pass, self.read, self.written, self.started = self.read, 0, 0, now
        self.allowance = max(self.read, WINDOW_ROWS) // READ_PER_WRITE

    def behind(self, now: float) -> bool:
        """Whether the sweeps have read less than their pace asks (the next one is due at once);
        by time, a whole window short (a file smaller than a window is read whole every sweep)."""
        due = self.last_pass * (now - self.started) / PASS_SECONDS  # what the pass should have read by now
        return self.written > self.allowance or self.read + WINDOW_ROWS <= due


def rows_estimate(conn: sqlite3.Connection) -> int:
    """About how many rows the file holds, from its size alone (counting them reads the whole
    file): :data:`ROW_BYTES` a row, so the first pass after a store opens keeps the time pace too."""
    pages = (
        conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
    )
    return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0]) // ROW_BYTES


def auto_vacuum(conn: sqlite3.Connection) -> bool:
    """Whether the file gives pages back (``auto_vacuum=INCREMENTAL``; files made before it was set
    keep ``NONE`` until ``idemflow gc --vacuum``)."""
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2


def release(conn: sqlite3.Connection, keep: int, most: int) -> int:
    """Give back free pages beyond ``keep``, at most ``most`` (one ``incremental_vacuum``); how many.

    The caller holds the store's write lock. ``executescript``, because the pragma frees one
    page per step and ``execute`` takes only the first step (its rows have no columns).
    """
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    pages = min(free - keep, most)
    if pages <= 0:
        return 0
    conn.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
    return free - int(conn.execute("PRAGMA freelist_count").fetchone()[0])


def expired_rows(conn: sqlite3.Connection, now: float) -> Iterator[tuple[RowRef, float]]:
    """Every row whose ``expires_at`` passed, with it (one scan of the file: for operators)."""
    query = conn.execute(
        "SELECT tbl, part, rk, expires FROM idemflow_rows WHERE expires < ? ORDER BY tbl, part, rk", (now,)
    )
    while batch := query.fetchmany(1000):
        for tbl, part, rk, expires in batch:
            yield RowRef(tbl, part, rk), float(expires)
