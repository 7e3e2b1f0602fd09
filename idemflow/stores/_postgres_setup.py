"""What both PostgreSQL stores (blocking and asyncio) share besides their statements: their
limits, the schema made on first open, the pool's settings and where the expiry sweeps resume.

The schema is made by one connection opened directly, before the pool: a refused login or a
missing database then raises its typed error from the constructor at once (a pool would retry
in the background and only time out), and the store's objects are made under an advisory lock,
so processes opening one new schema at once take turns instead of racing on the catalog.

Needs the ``postgres`` extra (psycopg).
"""

from __future__ import annotations

from typing import Any

import psycopg

from idemflow.errors import ConfigurationError, ErrorCode
from idemflow.stores._postgres_errors import postgres_error
from idemflow.stores._postgres_sql import COMMIT_SIGNATURE, commit_ddl, quoted, ref_of, schema_ddl
from idemflow.stores.base import Capabilities, Expired

POSTGRES_CAPABILITIES = Capabilities(
    cross_partition_commit=True,
    max_ops_per_commit=10_000,
    max_value_bytes=16 * 1024 * 1024,
    max_commit_bytes=256 * 1024 * 1024,
    max_key_bytes=64 * 1024,
)
CONNECT_TIMEOUT = 10
"""Seconds a new connection may take (libpq's ``connect_timeout``) unless the conninfo says."""
POOL_TIMEOUT = 30.0
"""Seconds a call waits for a connection of the pool before it fails (a TransientError)."""
_FOUND = "SELECT to_regclass(%s), to_regprocedure(%s)"
"""The store's table and its commit function, each None where missing."""
_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"


def connect_options() -> dict[str, Any]:
    """Every connection's options: autocommit (each batch is its own transaction), and no
    automatic preparation (batches are bound client-side, and a reader's statement is parsed
    anew: nothing a pooler in transaction mode would have to keep per session)."""
    return {"autocommit": True, "prepare_threshold": None}


def _table(schema: str) -> str:
    return f"{quoted(schema)}.idemflow_rows"


def _function(schema: str) -> str:
    return f"{quoted(schema)}.{COMMIT_SIGNATURE}"


def prepare(conninfo: str, schema: str, *, create: bool) -> None:
    """Make the store's objects in ``schema`` if missing (``create``), else require them."""
    try:
        with psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT, **connect_options()) as conn:
            found = conn.execute(_FOUND, (_table(schema), _function(schema))).fetchone()
            if found is None or found[0] is None:
                _missing(schema, create)
                with conn.transaction():
                    conn.execute(_LOCK, (f"idemflow schema {schema}",))
                    for ddl in schema_ddl(schema):
                        conn.execute(ddl)
            elif found[1] is None:  # a schema made before the commit function: add it
                with conn.transaction():
                    conn.execute(_LOCK, (f"idemflow schema {schema}",))
                    conn.execute(commit_ddl(schema))
    except psycopg.Error as exc:
        raise postgres_error(f"cannot open PostgreSQL store (schema {schema!r})", exc, "connect") from exc


async def aprepare(conninfo: str, schema: str, *, create: bool) -> None:
    """:func:`prepare` awaited."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            conninfo, connect_timeout=CONNECT_TIMEOUT, **connect_options()
        )
        async with conn:
            found = await (await conn.execute(_FOUND, (_table(schema), _function(schema)))).fetchone()
            if found is None or found[0] is None:
                _missing(schema, create)
                async with conn.transaction():
                    await conn.execute(_LOCK, (f"idemflow schema {schema}",))
                    for ddl in schema_ddl(schema):
                        await conn.execute(ddl)
            elif found[1] is None:  # a schema made before the commit function: add it
                async with conn.transaction():
                    await conn.execute(_LOCK, (f"idemflow schema {schema}",))
                    await conn.execute(commit_ddl(schema))
    except psycopg.Error as exc:
        raise postgres_error(f"cannot open PostgreSQL store (schema {schema!r})", exc, "connect") from exc


def _missing(schema: str, create: bool) -> None:
    if not create:
        raise ConfigurationError(
            f"no idemflow store in PostgreSQL schema {schema!r} (open it with create=True to make one)",
            code=ErrorCode.NOT_FOUND,
            backend="postgres",
            operation="connect",
        )


START: tuple[float, str, str, str] = (float("-inf"), "", "", "")
"""Where the first sweep of a pass starts: before every row in expiry order."""


class ExpiryCursor:
    """Where the next sweep reads in expiry order (``expires, tbl, part, rk``), as the memory
    store's: a row a sweep must leave (a finished run record in its hold) is passed over until
    the pass wraps around, instead of being met first by every sweep."""

    __slots__ = ("after",)

    def __init__(self) -> None:
        self.after = START

    def found(self, rows: list[tuple[Any, ...]], limit: int) -> tuple[list[Expired], bool]:
        """The rows of a sweep's query as :class:`Expired`, and whether the pass ended with them."""
        expired = [
            Expired(ref_of(tbl, part, rk), ver, float(at), text) for tbl, part, rk, ver, at, text in rows
        ]
        wrapped = len(rows) < limit
        last = rows[-1] if rows else None
        self.after = START if wrapped or last is None else (float(last[4]), last[0], last[1], last[2])
        return expired, wrapped


__all__ = [
    "CONNECT_TIMEOUT",
    "POOL_TIMEOUT",
    "POSTGRES_CAPABILITIES",
    "START",
    "ExpiryCursor",
    "aprepare",
    "connect_options",
    "prepare",
]
