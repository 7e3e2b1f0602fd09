"""The PostgreSQL store for event loops, on psycopg's asynchronous connections and pool.

:class:`AsyncPostgresStore` is an :class:`~idemflow.stores.base.AsyncStore` with the same
schema, statements, conditions and errors as :class:`~idemflow.stores.postgres.PostgresStore`
(both run the plans of :mod:`idemflow.stores._postgres_commit`), each batch awaited instead of
blocking. The pool is opened on first use, inside the running loop, and closed by
:meth:`AsyncPostgresStore.close`. Needs the ``postgres`` extra.

>>> AsyncPostgresStore("postgresql://db.internal/app", schema="orders").url
'postgresql://db.internal/app?schema=orders'
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from idemflow.serialization import decode
from idemflow.stores import expiry
from idemflow.stores._expiring import EXPIRE_EVERY, LIMIT, Schedule, aswept
from idemflow.stores._limits import check_commit
from idemflow.stores._postgres_commit import plan
from idemflow.stores._postgres_driver import ATTEMPTS, adrive, retried
from idemflow.stores._postgres_errors import postgres_error
from idemflow.stores._postgres_setup import (
    POOL_TIMEOUT,
    POSTGRES_CAPABILITIES,
    ExpiryCursor,
    aprepare,
    connect_options,
)
from idemflow.stores._postgres_sql import Sql, escaped, key_of, unescaped
from idemflow.stores.base import COMMITTED, CommitOutcome, ExpiryReport, Op, Row, RowRef
from idemflow.stores.postgres import PostgresStore

log = logging.getLogger("idemflow.stores.postgres")


class AsyncPostgresStore:
    """An :class:`~idemflow.stores.base.AsyncStore` on PostgreSQL, created like
    :class:`~idemflow.stores.postgres.PostgresStore` or as :meth:`twin_of` one. Use it on one
    event loop (its pool belongs to the loop that first used it)."""

    capabilities = POSTGRES_CAPABILITIES

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
        self._pool_size = max(pool_size, 1)
        self._create = create
        self._prepared = False
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening = asyncio.Lock()
        self._round_trips = 0
        self._expiry = Schedule(expire_every)
        self._cursor = ExpiryCursor()
        self._sweep: asyncio.Task[None] | None = None

    @classmethod
    def twin_of(cls, store: PostgresStore) -> AsyncPostgresStore:
        """The asyncio store on the same schema as ``store`` (the schema is made already)."""
        twin = cls(
            store.conninfo, schema=store.schema, pool_size=store.pool_size, expire_every=store._expiry.every
        )
        twin._prepared = True
        return twin

    @property
    def url(self) -> str:
        """The store URL of this store's schema (for :func:`~idemflow.open_store`)."""
        joiner = "&" if "?" in self.conninfo else "?"
        return f"{self.conninfo}{joiner}schema={quote(self.schema, safe='')}"

    async def _open(self) -> AsyncConnectionPool[Any]:
        async with self._opening:
            if self._pool is None:
                if not self._prepared:
                    await aprepare(self.conninfo, self.schema, create=self._create)
                    self._prepared = True
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    self.conninfo,
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs=connect_options(),
                    timeout=POOL_TIMEOUT,
                    num_workers=1,
                    name=f"idemflow-{self.schema}",
                    open=False,
                )
                await pool.open()
                self._pool = pool
            return self._pool

    @asynccontextmanager
    async def _connection(self, operation: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = self._pool if self._pool is not None else await self._open()
        try:
            async with pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise postgres_error(
                f"PostgreSQL {operation} on schema {self.schema!r} failed", exc, operation
            ) from exc

    async def _rows(self, operation: str, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self._connection(operation) as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def read(self, ref: RowRef) -> Row | None:
        self._round_trips += 1
        found = await self._rows("SELECT", self.sql.read, key_of(ref))
        return Row(decode(found[0][0]), found[0][1]) if found else None

    async def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        self._round_trips += 1
        columns = (
            tuple(list(column) for column in zip(*map(key_of, refs), strict=True)) if refs else ([], [], [])
        )
        found = await self._rows("SELECT", self.sql.read_many, columns)
        rows: list[Row | None] = [None] * len(refs)
        for index, text, version in found:
            rows[index - 1] = Row(decode(text), version)
        return rows

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self._round_trips += 1
        outcome = await self._commit(ops, cache=False)
        schedule = self._expiry
        if schedule.ticks() >= schedule.next_at and schedule.due():
            self._sweep = asyncio.create_task(aswept(self.expire, schedule, f"postgres schema {self.schema}"))
        return outcome

    async def _commit(self, ops: Sequence[Op], *, cache: bool) -> CommitOutcome:
        if not ops:
            return COMMITTED
        check_commit(ops, POSTGRES_CAPABILITIES)
        async with self._connection("COMMIT") as conn:
            for attempt in range(ATTEMPTS):
                try:
                    return await adrive(conn, plan(self.sql, ops, cache=cache), self.sql.commit)
                except psycopg.Error as exc:
                    if not retried(exc) or attempt == ATTEMPTS - 1:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def commit_cache(self, ops: Sequence[Op]) -> None:
        """Written now, without waiting for the WAL's flush (see :meth:`PostgresStore.commit_cache`)."""
        self._round_trips += 1
        try:
            await self._commit(ops, cache=True)
        except Exception as exc:  # noqa: BLE001 - a lost cache write only costs a later replay
            log.warning("dropped a cache write (postgres, %d operations): %s", len(ops), exc)

    async def expire(self, now: float | None = None, limit: int = LIMIT) -> ExpiryReport:
        """One sweep (see :meth:`PostgresStore.expire`)."""
        at = self._expiry.clock() if now is None else now
        self._round_trips += 1
        found = await self._rows("SELECT", self.sql.expired_after, (at, *self._cursor.after, limit))
        rows, wrapped = self._cursor.found(found, limit)
        report = await expiry.aapply(self, rows, at)
        self._expiry.passes.note(report, len(rows), wrapped, at)
        return report

    async def scan(self, table: str, partition: str | None = None) -> list[tuple[str, str, Row]]:
        self._round_trips += 1
        if partition is None:
            found = await self._rows("SELECT", self.sql.scan_table, (escaped(table),))
        else:
            found = await self._rows("SELECT", self.sql.scan_partition, (escaped(table), escaped(partition)))
        return [
            (unescaped(part), unescaped(key), Row(decode(text), version))
            for part, key, text, version in found
        ]

    async def tables(self) -> list[str]:
        return [unescaped(name) for (name,) in await self._rows("SELECT", self.sql.tables, ())]

    async def flush(self) -> None:
        """Cache writes are awaited where they are made; a sweep under way is waited for."""
        if self._sweep is not None:
            await asyncio.gather(self._sweep, return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (see :attr:`PostgresStore.round_trips`)."""
        return self._round_trips


__all__ = ["AsyncPostgresStore"]
