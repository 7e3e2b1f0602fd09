"""SQLite's index of run records by start time, and the query that pages through it.

``runs list --limit 10`` used to read every run record (0.49 s at 50,000 requests). Each row
has a ``started`` column, set only when a run record is written (its start time: ``st``, else
``at`` for a record 0.1 wrote, else 0; see :func:`idemflow.stores._runs_order.run_started`) and
NULL for every other row; a partial index on ``(started, rk, part)`` holds the non-NULL ones,
so only run records are in it, and a page is a seek and ``limit`` steps down it, newest first.

What a commit pays: a claim adds its index entry (about one page written); a completion record,
a blind write that leaves ``started`` alone, pays nothing (SQLite updates an index only when a
column in it changes); a worker's conditional rewrite of a record (a note, a retry count)
replaces its entry. See the runs-list entry of ``docs/decisions.md`` for the measurement.

The query names the index (``INDEXED BY``): a file never analysed gives the planner no
statistics, and it would rather sort the table than trust a partial index.

A file written before 1.0 lacks the column: :func:`upgrade` adds it, fills it for the run
records already there and builds the index, once, in one write transaction.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from idemflow.keys import RUN, RUNS_TABLE
from idemflow.records import OPEN_STATUSES
from idemflow.stores._runs_order import Place
from idemflow.stores.base import RunQuery

assert RUNS_TABLE.isalnum() and RUN.isalpha() and len(RUN) == 1  # safe as SQL literals below

INDEX = (
    "CREATE INDEX IF NOT EXISTS idemflow_runs_by_start ON idemflow_rows (started, rk, part) "
    "WHERE started IS NOT NULL"
)
_FILL = (
    "UPDATE idemflow_rows SET started = coalesce(json_extract(v, '$.st'), json_extract(v, '$.at'), 0) "
    f"WHERE tbl = '{RUNS_TABLE}' AND rk >= '{RUN}' AND rk < '{chr(ord(RUN) + 1)}'"
)


def upgrade(conn: sqlite3.Connection) -> None:
    """Give a file from before 1.0 the ``started`` column, filled, and the index (a no-op on a
    file that has them; processes racing to open it take turns on the write lock)."""
    if not _has_started(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not _has_started(conn):  # another process may have done it while this one waited
                conn.execute("ALTER TABLE idemflow_rows ADD COLUMN started REAL")
                conn.execute(_FILL)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    conn.execute(INDEX)


def _has_started(conn: sqlite3.Connection) -> bool:
    return any(column[1] == "started" for column in conn.execute("PRAGMA table_info(idemflow_rows)"))


def page_query(query: RunQuery) -> tuple[str, list[Any]]:
    """The SQL and parameters of one page (``part, rk, v, ver, started`` per row)."""
    where: list[str] = ["started IS NOT NULL"]
    params: list[Any] = []
    if query.after is not None:
        below = Place.parse(query.after)
        where.append("started <= ? AND (started < ? OR (rk, part) < (?, ?))")
        params += [below.started, below.started, below.key, below.partition]
    if query.started_by is not None:
        where.append("started <= ?")
        params.append(query.started_by)
    if query.workflow is not None:
        where.append("rk = ?")
        params.append(RUN + query.workflow)
    if query.status is not None:
        where.append("json_extract(v, '$.status') = ?")
        params.append(query.status)
    elif query.open_only:
        where.append(f"json_extract(v, '$.status') IN ({', '.join('?' * len(OPEN_STATUSES))})")
        params += OPEN_STATUSES
    for key, value in query.tags:  # a key is letters, digits and _ - . : (core.tags): no quote in it
        where.append("json_extract(v, ?) = ?")
        params += [f'$.tg."{key}"', value]
    sql = (
        "SELECT part, rk, v, ver, started FROM idemflow_rows INDEXED BY idemflow_runs_by_start "
        f"WHERE {' AND '.join(where)} ORDER BY started DESC, rk DESC, part DESC LIMIT ?"
    )
    return sql, [*params, query.limit]
