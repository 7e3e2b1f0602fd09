"""How a plan's batches reach the server (:mod:`idemflow.stores._postgres_commit`): each batch as
one query of several statements, one round trip, on a connection of the store's pool, blocking
or awaited.

Why one query: PostgreSQL runs the statements of one simple-protocol query as one implicit
transaction (committed at its end if all succeeded, rolled back if one failed), unless the query
itself opens one with ``BEGIN``; client-side binding (each parameter written as a literal:
quoted here where ``standard_conforming_strings`` is on, else by psycopg's ``ClientCursor``)
makes it one message and one wait. A commit's guarded statements, bound so, are themselves the
literal arguments of the commit function's call
(:func:`~idemflow.stores._postgres_sql.commit_call`). Measured against the same batch in pipeline
mode (one extended-protocol execute per statement, then a sync), it spends less CPU per commit
(psycopg waits on the socket once per statement in a pipeline), and it has no cache of prepared
statements that an aborted pipeline leaves stale (docs/decisions.md). A refusal of the store's
own (a condition not met) comes back from the commit function as rows, handed to the plan as a
:class:`Refusal`; anything else is raised for the store to classify. A deadlock or a
serialization failure (possible only when rows are locked out of key order, by a commit that
checks a row and writes it) starts the commit over, a bounded number of times (:data:`ATTEMPTS`).

Needs the ``postgres`` extra (psycopg).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import psycopg
from psycopg import pq

from idemflow.core.ops import CommitOutcome
from idemflow.stores._postgres_commit import Answer, Batch, Plan, Refusal
from idemflow.stores._postgres_sql import commit_call

ATTEMPTS = 5
"""Times one commit is started over after a deadlock or serialization failure before it fails."""
RETRIED = frozenset({"40001", "40P01"})
"""Serialization failure, deadlock detected."""


def retried(exc: psycopg.Error) -> bool:
    """Whether a failed commit is worth starting over inside the store."""
    return exc.sqlstate in RETRIED


Cursor = psycopg.ClientCursor[Any] | psycopg.AsyncClientCursor[Any]


def _literal(value: object) -> str | None:
    """``value`` as a SQL literal where ``standard_conforming_strings`` is on (a backslash is
    then itself: quotes are doubled and nothing else changes), or None: psycopg binds it."""
    kind = type(value)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        return None if "\x00" in text else "'" + text.replace("'", "''") + "'"
    if value is None:
        return "NULL"
    if kind is int or (kind is float and math.isfinite(value)):  # type: ignore[arg-type]
        number = repr(value)
        return f"({number})" if number.startswith("-") else number
    return None


def _bound(cursor: Cursor, text: str, given: tuple[Any, ...], literals: bool) -> str:
    """A statement with its parameters written in: quoted here where it can be (a commit's values
    are texts and numbers), else by psycopg."""
    if literals:
        written = tuple(_literal(value) for value in given)
        if None not in written:
            return text % written
    bound: str = cursor.mogrify(text, given)
    return bound


def _query(cursor: Cursor, sent: Batch, via: str) -> tuple[str, int, int | None]:
    """The batch as one query string, its parameters written in; where the commit function's
    answer and the fetched rows are among its results (None: not there). ``via``: the start of
    the commit function's call (:attr:`~idemflow.stores._postgres_sql.Sql.commit`)."""
    literals = cursor.connection.info.parameter_status("standard_conforming_strings") == "on"
    statements = [_bound(cursor, text, given, literals) for text, given in sent.plain]
    guarded = len(statements) if sent.guarded else -1
    if sent.guarded:
        bound = [_bound(cursor, text, given, literals) for text, given in sent.guarded]
        columns = [key[column] for column in range(3) for key in sent.inserts]
        call = commit_call(via, len(bound), len(sent.inserts))
        statements.append(_bound(cursor, call, (*bound, *columns), literals))
    fetch = None
    if sent.fetch is not None:
        fetch = len(statements)
        statements.append(_bound(cursor, *sent.fetch, literals))
    return "; ".join(statements), guarded, fetch


def _answer(rows: list[tuple[Any, ...]]) -> Refusal | None:
    """The commit function's rows as the refusal they report (None: no row, all ran)."""
    if not rows:
        return None
    op, state = rows[0][0], rows[0][1]
    return Refusal(
        str(state), int(op), tuple((int(at), str(v), int(ver)) for _, _, at, v, ver in rows if at is not None)
    )


def batch(conn: psycopg.Connection[Any], sent: Batch, via: str) -> Answer:
    """Send one batch on ``conn`` (autocommit: a batch without ``BEGIN`` is its own transaction)."""
    if not (sent.plain or sent.guarded or sent.fetch):
        return []
    cursor = psycopg.ClientCursor(conn)
    try:
        sql, guarded, fetch = _query(cursor, sent, via)
        cursor.execute(sql)
        at = 0
        if guarded >= 0:
            for _ in range(guarded):
                cursor.nextset()
            at = guarded
            refusal = _answer(cursor.fetchall())
            if refusal is not None:
                return refusal
        if fetch is None:
            return []
        for _ in range(fetch - at):
            cursor.nextset()
        return cursor.fetchall()
    finally:
        cursor.close()


def drive(conn: psycopg.Connection[Any], steps: Plan, via: str) -> CommitOutcome:
    """Run a plan to its outcome on ``conn``; whatever is raised leaves no transaction open."""
    try:
        sent = next(steps)
        while True:
            sent = steps.send(batch(conn, sent, via))
    except StopIteration as done:
        outcome: CommitOutcome = done.value
        return outcome
    except BaseException:
        settle(conn)
        raise


def settle(conn: psycopg.Connection[Any]) -> None:
    """Roll back what a failure left open (nothing to do on a connection that broke)."""
    if not conn.broken and conn.info.transaction_status in (
        pq.TransactionStatus.INTRANS,
        pq.TransactionStatus.INERROR,
    ):
        with contextlib.suppress(psycopg.Error):  # the pool discards a connection it cannot use
            conn.execute("ROLLBACK")


async def abatch(conn: psycopg.AsyncConnection[Any], sent: Batch, via: str) -> Answer:
    """:func:`batch` awaited."""
    if not (sent.plain or sent.guarded or sent.fetch):
        return []
    cursor = psycopg.AsyncClientCursor(conn)
    try:
        sql, guarded, fetch = _query(cursor, sent, via)
        await cursor.execute(sql)
        at = 0
        if guarded >= 0:
            for _ in range(guarded):
                cursor.nextset()
            at = guarded
            refusal = _answer(await cursor.fetchall())
            if refusal is not None:
                return refusal
        if fetch is None:
            return []
        for _ in range(fetch - at):
            cursor.nextset()
        return await cursor.fetchall()
    finally:
        await cursor.close()


async def adrive(conn: psycopg.AsyncConnection[Any], steps: Plan, via: str) -> CommitOutcome:
    """:func:`drive` awaited."""
    try:
        sent = next(steps)
        while True:
            sent = steps.send(await abatch(conn, sent, via))
    except StopIteration as done:
        outcome: CommitOutcome = done.value
        return outcome
    except BaseException:
        await asettle(conn)
        raise


async def asettle(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`settle` awaited."""
    if not conn.broken and conn.info.transaction_status in (
        pq.TransactionStatus.INTRANS,
        pq.TransactionStatus.INERROR,
    ):
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")


__all__ = ["ATTEMPTS", "RETRIED", "abatch", "adrive", "asettle", "batch", "drive", "retried", "settle"]
