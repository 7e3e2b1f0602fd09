"""The PostgreSQL store: every row in one table of a schema, each commit one transaction in one
round trip, on psycopg 3 and its connection pool.

Why PostgreSQL: most teams between a laptop and DynamoDB already run it (RDS, Aurora, Cloud SQL,
Neon, Supabase), and a transaction spans any rows, so memo, data and run record commit together
across tables and partitions as on SQLite, from many machines at once.

How a commit holds its conditions under READ COMMITTED (row locks, re-checked after a concurrent
writer; ``INSERT ... ON CONFLICT``; a held key for ``Check(ABSENT)``) is
:mod:`idemflow.stores._postgres_commit`'s; the statements and the schema are
:mod:`idemflow.stores._postgres_sql`'s. PostgreSQL has no TTL: a ``commit`` sweeps expired rows
(:mod:`idemflow.stores.expiry`) at most once per ``expire_every`` seconds, reading them from a
partial index in expiry order, and at once again while sweeps find full batches.

Needs the ``postgres`` extra: ``pip install 'idemflow[postgres]'``.

>>> PostgresStore.capabilities.cross_partition_commit
True
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from idemflow.serialization import decode
from idemflow.stores import expiry
from idemflow.stores._expiring import EXPIRE_EVERY, LIMIT, Backlog, Schedule, swept
from idemflow.stores._limits import check_commit
from idemflow.stores._postgres_commit import plan
from idemflow.stores._postgres_driver import ATTEMPTS, drive, retried
from idemflow.stores._postgres_errors import postgres_error
from idemflow.stores._postgres_runs import page_query, page_rows
from idemflow.stores._postgres_setup import (
    POOL_TIMEOUT,
    POSTGRES_CAPABILITIES,
    ExpiryCursor,
    connect_options,
    prepare,
)
from idemflow.stores._postgres_sql import Sql, escaped, key_of, ref_of, unescaped
from idemflow.stores._runs_order import NEWEST_FIRST
from idemflow.stores.base import COMMITTED, CommitOutcome, ExpiryReport, Op, Row, RowRef, RunQuery, RunRow

log = logging.getLogger("idemflow.stores.postgres")


class PostgresStore:
    """A :class:`~idemflow.stores.base.Store` on a PostgreSQL database (or a compatible engine).

    ``conninfo`` is anything libpq takes (``postgresql://host:5432/db?user=app``, or
    ``host=... dbname=...``; passwords from ``PGPASSWORD`` or ``~/.pgpass`` keep them out of
    URLs). The store's table, sequence and indexes live in ``schema``, made on first open unless
    ``create`` is False. Threads share a pool of at most ``pool_size`` connections.
    """

    capabilities = POSTGRES_CAPABILITIES
    runs_order = NEWEST_FIRST

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "public",
        pool_size: int = 10,
        expire_every: float | None = EXPIRE_EVERY,
        create: bool = True,
    ) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.sql = Sql.on(schema)
        self._round_trips = 0
        self._expiry = Schedule(expire_every)
        self._cursor = ExpiryCursor()
        prepare(conninfo, schema, create=create)
        self.pool_size = pool_size
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(pool_size, 1),
            kwargs=connect_options(),
            timeout=POOL_TIMEOUT,
            num_workers=1,
            name=f"idemflow-{schema}",
            open=True,
        )

    @property
    def url(self) -> str:
        """The store URL of this store's schema on the same server (for other processes)."""
        joiner = "&" if "?" in self.conninfo else "?"
        return f"{self.conninfo}{joiner}schema={quote(self.schema, safe='')}"

    @contextmanager
    def _connection(self, operation: str) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise postgres_error(
                f"PostgreSQL {operation} on schema {self.schema!r} failed", exc, operation
            ) from exc

    def read(self, ref: RowRef) -> Row | None:
        self._round_trips += 1
        with self._connection("SELECT") as conn:
            found = conn.execute(self.sql.read, key_of(ref)).fetchone()
        return None if found is None else Row(decode(found[0]), found[1])

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        self._round_trips += 1
        columns = (
            tuple(list(column) for column in zip(*map(key_of, refs), strict=True)) if refs else ([], [], [])
        )
        with self._connection("SELECT") as conn:
            found = conn.execute(self.sql.read_many, columns).fetchall()  # one statement: one snapshot
        rows: list[Row | None] = [None] * len(refs)
        for index, text, version in found:
            rows[index - 1] = Row(decode(text), version)
        return rows

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self._round_trips += 1
        outcome = self._commit(ops, cache=False)
        if self._expiry.ticks() >= self._expiry.next_at and self._expiry.due():
            swept(self.expire, self._expiry, f"postgres schema {self.schema}")
        return outcome

    def _commit(self, ops: Sequence[Op], *, cache: bool) -> CommitOutcome:
        if not ops:
            return COMMITTED
        check_commit(ops, POSTGRES_CAPABILITIES)
        with self._connection("COMMIT") as conn:
            for attempt in range(ATTEMPTS):
                try:
                    return drive(conn, plan(self.sql, ops, cache=cache), self.sql.commit)
                except psycopg.Error as exc:
                    if not retried(exc) or attempt == ATTEMPTS - 1:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def commit_cache(self, ops: Sequence[Op]) -> None:
        """Written now, in a transaction that does not wait for the WAL's flush
        (``synchronous_commit = off``): losing it only costs a later duplicate a replay."""
        self._round_trips += 1
        try:
            self._commit(ops, cache=True)
        except Exception as exc:  # noqa: BLE001 - a lost cache write only costs a later replay
            log.warning("dropped a cache write (postgres, %d operations): %s", len(ops), exc)

    def expire(self, now: float | None = None, limit: int = LIMIT) -> ExpiryReport:
        """Settle at most ``limit`` rows expired before ``now``, the next in expiry order after
        where the last sweep stopped (:mod:`idemflow.stores.expiry`)."""
        at = self._expiry.clock() if now is None else now
        self._round_trips += 1
        with self._connection("SELECT") as conn:
            found = conn.execute(self.sql.expired_after, (at, *self._cursor.after, limit)).fetchall()
        rows, wrapped = self._cursor.found(found, limit)
        report = expiry.apply(self, rows, at)
        self._expiry.passes.note(report, len(rows), wrapped, at)
        return report

    @property
    def expiry_backlog(self) -> Backlog | None:
        """What the last complete pass of the sweeps met (None before one ended)."""
        return self._expiry.backlog

    def schedule_expiry(self, every: float | None, *, clock: Callable[[], float] = time.time) -> None:
        """Sweep from ``commit`` at most once per ``every`` seconds (None: never), rows expiring
        by ``clock``. The constructor's ``expire_every`` sets it."""
        self._expiry = Schedule(every, clock)

    def expired_rows(self, now: float | None = None) -> Iterator[tuple[RowRef, float]]:
        """Every row whose ``expires_at`` passed (by ``now``), with it: from the expiry index."""
        at = self._expiry.clock() if now is None else now
        self._round_trips += 1
        with self._connection("SELECT") as conn:
            found = conn.execute(self.sql.expired_all, (at,)).fetchall()
        for tbl, part, rk, expires in found:
            yield ref_of(tbl, part, rk), float(expires)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        self._round_trips += 1
        with self._connection("SELECT") as conn:
            if partition is None:
                found = conn.execute(self.sql.scan_table, (escaped(table),)).fetchall()
            else:
                found = conn.execute(self.sql.scan_partition, (escaped(table), escaped(partition))).fetchall()
        for part, key, text, version in found:
            yield unescaped(part), unescaped(key), Row(decode(text), version)

    def run_page(self, query: RunQuery) -> list[RunRow]:
        """Run records newest first, from the index of their start times
        (:mod:`idemflow.stores._postgres_runs`)."""
        sql, params = page_query(self.schema, query)
        self._round_trips += 1
        with self._connection("SELECT") as conn:
            return page_rows(conn.execute(sql, params).fetchall())

    def tables(self) -> list[str]:
        with self._connection("SELECT") as conn:
            return [unescaped(name) for (name,) in conn.execute(self.sql.tables).fetchall()]

    def create_tables(self, *names: str) -> None:
        """Tables are implicit: every logical table shares one physical table."""

    def flush(self) -> None:
        """Cache writes are synchronous (but not flushed to disk)."""

    def close(self) -> None:
        self._pool.close()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes, sweeps)."""
        return self._round_trips


__all__ = ["POSTGRES_CAPABILITIES", "PostgresStore"]
