"""How a plan's batches reach the server (:mod:`idemflow.stores._postgres_commit`): each batch in
one pipeline, one round trip, on a connection of the store's pool, blocking or awaited.

Why pipeline mode: psycopg sends every statement of a batch without waiting for the one before,
and a statement that raises makes the server skip the rest up to the batch's end and roll back
the batch's implicit transaction. A refusal of
the store's own (a condition not met) is handed to the plan as a :class:`Refusal`; anything
else is raised for the store to classify. A deadlock or a serialization failure (possible only
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


def retried(exc: psycopg.Error) -> bool:
    """Whether a failed commit is worth starting over inside the store."""
    return exc.sqlstate in RETRIED


def batch(conn: psycopg.Connection[Any], sent: Batch) -> Answer:
    """Send one batch on ``conn`` (autocommit: the batch's own ``BEGIN`` opens the transaction)."""
    rows: list[tuple[Any, ...]] = []
    failed: psycopg.Error | None = None
    try:
        with conn.pipeline() as pipe:
            try:  # the first error is the one that aborted the rest (its end raises "aborted")
                cursor = conn.cursor()
                fetched = None
                for index, (sql, params) in enumerate(sent.statements):
                    if index == sent.fetch:
                        fetched = conn.cursor()
                        fetched.execute(sql, params)
                    else:
                        cursor.execute(sql, params)
                pipe.sync()
                if fetched is not None:
                    rows = fetched.fetchall()
            except psycopg.Error as exc:
                failed = exc
    except psycopg.Error as exc:
        failed = failed or exc
    if failed is None:
        return rows
    return _refused(failed)


def _refused(failed: psycopg.Error) -> Refusal:
    refusal = _refusal(failed)
    if refusal is None:
        raise failed
    return refusal


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
    rows: list[tuple[Any, ...]] = []
    failed: psycopg.Error | None = None
    try:
        async with conn.pipeline() as pipe:
            try:
                cursor = conn.cursor()
                fetched = None
                for index, (sql, params) in enumerate(sent.statements):
                    if index == sent.fetch:
                        fetched = conn.cursor()
                        await fetched.execute(sql, params)
                    else:
                        await cursor.execute(sql, params)
                await pipe.sync()
                if fetched is not None:
                    rows = await fetched.fetchall()
            except psycopg.Error as exc:
                failed = exc
    except psycopg.Error as exc:
        failed = failed or exc
    if failed is None:
        return rows
    return _refused(failed)


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
