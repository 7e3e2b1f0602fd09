"""A durable queue in PostgreSQL, so that one database serves a deployment's store and queue.

Each message is a row of ``idemflow_queue``. A receive claims rows in one statement: an
``UPDATE`` over a ``SELECT ... FOR UPDATE SKIP LOCKED`` of the oldest visible rows, which
pushes their ``visible_at`` forward and gives each a fresh random receipt. Receivers racing for
the same rows skip what another holds instead of waiting for it, so no two hold a message at
once and none blocks on another. Ack, nack, extend and dead-letter check the receipt: a holder
whose visibility ran out, and whose message was received again elsewhere, can no longer touch
it. Dead letters are rows of ``idemflow_queue_dead``; a dead-lettering and a redrive each move
their rows in one statement (``DELETE ... RETURNING`` feeding an ``INSERT``), so a row moves
at most once however many operators redrive at the same time.

Several named queues share the two tables (``name``). Times are the client's clock, as the
SQLite queue's are (every process of a deployment reads wall time; tests move a fake one).

Idle receivers poll, with a pause that grows from 5 ms to :data:`LONGEST_PAUSE`: a notification
(``LISTEN``) would need a connection held open per waiting receiver, and would not wake one for
a delayed message coming due.

Opened by URL, as every queue is (``open_queue``)::

    queue = open_queue("postgresql://db.internal:5432/shop?user=worker&name=jobs")
    queue.send('{"step": 2}')
    [message] = queue.receive(wait=1.0)
    queue.ack(message)
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from idemflow.async_worklist.queues.base import (
    DEFAULT_MAX_BODY_BYTES,
    DeadLetter,
    Message,
    Queue,
    check_body,
    check_ids,
    check_limit,
    check_max_messages,
    check_reason,
    check_seconds,
    polled,
)
from idemflow.async_worklist.queues.postgres_sql import (
    ACK,
    CLAIM,
    COUNT,
    DEAD_LETTER,
    LIST_DEAD,
    REDRIVE_ALL,
    REDRIVE_SOME,
    SCHEMA,
    SCHEMA_LOCK,
    SEND,
    STATS,
    UPDATE,
)
from idemflow.core.backlog import QueueStats, oldest_lag
from idemflow.core.lazy import load_optional
from idemflow.errors import BackendError, ConfigurationError, InvalidNameError, MessageLostError
from idemflow.stores._postgres_errors import postgres_error

log = logging.getLogger(__name__)

LONGEST_PAUSE = 0.1
"""Seconds an idle ``receive(wait=...)`` sleeps at most between two looks."""
POOL_SIZE = 10
"""Connections a queue keeps at most (one per thread sending or receiving at the same moment)."""


class PostgresQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` in a PostgreSQL database.

    ``conninfo`` is a libpq connection string or URL (``postgresql://user@host:5432/db``).
    Connections come from a pool (psycopg_pool, the ``postgres`` extra) in autocommit mode:
    every operation is one statement, so none holds a transaction open between calls.
    ``clock`` and ``sleep`` are injectable so tests move time instead of waiting for it.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        name: str = "default",
        visibility_timeout: float = 30.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        pool_size: int = POOL_SIZE,
        connect_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidNameError("queue name", name, "must be a non-empty str")
        if not isinstance(conninfo, str) or not conninfo:
            raise ConfigurationError("a PostgreSQL queue needs a connection string or URL")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ConfigurationError(f"pool_size must be a positive int, not {pool_size!r}")
        self.name = name
        self.visibility_timeout = check_seconds(visibility_timeout, "visibility_timeout", positive=True)
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        self._sleep = sleep
        self._where = f"PostgresQueue {name!r}"
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._create_schema()  # on a connection of its own: a refused login fails here, as itself
        pools = load_optional("idemflow.async_worklist.queues", "ConnectionPool", _POOL)
        self._pool: Any = pools(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            timeout=connect_timeout,
            open=False,
            name=f"idemflow-queue-{name}",
        )
        with self._errors("connect"):
            self._pool.open(wait=False)

    def __repr__(self) -> str:
        return f"PostgresQueue(name={self.name!r})"

    def send(self, body: str, *, delay: float = 0.0) -> None:
        check_body(body, self.max_body_bytes, self._where)
        delay = check_seconds(delay, "delay")
        now = self._clock()
        self._execute("send", SEND, (self.name, uuid.uuid4().hex, body.encode(), now + delay, now))

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        check_max_messages(max_messages)
        hide = self._timeout(visibility_timeout)
        wait = check_seconds(wait, "wait")
        claim = lambda: self._claim(max_messages, hide)  # noqa: E731 - the look polled repeats
        return polled(claim, self._clock, self._sleep, wait, longest=LONGEST_PAUSE)

    def ack(self, message: Message) -> None:
        if not self._execute("ack", ACK, (self.name, message.id, message.receipt)):
            log.debug("ack of message %s ignored: already deleted or received elsewhere", message.id)

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        delay = check_seconds(delay, "delay")
        visible_at = self._clock() + delay
        if not self._execute("nack", UPDATE, (visible_at, True, self.name, message.id, message.receipt)):
            log.debug("nack of message %s ignored: already deleted or received elsewhere", message.id)

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        hide = check_seconds(visibility_timeout, "visibility_timeout", positive=True)
        visible_at = self._clock() + hide
        if not self._execute("extend", UPDATE, (visible_at, False, self.name, message.id, message.receipt)):
            raise MessageLostError(
                f"cannot extend message {message.id} of {self._where}: "
                "it was deleted or received again elsewhere",
                backend="postgres",
            )
        return message

    def dead_letter(self, message: Message, reason: str) -> None:
        reason = check_reason(reason)
        moved = self._execute(
            "dead_letter", DEAD_LETTER, (self.name, message.id, message.receipt, reason, self._clock())
        )
        if not moved:
            log.debug("dead_letter of message %s ignored: deleted or received elsewhere", message.id)

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        limit = check_limit(limit)
        with self._errors("list_dead_letters"), self._pool.connection() as conn:
            rows = conn.execute(LIST_DEAD, (self.name, limit)).fetchall()
        return [DeadLetter(str(i), bytes(body).decode(), str(why), float(at)) for i, body, why, at in rows]

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Move dead letters back in one statement: each moves at most once, in the order they died."""
        wanted = check_ids(ids)
        if wanted is not None and not wanted:
            return 0
        now = self._clock()
        if wanted is None:
            return self._execute("redrive", REDRIVE_ALL, (self.name, self.name, now, now))
        return self._execute("redrive", REDRIVE_SOME, (self.name, sorted(wanted), self.name, now, now))

    def approximate_size(self) -> int:
        with self._errors("approximate_size"), self._pool.connection() as conn:
            row = conn.execute(COUNT, (self.name,)).fetchone()
        return int(row[0])

    def stats(self) -> QueueStats:
        """Exact counts from one read; ``lag`` since the oldest visible message became visible."""
        now = self._clock()
        with self._errors("stats"), self._pool.connection() as conn:
            visible, delayed, held, total, oldest = conn.execute(
                STATS, (now, now, now, now, self.name)
            ).fetchone()
        lag = oldest_lag(oldest, now)
        return QueueStats(self.name, int(visible), int(delayed), int(held), int(total), lag, True, "exact")

    def close(self) -> None:
        self._pool.close()

    def _timeout(self, visibility_timeout: float | None) -> float:
        if visibility_timeout is None:
            return self.visibility_timeout
        return check_seconds(visibility_timeout, "visibility_timeout", positive=True)

    def _claim(self, limit: int, hide: float) -> list[Message]:
        now = self._clock()
        with self._errors("receive"), self._pool.connection() as conn:
            rows = conn.execute(CLAIM, (now + hide, self.name, now, limit)).fetchall()
        rows.sort(key=lambda row: (row[4], row[5]))  # the order they became visible in
        return [
            Message(str(i), bytes(body).decode(), int(n), str(receipt)) for i, body, n, receipt, *_ in rows
        ]

    def _execute(self, operation: str, statement: str, params: tuple[Any, ...]) -> int:
        """Run one statement; the rows it changed."""
        with self._errors(operation), self._pool.connection() as conn:
            return int(conn.execute(statement, params).rowcount)

    def _create_schema(self) -> None:
        """Make the tables once: processes opening a new database at once take turns on an
        advisory lock (``CREATE TABLE IF NOT EXISTS`` alone races on the catalogue). A direct
        connection, not the pool's: a pool retries a refused login until its timeout and then
        says only that it timed out."""
        connect = load_optional("idemflow.async_worklist.queues", "connect", _POOL)
        timeout = max(1, round(self._connect_timeout))
        with (
            self._errors("connect"),
            connect(self._conninfo, connect_timeout=timeout) as conn,
            conn.transaction(),
        ):
            conn.execute(SCHEMA_LOCK)
            conn.execute(SCHEMA)

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except BackendError:
            raise
        except Exception as exc:
            if not type(exc).__module__.startswith("psycopg"):
                raise
            raise postgres_error(f"{operation} on {self._where} failed", exc, operation) from exc


_POOL = {"ConnectionPool": ("psycopg_pool", "postgres"), "connect": ("psycopg", "postgres")}
"""The pool class and psycopg's ``connect``, loaded on first use: ``psycopg[pool]`` is the
``postgres`` extra."""
