"""The statements of the PostgreSQL queue (:mod:`idemflow.async_worklist.queues.postgres`).

A body is kept as its UTF-8 bytes (``BYTEA``): PostgreSQL's text refuses the NUL character,
which a queue must carry like any other.

Each operation is one statement, so a queue holds no transaction open between calls and an
answer lost on the way back leaves the database as one whole operation or none: a receive
whose answer is lost hides its messages until their visibility ends, as any lost receive does.
"""

from __future__ import annotations

SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('idemflow_queue schema'))"
SCHEMA = """
CREATE TABLE IF NOT EXISTS idemflow_queue (
    seq BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    body BYTEA NOT NULL,
    visible_at DOUBLE PRECISION NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    receipt TEXT,
    sent_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS idemflow_queue_ready ON idemflow_queue (name, visible_at, seq);
CREATE TABLE IF NOT EXISTS idemflow_queue_dead (
    seq BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    id TEXT NOT NULL,
    body BYTEA NOT NULL,
    reason TEXT NOT NULL,
    deliveries INTEGER NOT NULL,
    dead_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS idemflow_queue_dead_by_name ON idemflow_queue_dead (name, seq);
"""

SEND = "INSERT INTO idemflow_queue (name, id, body, visible_at, sent_at) VALUES (%s, %s, %s, %s, %s)"

CLAIM = """
UPDATE idemflow_queue AS q
SET visible_at = %s, deliveries = q.deliveries + 1, receipt = md5(random()::text || q.id || clock_timestamp())
FROM (
    SELECT seq, visible_at FROM idemflow_queue
    WHERE name = %s AND visible_at <= %s
    ORDER BY visible_at, seq LIMIT %s
    FOR UPDATE SKIP LOCKED
) AS ready
WHERE q.seq = ready.seq
RETURNING q.id, q.body, q.deliveries, q.receipt, ready.visible_at, ready.seq
"""
"""Claim the oldest visible messages, skipping rows another receive holds locked; the old
``visible_at`` and ``seq`` come back so the messages are returned in the order they came due."""

ACK = "DELETE FROM idemflow_queue WHERE name = %s AND id = %s AND receipt = %s"

UPDATE = """
UPDATE idemflow_queue SET visible_at = %s, receipt = CASE WHEN %s THEN NULL ELSE receipt END
WHERE name = %s AND id = %s AND receipt = %s
"""
"""A nack (the receipt let go: ``True``) or an extension (kept: ``False``) by a holder."""

DEAD_LETTER = """
WITH moved AS (
    DELETE FROM idemflow_queue WHERE name = %s AND id = %s AND receipt = %s
    RETURNING name, id, body, deliveries
)
INSERT INTO idemflow_queue_dead (name, id, body, reason, deliveries, dead_at)
SELECT name, id, body, %s, deliveries, %s FROM moved
"""

LIST_DEAD = "SELECT id, body, reason, dead_at FROM idemflow_queue_dead WHERE name = %s ORDER BY seq LIMIT %s"

_REDRIVE = """
WITH moved AS (
    DELETE FROM idemflow_queue_dead WHERE name = %s{only}
    RETURNING seq, body
)
INSERT INTO idemflow_queue (name, id, body, visible_at, sent_at)
SELECT %s, md5(random()::text || seq || clock_timestamp()), body, %s, %s FROM moved ORDER BY seq
"""
REDRIVE_ALL = _REDRIVE.format(only="")
REDRIVE_SOME = _REDRIVE.format(only=" AND id = ANY(%s)")

COUNT = "SELECT count(*) FROM idemflow_queue WHERE name = %s"

STATS = """
SELECT count(*) FILTER (WHERE visible_at <= %s),
       count(*) FILTER (WHERE visible_at > %s AND receipt IS NULL),
       count(*) FILTER (WHERE visible_at > %s AND receipt IS NOT NULL),
       count(*),
       min(visible_at) FILTER (WHERE visible_at <= %s)
FROM idemflow_queue WHERE name = %s
"""
