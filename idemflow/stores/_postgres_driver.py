"""How a plan's batches reach the server (:mod:`idemflow.stores._postgres_commit`): each batch as
one query of several statements, one round trip, on a connection of the store's pool, blocking
or awaited.

Why one query: PostgreSQL runs the statements of one simple-protocol query as one implicit
transaction (committed at its end if all succeeded, rolled back if one failed), unless the query
itself opens one with ``BEGIN``; psycopg's client-side binding (``ClientCursor``, which quotes
each parameter as a literal) makes it one message and one wait. Measured against the same batch
in pipeline mode (one extended-protocol execute per statement, then a sync), it spends less CPU
per commit (psycopg waits on the socket once per statement in a pipeline), and it has no cache of
prepared statements that an aborted pipeline leaves stale (docs/decisions.md). A refusal of the
store's own (a condition not met) is handed to the plan as a :class:`Refusal`; anything else is
raised for the store to classify. A deadlock or a serialization failure (possible only
when rows are locked out of key order, by a commit that checks a row and writes it) starts the
commit over, a bounded number of times (:data:`ATTEMPTS`).

Needs the ``postgres`` extra (psycopg).
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import pq

from idemflow.core.ops import CommitOutcome
from idemflow.stores._postgres_commit import Answer, Batch, Plan, Refusal
from idemflow.stores._postgres_sql import GENERAL, RACED, REFUSED

ATTEMPTS = 5
"""Times one commit is started over after a deadlock or serialization failure before it fails."""
RETRIED = frozenset({"40001", "40P01"})
"""Serialization failure, deadlock detected."""
_OURS = frozenset({REFUSED, GENERAL, RACED})


def _refusal(exc: psycopg.Error) -> Refusal | None:
    if exc.sqlstate not in _OURS:
        return None
    return Refusal(str(exc.sqlstate), int(exc.diag.message_detail or "0"))


def _refused(failed: psycopg.Error) -> Refusal:
    refusal = _refusal(failed)
    if refusal is None:
        raise failed
    return refusal


def retried(exc: psycopg.Error) -> bool:
    """Whether a failed commit is worth starting over inside the store."""
    return exc.sqlstate in RETRIED


def _query(sent: Batch) -> tuple[str, list[Any]]:
    """The batch as one query string and its parameters, in order."""
    params: list[Any] = []
    for _, given in sent.statements:
        params.extend(given)
    return "; ".join(sql for sql, _ in sent.statements), params


def batch(conn: psycopg.Connection[Any], sent: Batch) -> Answer:
    """Send one batch on ``conn`` (autocommit: a batch without ``BEGIN`` is its own transaction)."""
    if not sent.statements:
        return []
    sql, params = _query(sent)
    cursor = psycopg.ClientCursor(conn)
    try:
        cursor.execute(sql, params)
        if sent.fetch is None:
            return []
        for _ in range(sent.fetch):
            cursor.nextset()
        return cursor.fetchall()
    except psycopg.Error as exc:
        return _refused(exc)
    finally:
        cursor.close()


def drive(conn: psycopg.Connection[Any], steps: Plan) -> CommitOutcome:
    """Run a plan to its outcome on ``conn``; whatever is raised leaves no transaction open."""
    try:
        answer: Answer | None = None
        sent = next(steps)
        while True:
            answer = batch(conn, sent)
            sent = steps.send(answer)
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


async def abatch(conn: psycopg.AsyncConnection[Any], sent: Batch) -> Answer:
    """:func:`batch` awaited."""
    if not sent.statements:
        return []
    sql, params = _query(sent)
    cursor = psycopg.AsyncClientCursor(conn)
    try:
        await cursor.execute(sql, params)
        if sent.fetch is None:
            return []
        for _ in range(sent.fetch):
            cursor.nextset()
        return await cursor.fetchall()
    except psycopg.Error as exc:
        return _refused(exc)
    finally:
        await cursor.close()


async def adrive(conn: psycopg.AsyncConnection[Any], steps: Plan) -> CommitOutcome:
    """:func:`drive` awaited."""
    try:
        sent = next(steps)
        while True:
            sent = steps.send(await abatch(conn, sent))
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
