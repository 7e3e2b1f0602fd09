"""A durable queue in one SQLite file, shared safely by many processes.

Why SQLite: the embedded deployment (``SqliteStore``) needs a queue with no
server. Each message is a row; a receive claims rows inside ``BEGIN
IMMEDIATE`` (SQLite's single-writer lock, across processes) by pushing their
``visible_at`` forward and giving them a fresh random receipt, so no two
receivers hold the same message at once. Ack, nack, extend and dead-letter
check the receipt: a holder whose visibility expired and whose message was
received again elsewhere can no longer touch it. Dead letters are rows of
``idemflow_queue_dead``; a redrive moves them back in one transaction.

Several named queues can share one file (``name``); WAL with
``synchronous=FULL`` by default makes a returned ``send`` survive power loss.

>>> import os, tempfile
>>> from idemflow.async_worklist.queues import SqliteQueue
>>> queue = SqliteQueue(os.path.join(tempfile.mkdtemp(), "q.sqlite3"), name="jobs")
>>> queue.send('{"step": 2}')
>>> [message] = queue.receive()
>>> queue.ack(message)
>>> queue.approximate_size()
0
>>> queue.close()
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Literal

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
from idemflow.core.backlog import QueueStats, oldest_lag
from idemflow.errors import ConfigurationError, InvalidNameError, MessageLostError
from idemflow.stores._sqlite_errors import sqlite_error

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idemflow_queue (
    seq INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    visible_at REAL NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    receipt TEXT,
    sent_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idemflow_queue_ready ON idemflow_queue (name, visible_at, seq);
CREATE TABLE IF NOT EXISTS idemflow_queue_dead (
    seq INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    id TEXT NOT NULL,
    body TEXT NOT NULL,
    reason TEXT NOT NULL,
    deliveries INTEGER NOT NULL,
    dead_at REAL NOT NULL
);
"""
_READY = "SELECT seq, id, body, deliveries FROM idemflow_queue WHERE name = ? AND visible_at <= ?"
_ORDER = " ORDER BY visible_at, seq LIMIT ?"
_STATS = (
    "SELECT SUM(visible_at <= ?), SUM(visible_at > ? AND receipt IS NULL),"
    " SUM(visible_at > ? AND receipt IS NOT NULL), COUNT(*),"
    " MIN(CASE WHEN visible_at <= ? THEN visible_at END)"
    " FROM idemflow_queue WHERE name = ?"
)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SqliteQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` in a SQLite file.

    Each thread gets its own connection; processes coordinate through
    SQLite's file locks. ``receive(wait=...)`` polls with short sleeps (no
    notification crosses processes). ``clock`` (wall time, shared by every
    process) and ``sleep`` are injectable so tests move time instead of
    waiting for it.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "q.sqlite3")
    >>> producer, worker = SqliteQueue(path), SqliteQueue(path)
    >>> producer.send("job")
    >>> worker.receive()[0].body
    'job'
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str = "default",
        visibility_timeout: float = 30.0,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidNameError("queue name", name, "must be a non-empty str")
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = os.fspath(path)
        self.name = name
        self.visibility_timeout = check_seconds(visibility_timeout, "visibility_timeout", positive=True)
        self.max_body_bytes = max_body_bytes
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._clock = clock
        self._sleep = sleep
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._where = f"SqliteQueue {name!r} at {self.path!r}"
        self._connection()  # create the schema now: fail early on a bad path

    def __repr__(self) -> str:
        return f"SqliteQueue({self.path!r}, name={self.name!r})"

    def send(self, body: str, *, delay: float = 0.0) -> None:
        check_body(body, self.max_body_bytes, self._where)
        delay = check_seconds(delay, "delay")
        now = self._clock()
        with self._errors("send"):
            self._connection().execute(
                "INSERT INTO idemflow_queue (name, id, body, visible_at, sent_at) VALUES (?, ?, ?, ?, ?)",
                (self.name, uuid.uuid4().hex, body, now + delay, now),
            )

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        check_max_messages(max_messages)
        hide = self._timeout(visibility_timeout)
        wait = check_seconds(wait, "wait")
        return polled(lambda: self._claim(max_messages, hide), self._clock, self._sleep, wait)

    def ack(self, message: Message) -> None:
        with self._errors("ack"):
            deleted = self._connection().execute(
                "DELETE FROM idemflow_queue WHERE name = ? AND id = ? AND receipt = ?",
                (self.name, message.id, message.receipt),
            )
        if deleted.rowcount == 0:
            log.debug("ack of message %s ignored: already deleted or received elsewhere", message.id)

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        delay = check_seconds(delay, "delay")
        if not self._update(message, self._clock() + delay, release=True):
            log.debug("nack of message %s ignored: already deleted or received elsewhere", message.id)

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        hide = check_seconds(visibility_timeout, "visibility_timeout", positive=True)
        if not self._update(message, self._clock() + hide, release=False):
            raise MessageLostError(
                f"cannot extend message {message.id} of {self._where}: "
                "it was deleted or received again elsewhere",
                backend="sqlite",
            )
        return message

    def dead_letter(self, message: Message, reason: str) -> None:
        reason = check_reason(reason)
        with self._transaction("dead_letter") as conn:
            found = conn.execute(
                "SELECT body, deliveries FROM idemflow_queue WHERE name = ? AND id = ? AND receipt = ?",
                (self.name, message.id, message.receipt),
            ).fetchone()
            if found is None:
                log.debug("dead_letter of message %s ignored: deleted or received elsewhere", message.id)
                return
            conn.execute(
                "INSERT INTO idemflow_queue_dead (name, id, body, reason, deliveries, dead_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (self.name, message.id, found[0], reason, found[1], self._clock()),
            )
            conn.execute("DELETE FROM idemflow_queue WHERE name = ? AND id = ?", (self.name, message.id))

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        limit = check_limit(limit)
        with self._errors("list_dead_letters"):
            rows = self._connection().execute(
                "SELECT id, body, reason, dead_at FROM idemflow_queue_dead"
                " WHERE name = ? ORDER BY seq LIMIT ?",
                (self.name, -1 if limit is None else limit),
            )
            return [DeadLetter(*row) for row in rows.fetchall()]

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Move dead letters back in one ``BEGIN IMMEDIATE`` transaction: each moves at most once."""
        wanted = check_ids(ids)
        if wanted is not None and not wanted:
            return 0
        with self._transaction("redrive") as conn:
            select = "SELECT seq, body FROM idemflow_queue_dead WHERE name = ?"
            if wanted is None:
                rows = conn.execute(select + " ORDER BY seq", (self.name,)).fetchall()
            else:
                rows = [r for i in wanted for r in conn.execute(select + " AND id = ?", (self.name, i))]
            now = self._clock()
            for seq, body in sorted(rows):
                conn.execute(
                    "INSERT INTO idemflow_queue (name, id, body, visible_at, sent_at) VALUES (?, ?, ?, ?, ?)",
                    (self.name, uuid.uuid4().hex, body, now, now),
                )
                conn.execute("DELETE FROM idemflow_queue_dead WHERE seq = ?", (seq,))
        return len(rows)

    def approximate_size(self) -> int:
        with self._errors("approximate_size"):
            row = (
                self._connection()
                .execute("SELECT COUNT(*) FROM idemflow_queue WHERE name = ?", (self.name,))
                .fetchone()
            )
        return int(row[0])

    def stats(self) -> QueueStats:
        """Exact counts from one read; ``lag`` since the oldest visible message became visible."""
        now = self._clock()
        with self._errors("stats"):
            row = self._connection().execute(_STATS, (now, now, now, now, self.name)).fetchone()
        visible, delayed, held, total, oldest = (row[0] or 0), (row[1] or 0), (row[2] or 0), row[3], row[4]
        lag = oldest_lag(oldest, now)
        return QueueStats(self.name, visible, delayed, held, int(total), lag, True, "exact")

    def close(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    def _timeout(self, visibility_timeout: float | None) -> float:
        if visibility_timeout is None:
            return self.visibility_timeout
        return check_seconds(visibility_timeout, "visibility_timeout", positive=True)

    def _claim(self, limit: int, hide: float) -> list[Message]:
        conn = self._connection()
        now = self._clock()
        with self._errors("receive"):  # cheap look first: an empty poll takes no write lock
            if conn.execute(_READY + " LIMIT 1", (self.name, now)).fetchone() is None:
                return []
        with self._transaction("receive") as conn:
            rows = conn.execute(_READY + _ORDER, (self.name, now, limit)).fetchall()
            claimed = []
            for seq, message_id, body, deliveries in rows:
                receipt = uuid.uuid4().hex
                conn.execute(
                    "UPDATE idemflow_queue SET visible_at = ?, deliveries = ?, receipt = ? WHERE seq = ?",
                    (now + hide, deliveries + 1, receipt, seq),
                )
                claimed.append(Message(message_id, body, deliveries + 1, receipt))
        return claimed

    def _update(self, message: Message, visible_at: float, *, release: bool) -> bool:
        receipt = "NULL" if release else "receipt"
        with self._errors("nack" if release else "extend"):
            updated = self._connection().execute(
                f"UPDATE idemflow_queue SET visible_at = ?, receipt = {receipt}"
                " WHERE name = ? AND id = ? AND receipt = ?",
                (visible_at, self.name, message.id, message.receipt),
            )
        return updated.rowcount > 0

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise sqlite_error(f"cannot open {self._where}", exc, "connect", opening=True) from exc
        self._local.conn = conn
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        with self._errors(operation):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise sqlite_error(f"{operation} on {self._where} failed", exc, operation) from exc
