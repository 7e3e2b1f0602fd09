"""What one SQLite commit executes: its statements and how each operation maps onto them.

Kept apart from :mod:`idemflow.stores.sqlite` (connections, transactions, retries, scans):
this is the store's hot path, one statement per operation where it can be (no read first).
A run record's write also sets ``started``, the column the index of run records is on
(:mod:`idemflow.stores._sqlite_runs`); every other row leaves it NULL, outside the index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from idemflow.serialization import decode
from idemflow.stores._local import incremented, matches, raised_floor, written_version
from idemflow.stores._runs_order import run_started
from idemflow.stores.base import Cond, Delete, Increment, Insert, Op, OpFailure, Put, Row

SELECT_ROW = "SELECT v, ver FROM idemflow_rows WHERE tbl = ? AND part = ? AND rk = ?"
_COLUMNS = "idemflow_rows (tbl, part, rk, v, ver, expires, started)"
_UPSERT = f"INSERT OR REPLACE INTO {_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?)"
_DELETE = "DELETE FROM idemflow_rows WHERE tbl = ? AND part = ? AND rk = ?"
# The version of a row created now: just above the floor (stores/_local.py), read in the statement.
_CREATED = "COALESCE((SELECT ver FROM idemflow_floor WHERE id = 0), 0) + 1"
_INSERT_NEW = (
    f"INSERT INTO {_COLUMNS} VALUES (?, ?, ?, ?, {_CREATED}, ?, ?) ON CONFLICT (tbl, part, rk) DO NOTHING"
)
# A blind write: a new row gets the created version, an existing one its version + 1 (version_after).
# It leaves ``started`` as the claim wrote it: a completion record then costs the index of run
# records nothing (SQLite updates an index only when a column in it changes).
_UPSERT_BUMP = (
    f"INSERT INTO {_COLUMNS} VALUES (?, ?, ?, ?, {_CREATED}, ?, ?) "
    "ON CONFLICT (tbl, part, rk) DO UPDATE SET v = excluded.v, ver = ver + 1, expires = excluded.expires"
)
# An integer increment in one statement where the row is absent or holds a small integer (at most
# 15 characters of canonical JSON: no overflow); anything else changes nothing (rowcount 0) and
# takes the general path, which computes in Python or raises the typed error.
_INCREMENT_SMALL_INT = (
    f"INSERT INTO idemflow_rows (tbl, part, rk, v, ver, expires) VALUES (?, ?, ?, ?, {_CREATED}, NULL) "
    "ON CONFLICT (tbl, part, rk) DO UPDATE SET v = CAST(CAST(v AS INTEGER) + ? AS TEXT), "
    "ver = ver + 1, expires = NULL WHERE length(v) <= 15 AND v NOT GLOB '*[^0-9-]*'"
)
_SMALL_DELTA = 2**53
UPDATE_BUMP = (
    "UPDATE idemflow_rows SET v = ?, ver = ver + 1, expires = ? WHERE tbl = ? AND part = ? AND rk = ?"
)
_SELECT_FLOOR = "SELECT ver FROM idemflow_floor WHERE id = 0"
_SET_FLOOR = "INSERT OR REPLACE INTO idemflow_floor (id, ver) VALUES (0, ?)"


def apply(conn: sqlite3.Connection, ops: Sequence[Op]) -> list[OpFailure]:
    """Apply ``ops`` inside the open write transaction; return the failed conditions.

    Inserts, blind puts and small integer increments are single statements (no
    read first): this is the hot path of every step. Versions follow
    :mod:`idemflow.stores._local`: those statements read the floor themselves,
    the general path reads it once when it first needs it, and a delete raises
    it at once, so later operations of the same commit see it. On any failure
    the caller rolls back.
    """
    floor: int | None = None
    failures: list[OpFailure] = []
    for index, op in enumerate(ops):
        key = (op.ref.table, op.ref.partition, op.ref.key)
        if isinstance(op, Insert):
            inserted = conn.execute(
                _INSERT_NEW, (*key, op.text, op.expires_at, run_started(op.ref, op.value))
            )
            if inserted.rowcount == 0:
                found = conn.execute(SELECT_ROW, key).fetchone()
                failures.append(OpFailure(index, Row(decode(found[0]), found[1])))
            continue
        if isinstance(op, Put) and op.expect is Cond.ANY:
            conn.execute(_UPSERT_BUMP, (*key, op.text, op.expires_at, run_started(op.ref, op.value)))
            continue
        if (
            isinstance(op, Increment)
            and type(op.delta) is int
            and -_SMALL_DELTA < op.delta < _SMALL_DELTA
            and conn.execute(_INCREMENT_SMALL_INT, (*key, str(op.delta), op.delta)).rowcount
        ):
            continue
        if floor is None:
            held = conn.execute(_SELECT_FLOOR).fetchone()
            floor = 0 if held is None else int(held[0])
        found = conn.execute(SELECT_ROW, key).fetchone()
        current = None if found is None else (found[0], found[1])
        if isinstance(op, Increment):
            text = incremented(op.ref, current, op.delta)
            conn.execute(_UPSERT, (*key, text, written_version(current, floor), None, None))
        elif not matches(current, op.expect):
            failures.append(OpFailure(index))
        elif isinstance(op, Put):
            version = written_version(current, floor)
            conn.execute(_UPSERT, (*key, op.text, version, op.expires_at, run_started(op.ref, op.value)))
        elif isinstance(op, Delete) and current is not None:
            conn.execute(_DELETE, key)
            raised = raised_floor(floor, current)
            if raised != floor:
                floor = raised
                conn.execute(_SET_FLOOR, (floor,))
    return failures
