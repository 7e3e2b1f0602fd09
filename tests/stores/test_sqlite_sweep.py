"""SQLite's expiry keeps pace with its writers whatever the file's size, says how far behind it is,
and gives freed space back to the file system."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from idemflow.admin import RunRecord, expired_stats
from idemflow.client import RunStatus
from idemflow.keys import RUNS_TABLE
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores import MemoryStore, SqliteStore, _sqlite_sweep
from idemflow.stores.base import Cond, Insert, Put, RowRef

MEMO = '{"id":"atomic a","v":1}'
RETENTION = 60.0


def _memos(t: float, count: int) -> list[Insert]:
    """``count`` memos of requests that have no run record (deleted once expired), written at ``t``."""
    return [
        Insert(RowRef("items", "memos", f"mwf|r{t}-{n}|s1"), {"id": "atomic a", "v": 1}, MEMO, RETENTION + t)
        for n in range(count)
    ]


def _fill(store: SqliteStore, data_rows: int) -> None:
    """``data_rows`` rows the sweep can never delete, in one run of keys (a ledger's partition)."""
    for first in range(0, data_rows, 5000):
        rows = range(first, min(first + 5000, data_rows))
        store.commit([Put(RowRef("items", "ledger", f"d{n:08}"), n, str(n), expect=Cond.ANY) for n in rows])


def _file(path: Path) -> int:
    return sum(os.path.getsize(name) for name in (path, Path(f"{path}-wal")) if name.exists())


@pytest.mark.parametrize("data_rows", [0, 20_000, 60_000])
def test_expired_rows_stay_bounded_whatever_the_file_size(tmp_path: Path, data_rows: int) -> None:
    """2 memos a (simulated) second for two hours, a fixed clock, sweeps ten simulated minutes
    apart by time (one window each: 3 rows a second) and sooner when behind their pace. However
    many data rows stand in the way, once the first pass is over (its size is an estimate) a memo
    waits at most one pass: the writers' pace (8 rows read per row written) where that is
    quicker, else ``PASS_SECONDS``. The expired memos level off instead of growing with the file."""
    rate, now = 2, [0.0]
    store = SqliteStore(tmp_path / "soak.sqlite3", synchronous="OFF", expire_every=None)
    _fill(store, data_rows)
    store.schedule_expiry(600.0, clock=lambda: now[0])
    late: list[float] = []
    present: list[int] = []
    for t in range(2 * 3600):
        now[0] = float(t)
        store.commit(_memos(t, rate))
        if t % 300 == 299:
            stats = expired_stats(store, now=lambda: now[0])
            late.append(stats.oldest["memos"])
            present.append(stats.rows["memos"])
    by_writes = (data_rows + 2000) / (8 * rate)  # the documented pace: 8 rows read per row written,
    bound = min(1800.0, by_writes) + 300.0  # a pass at most every 30 minutes; and the last sweeps' lag
    steady = slice(2 * len(late) // 3, None)  # the last 40 minutes: the first pass long over
    assert max(late[steady]) <= bound, late
    assert max(present[steady]) <= rate * bound, present
    assert present[-1] <= max(present[: len(present) // 2]) + rate * 300, present  # level, not growing
    store.close()


def test_a_fixed_sweep_rate_would_fall_behind(tmp_path: Path) -> None:
    """What the pace is for: the writers add more rows a minute than one 2,000-row window (the
    sweep of old, once a minute) reads, so such a sweep never ends its pass."""
    assert 5 * 60 + 5 * 60 > 0  # (the arithmetic of the soak's 30 run/s is in docs/decisions.md)
    window = _sqlite_sweep.Window(now=0.0, rows=0)
    window.written = 8_000  # one minute of the soak's writes
    window.advanced(_sqlite_sweep.WINDOW_ROWS, wrapped=False, now=60.0)
    assert window.behind(now=60.0)  # so the next commit sweeps again, instead of a minute later
    window.advanced(8 * 8_000, wrapped=False, now=61.0)
    assert not window.behind(now=61.0)


def _held_record(request_id: str) -> Put:
    """A finished run record as format 4 wrote it (no incarnation), expiring in a second: a sweep
    keeps it one more retention window (at least a day) after that."""
    value: Any = RunRecord("fp", RunStatus.COMPLETED, finished_at=time.time()).to_json()
    return Put(run_ref("wf", request_id), value, encode(value), expires_at=time.time() + 1.0)


def test_the_backlog_says_what_the_last_pass_left_and_how_late(tmp_path: Path) -> None:
    """A finished run record in its hold (written before incarnations) is left (and counted);
    expired orphan memos are deleted (and how late the latest was is reported); nothing is
    reported before a pass ends."""
    store = SqliteStore(tmp_path / "s.sqlite3", expire_every=None)
    store.commit([_held_record("r"), Put(RowRef("items", "p", "dk"), 1, "1")])
    store.commit(_memos(0, 3))  # expire at 60.0
    assert store.expiry_backlog is None
    at = time.time() + 3600  # r's run record expired, and in its hold (a day at least)
    report = store.expire(now=at)  # one window holds the whole file: the pass ends with it
    backlog = store.expiry_backlog
    assert backlog is not None and report.deleted == backlog.deleted == 3  # the orphans
    assert backlog.expired_left == 1  # r's run record: finished, kept one more window
    assert backlog.latest == pytest.approx(at - RETENTION)
    assert backlog.rows == 5  # r's run record and data row, the 3 orphans
    expected = {"memos": 0, "run records": 1, "outbox/inbox": 0, "events/streams": 0, "other": 0}
    assert expired_stats(store, now=lambda: at).rows == expected
    store.close()


def test_the_memory_store_is_not_stopped_by_held_run_records() -> None:
    """The memory store's sweep goes in expiry order from where it stopped: 150 held run records
    that expired first no longer stand before the memos that expired after them."""
    store = MemoryStore(expire_every=None)
    store.commit([_held_record(f"r{n}") for n in range(150)])
    store.commit(_memos(time.time() + 100, 5))  # expire after the run records
    at = time.time() + 3600  # all expired; the run records in their hold (a day at least)
    for _ in range(4):
        store.expire(now=at)
    assert expired_stats(store, now=lambda: at).rows["memos"] == 0
    assert store.expiry_backlog is not None and store.expiry_backlog.expired_left == 150


def test_collected_rows_give_their_space_back(tmp_path: Path) -> None:
    """A new file is ``auto_vacuum=INCREMENTAL``: rows a sweep deletes free pages, and beyond
    what it keeps for new rows the file shrinks (``release`` gives back the rest)."""
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path, synchronous="OFF", expire_every=None)
    conn = store._connection("main")
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    big = "x" * 2000
    for first in range(0, 6000, 500):
        store.commit(
            [
                Insert(RowRef("items", "p", f"mwf|r{n}|s1"), big, f'"{big}"', 1.0)
                for n in range(first, first + 500)
            ]
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    full = _file(path)
    while store.expire(now=100.0).deleted:
        pass
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    swept = _file(path)
    assert swept < full - 4 * 1024 * 1024  # the sweeps gave back all but what they keep (4 MiB)
    store.release()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert _file(path) < 100_000 < swept
    store.close()


def test_vacuum_shrinks_and_converts_a_file_made_without_auto_vacuum(tmp_path: Path) -> None:
    """An old file (``auto_vacuum=NONE``) keeps its size whatever is deleted; ``vacuum`` (what
    ``idemflow gc --vacuum`` runs) rewrites it smaller and in incremental mode."""
    path = tmp_path / "old.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute("CREATE TABLE t (x)")  # a table first: the file stays auto_vacuum=NONE
        old.execute("DROP TABLE t")
        old.commit()
    store = SqliteStore(path, synchronous="OFF", expire_every=None)
    for first in range(0, 3000, 500):
        store.commit(
            [Insert(RowRef("items", "p", f"mwf|r{n}|s1"), 1, "1", 1.0) for n in range(first, first + 500)]
        )
    while store.expire(now=100.0).deleted:
        pass
    assert store.release() == 0  # NONE: nothing to give back incrementally
    before, after = store.vacuum()
    assert after < before
    assert store._connection("main").execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert store.read(RowRef(RUNS_TABLE, "x", "rwf")) is None  # still a working store
    store.close()
