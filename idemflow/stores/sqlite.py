"""The embedded durable store: one SQLite file, shared safely by many processes.

Why SQLite: it is in the standard library, durable (WAL with
``synchronous=FULL`` by default, so a result returned to a caller survives a
power loss), and its ``BEGIN IMMEDIATE`` write lock makes each commit a
serializable check-then-write across every process using the file.

All logical tables live in one physical table keyed by
``(table, partition, key)``; a commit may touch any of them.

>>> import tempfile, os
>>> from idemflow.stores import SqliteStore
>>> store = SqliteStore(os.path.join(tempfile.mkdtemp(), "demo.sqlite3"))
>>> store.capabilities.cross_partition_commit
True
>>> store.close()
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

from idemflow.errors import ConfigurationError
from idemflow.serialization import decode
from idemflow.stores import _sqlite_sweep as sweep
from idemflow.stores import expiry
from idemflow.stores._expiring import EXPIRE_EVERY, LIMIT, Backlog, Schedule, swept
from idemflow.stores._limits import check_commit
from idemflow.stores._runs_order import NEWEST_FIRST, Place
from idemflow.stores._sqlite_commit import SELECT_ROW, UPDATE_BUMP, apply
from idemflow.stores._sqlite_errors import sqlite_error
from idemflow.stores._sqlite_file import connect, file_size
from idemflow.stores._sqlite_runs import page_query
from idemflow.stores.base import (
    COMMITTED,
    Capabilities,
    CommitOutcome,
    Cond,
    Conflict,
    ExpiryReport,
    Op,
    Put,
    Row,
    RowRef,
    RunQuery,
    RunRow,
)

log = logging.getLogger("idemflow.stores.sqlite")

SQLITE_CAPABILITIES = Capabilities(
    cross_partition_commit=True,
    max_ops_per_commit=10_000,
    max_value_bytes=16 * 1024 * 1024,
    max_commit_bytes=256 * 1024 * 1024,
    max_key_bytes=64 * 1024,
    local_reads=True,
)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SqliteStore:
    """A :class:`~idemflow.stores.base.Store` on one SQLite file.

    Each thread gets its own connection (``sqlite3`` connections are not
    shared across threads); processes coordinate through SQLite's file locks.
    ``busy_timeout`` bounds how long a commit waits for another writer before
    it becomes a :class:`TransientError` for the engine to retry.

    Threads of one store take turns to write through an in-process lock:
    SQLite admits one writer anyway, and its busy handler makes a blocked
    writer sleep for milliseconds where a lock hands over in microseconds.

    Rows expire by themselves (:mod:`idemflow.stores.expiry`): a ``commit``, once its
    own work is done, reads the next 2,000 rows in key order after where the
    last sweep stopped (wrapping around at the end) and settles those whose
    ``expires_at`` passed, at most 100, in short write transactions. It does so
    at least once per ``expire_every`` seconds (None: never), and sooner when
    the sweeps are behind their pace: 8 rows read per row committed, and the
    whole file at least once per 30 minutes (:mod:`~idemflow.stores._sqlite_sweep`).
    New files use ``auto_vacuum=INCREMENTAL``, and a sweep that leaves more than
    4 MiB free gives up to 1 MiB back to the file system.

    ``runs list`` pages through a partial index of run records only, by start time
    (:mod:`idemflow.stores._sqlite_runs`): a run record's claim pays for it (one more page),
    no other row's write does, and its outcome, a blind write, neither.
    """

    capabilities = SQLITE_CAPABILITIES

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
        expire_every: float | None = EXPIRE_EVERY,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = os.fspath(path)
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._local = threading.local()
        self._round_trips = 0
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._expiry = Schedule(expire_every)
        conn = self._connection("main")  # the schema is made now: a bad path fails here
        self._window = sweep.Window(self._expiry.clock(), sweep.rows_estimate(conn))
        self._shrinks = sweep.auto_vacuum(conn)

    def _connection(self, role: Literal["main", "cache"]) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, role, None)
        if conn is not None:
            return conn
        # A cache write (completion record) needs no fsync: losing it costs a replay.
        sync = "NORMAL" if role == "cache" and self._synchronous != "OFF" else self._synchronous
        conn = connect(self.path, self._busy_ms, sync)
        setattr(self._local, role, conn)
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    def read(self, ref: RowRef) -> Row | None:
        self._round_trips += 1
        try:
            found = (
                self._connection("main").execute(SELECT_ROW, (ref.table, ref.partition, ref.key)).fetchone()
            )
        except sqlite3.OperationalError as exc:
            raise sqlite_error(f"SQLite read of {ref.table}/{ref.partition} failed", exc, "SELECT") from exc
        return None if found is None else Row(decode(found[0]), found[1])

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        self._round_trips += 1
        conn = self._connection("main")
        try:
            conn.execute("BEGIN")  # one snapshot for all the reads
            try:
                found = [conn.execute(SELECT_ROW, (r.table, r.partition, r.key)).fetchone() for r in refs]
            finally:
                conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise sqlite_error(f"SQLite read on {self.path!r} failed", exc, "SELECT") from exc
        return [None if row is None else Row(decode(row[0]), row[1]) for row in found]

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self._round_trips += 1
        outcome = self._commit(self._connection("main"), ops)
        window = self._window
        window.written += len(ops)
        early = window.written > window.allowance
        if (early or self._expiry.ticks() >= self._expiry.next_at) and self._expiry.due(early=early):
            swept(self.expire, self._expiry, self.path, self._behind)
        return outcome

    def expire(self, now: float | None = None, limit: int = LIMIT) -> ExpiryReport:
        """Settle at most ``limit`` rows expired before ``now`` among the next window of rows
        (see the class docstring and :mod:`idemflow.stores.expiry`), in expiry order."""
        at = self._expiry.clock() if now is None else now
        self._round_trips += 1
        conn = self._connection("main")
        try:
            rows, covered, wrapped = self._window.next(conn, at, limit)
        except sqlite3.OperationalError as exc:
            raise sqlite_error(f"SQLite expiry query on {self.path!r} failed", exc, "SELECT") from exc
        rows.sort(key=lambda row: row.expires_at)

        report = expiry.apply(self, rows, at)
        self._window.written -= report.deleted + report.kept  # the sweep's own commits
        self._window.advanced(covered, wrapped, at)
        self._expiry.passes.note(report, covered, wrapped, at)
        if report.deleted and self._shrinks:
            self._release(sweep.KEEP_FREE_PAGES, sweep.RELEASE_PAGES)
        return report

    def _behind(self) -> bool:
        return self._window.behind(self._expiry.clock())

    @property
    def expiry_backlog(self) -> Backlog | None:
        """What the last complete pass of this store's sweeps met (None before one ended): the
        expired rows it left, how late the rows it deleted were (``idemflow.expiry.backlog``)."""
        return self._expiry.backlog

    def schedule_expiry(self, every: float | None, *, clock: Callable[[], float] = time.time) -> None:
        """Sweep from ``commit`` at most once per ``every`` seconds (None: never), and sooner when
        behind the writers, rows expiring by ``clock`` (wall time; tests pass a fixed one). The
        constructor's ``expire_every`` sets it."""
        self._expiry = Schedule(every, clock)
        self._window = sweep.Window(clock(), sweep.rows_estimate(self._connection("main")))

    def release(self, pages: int | None = None) -> int:
        """Give free pages back to the file system (``incremental_vacuum``), at most ``pages``
        (None: all, :data:`~idemflow.stores._sqlite_sweep.RELEASE_PAGES` per write transaction,
        so writers wait for no long step); how many. A file made before ``auto_vacuum`` was set
        gives back nothing: ``vacuum`` it once."""
        if not self._shrinks:
            return 0
        total = 0
        while pages is None or total < pages:
            step = sweep.RELEASE_PAGES if pages is None else min(sweep.RELEASE_PAGES, pages - total)
            done = self._release(0, step)
            total += done
            if done < step:
                break
        return total

    def _release(self, keep: int, most: int) -> int:
        try:
            with self._write_lock:
                return sweep.release(self._connection("main"), keep, most)
        except sqlite3.OperationalError as exc:  # busy: housekeeping, the next call tries again
            log.info("incremental vacuum of %s skipped: %s", self.path, exc)
            return 0

    def vacuum(self) -> tuple[int, int]:
        """Rewrite the whole file (``VACUUM``), switching it to ``auto_vacuum=INCREMENTAL``;
        ``(bytes before, bytes after)``. For files made before the mode was set: it holds the
        write lock (every writer waits) for as long as the copy takes, seconds per 100 MB."""
        before = file_size(self.path)
        conn = self._connection("main")
        try:
            with self._write_lock:
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError as exc:
            raise sqlite_error(f"VACUUM of SQLite store {self.path!r} failed", exc, "VACUUM") from exc
        self._shrinks = sweep.auto_vacuum(conn)
        return before, file_size(self.path)

    def expired_rows(self, now: float | None = None) -> Iterator[tuple[RowRef, float]]:
        """Every row whose ``expires_at`` passed (by ``now``), with it: one scan of the file."""
        at = self._expiry.clock() if now is None else now
        self._round_trips += 1
        yield from sweep.expired_rows(self._connection("main"), at)

    def commit_cache(self, ops: Sequence[Op]) -> None:
        """Written now, on the caller's thread, without an fsync (``synchronous=NORMAL``).

        Not on a background thread as on the cloud stores: measured side by side, handing the
        write to a thread cost the caller more (thread wake-ups, the write lock and the page
        cache of its connection, which another connection's write invalidates) than the
        ~0.05 ms un-fsynced write it saves (docs/decisions.md).
        """
        self._round_trips += 1
        conn = self._connection("cache")
        try:
            if len(ops) == 1 and isinstance(ops[0], Put) and ops[0].expect is Cond.ANY:
                op = ops[0]  # the usual completion record: one autocommit statement updating the run record
                key = (op.ref.table, op.ref.partition, op.ref.key)
                with self._write_lock:
                    if conn.execute(UPDATE_BUMP, (op.text, op.expires_at, *key)).rowcount:
                        return
            self._commit(conn, ops)  # a new row takes its version from the floor, read under the lock
        except Exception as exc:  # noqa: BLE001 - a lost cache write only costs a later replay
            log.warning("dropped a cache write (sqlite, %d operations): %s", len(ops), exc)

    def _commit(self, conn: sqlite3.Connection, ops: Sequence[Op]) -> CommitOutcome:
        if ops:
            check_commit(ops, SQLITE_CAPABILITIES)
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise sqlite_error(f"SQLite store {self.path!r} busy", exc, "BEGIN IMMEDIATE") from exc
            try:
                failures = apply(conn, ops)
                conn.execute("ROLLBACK" if failures else "COMMIT")
            except sqlite3.OperationalError as exc:
                _rollback(conn)
                raise sqlite_error(f"SQLite commit on {self.path!r} failed", exc, "COMMIT") from exc
            except BaseException:
                _rollback(conn)
                raise
        return Conflict(tuple(failures)) if failures else COMMITTED

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        self._round_trips += 1
        conn = self._connection("main")
        if partition is None:
            query = conn.execute(
                "SELECT part, rk, v, ver FROM idemflow_rows WHERE tbl = ? ORDER BY part, rk", (table,)
            )
        else:
            query = conn.execute(
                "SELECT part, rk, v, ver FROM idemflow_rows WHERE tbl = ? AND part = ? ORDER BY rk",
                (table, partition),
            )
        for part, key, text, version in query.fetchall():
            yield part, key, Row(decode(text), version)

    runs_order = NEWEST_FIRST

    def run_page(self, query: RunQuery) -> list[RunRow]:
        """Run records newest first, from the index of their start times
        (:class:`~idemflow.stores.base.PagedRuns`, :mod:`idemflow.stores._sqlite_runs`)."""
        sql, params = page_query(query)
        self._round_trips += 1
        try:
            found = self._connection("main").execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise sqlite_error(f"SQLite listing of runs on {self.path!r} failed", exc, "SELECT") from exc
        return [
            RunRow(Place(_started(at), key, part).position(), part, key, Row(decode(text), version))
            for part, key, text, version, at in found
        ]

    def tables(self) -> list[str]:
        rows = self._connection("main").execute("SELECT DISTINCT tbl FROM idemflow_rows ORDER BY tbl")
        return [str(name) for (name,) in rows.fetchall()]

    def create_tables(self, *names: str) -> None:
        """Tables are implicit: every logical table shares one physical table."""

    def flush(self) -> None:
        """Cache writes are synchronous (but not fsynced)."""

    def close(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes), for tests and benchmarks.

        Part of the :class:`~idemflow.stores.base.Store` protocol.
        """
        return self._round_trips


def _started(at: object) -> float:
    """A start time as the index holds it (a number; anything else only in a record not ours)."""
    return float(at) if isinstance(at, (int, float)) else 0.0


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
