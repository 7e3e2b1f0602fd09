"""SqliteStore's own promises beyond the conformance suite: how the threads of one process
share its file."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from tenacity import Retrying, stop_after_attempt

from idemflow import Idem, RetryPolicy, atomic, run, workflow
from idemflow.client import RunStatus
from idemflow.running.runner import run_status
from idemflow.stores import SqliteStore, _sqlite_sweep
from idemflow.stores.base import Insert, Put, RowRef, RunQuery

MEMO = '{"id":"atomic a","v":1}'


@workflow("count")
def count(n: int) -> Generator[Idem[Any], Any, int]:
    yield atomic("tablea", f"p{n % 3}", lambda tx: tx.increment("n"))
    yield atomic("tableb", "all", lambda tx: tx.increment("n"))
    return n


def test_threads_of_one_store_take_turns_without_busy_errors(tmp_path: Path) -> None:
    """With a busy timeout far below the time the other threads hold the lock, threads of one
    store still never see SQLITE_BUSY: they queue on the store's own lock."""
    store = SqliteStore(tmp_path / "store.sqlite3", busy_timeout=0.0)
    no_retries = RetryPolicy(transient=Retrying(stop=stop_after_attempt(1), reraise=True))
    errors: list[BaseException] = []

    def client(first: int) -> None:
        try:
            for n in range(first, first + 40):
                assert run(count(n), request_id=f"r{n}", store=store, policy=no_retries) == n
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k * 1000,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store.flush()
    total = store.read(RowRef("tableb", "all", "dn"))
    assert total is not None and total.value == 240
    record = run_status(store, "count", "r5039")
    assert record is not None and record.status is RunStatus.COMPLETED
    store.close()


def test_completion_records_are_there_for_another_connection(tmp_path: Path) -> None:
    """The completion record (a cache write) is not fsynced but is written when run returns:
    a duplicate in another process costs one read."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    other = SqliteStore(path)  # another process's connection: no flush in between
    for n in range(20):
        run(count(n), request_id=f"r{n}", store=store)
        record = run_status(other, "count", f"r{n}")
        assert record is not None and record.status is RunStatus.COMPLETED
    before = other.round_trips
    assert run(count(7), request_id="r7", store=other) == 7
    assert other.round_trips - before == 1
    store.close()
    other.close()


def _open_and_count(paths: list[str], barrier: Any, answers: Any) -> None:
    """Open each new file in turn, all the processes at once (the barrier), and count in it."""
    for path in paths:
        barrier.wait(timeout=120)
        try:
            store = SqliteStore(path)
            run(count(os.getpid()), request_id=f"p{os.getpid()}", store=store)
            store.close()
            answers.put((path, "ok"))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            answers.put((path, repr(exc)))


@pytest.mark.slow
def test_processes_racing_to_create_one_file_all_open_it(tmp_path: Path) -> None:
    """Processes that open a new store file at the same instant race to create it and switch it
    to WAL mode; SQLite answers some of them "database is locked" at once, without waiting in its
    busy handler. Every one of them must open the store all the same: six processes, eight new
    files, each opened by all six at once (one barrier a file: the processes are started once)."""
    ctx = multiprocessing.get_context("spawn")
    paths = [str(tmp_path / f"race{trial}.sqlite3") for trial in range(8)]
    barrier, answers = ctx.Barrier(6), ctx.Queue()
    processes = [ctx.Process(target=_open_and_count, args=(paths, barrier, answers)) for _ in range(6)]
    for process in processes:
        process.start()
    got = [answers.get(timeout=120) for _ in range(len(paths) * len(processes))]
    for process in processes:
        process.join(timeout=60)
    assert [answer for answer in got if answer[1] != "ok"] == []
    for path in paths:
        total = SqliteStore(path).read(RowRef("tableb", "all", "dn"))
        assert total is not None and total.value == 6, path


# -- retention: the store's own expiry --------------------------------------------------------

_SCHEMA_BEFORE_EXPIRY = """
CREATE TABLE idemflow_rows (
    tbl TEXT NOT NULL, part TEXT NOT NULL, rk TEXT NOT NULL, v TEXT NOT NULL, ver INTEGER NOT NULL,
    expires REAL, PRIMARY KEY (tbl, part, rk)
) WITHOUT ROWID
"""


def test_a_file_from_before_expiry_needs_no_migration(tmp_path: Path) -> None:
    """Rows written by a release without expiry carry ``expires`` already: they expire as they are,
    and a sweep reads a range of the primary key (bounded, no index to add or to write)."""
    path = tmp_path / "old.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute(_SCHEMA_BEFORE_EXPIRY)
        old.execute("INSERT INTO idemflow_rows VALUES ('items', 'p', 'mwf|gone|s1', ?, 1, 100.0)", (MEMO,))
        old.execute("INSERT INTO idemflow_rows VALUES ('items', 'p', 'dk', '1', 1, NULL)")
        old.commit()
    store = SqliteStore(path, expire_every=None)
    with contextlib.closing(sqlite3.connect(path)) as look:
        for query, params in (
            (_sqlite_sweep._WINDOW_END, ("", "", "", 1999)),
            (_sqlite_sweep._EXPIRED_IN, ("", "", "", "z", "z", "z", 1e9, 100)),
            (_sqlite_sweep._EXPIRED_AFTER, ("", "", "", 1e9, 100)),
        ):
            plan = look.execute("EXPLAIN QUERY PLAN " + query, params).fetchall()
            assert any("PRIMARY KEY" in str(step[-1]) for step in plan), plan  # a range, not a scan
    report = store.expire(now=1e9)
    assert (report.found, report.deleted) == (1, 1)  # an orphan memo (no run record): deleted
    assert [key for _, key, _ in store.scan("items")] == ["dk"]
    store.close()


def test_sweeps_move_through_the_file_and_wrap_around(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sweep reads the next window after the last one: rows it leaves alone do not hide
    the rows after them, and after the last row it starts again from the first."""
    monkeypatch.setattr(_sqlite_sweep, "WINDOW_ROWS", 2)
    store = SqliteStore(tmp_path / "store.sqlite3", expire_every=None)
    for partition in ("a", "b", "c"):  # data rows never expire; these carry expires all the same
        store.commit([Put(RowRef("items", partition, "dk"), 1, "1", expires_at=100.0)])
    orphan = RowRef("items", "z", "mwf|gone|s1")
    store.commit([Insert(orphan, {"id": "atomic a", "v": 1}, MEMO, expires_at=100.0)])
    assert [store.expire(now=1e9).deleted for _ in range(2)] == [0, 1]
    store.commit([Insert(orphan, {"id": "atomic a", "v": 1}, MEMO, expires_at=100.0)])
    # past the last row (an empty window), then from the first row again
    assert [store.expire(now=1e9).deleted for _ in range(3)] == [0, 0, 1]
    store.close()


def test_commits_sweep_once_per_expire_every(tmp_path: Path) -> None:
    """The sweep rides on commits, only when due: ``expire_every`` apart (checked on a monotonic
    clock, so this test makes it due by rescheduling, not by waiting)."""
    store = SqliteStore(tmp_path / "store.sqlite3", expire_every=3600.0)
    orphan, data = RowRef("items", "p", "mwf|gone|s1"), RowRef("items", "p", "dk")
    store.commit([Insert(orphan, {"id": "atomic a", "v": 1}, MEMO, expires_at=100.0)])
    store.commit([Put(data, 1, "1")])
    assert store.read(orphan) is not None  # long expired, but no sweep is due yet
    store.schedule_expiry(0.0, clock=lambda: 1e9)
    store.commit([Put(data, 2, "2")])
    assert store.read(orphan) is None and store.read(data) is not None
    store.schedule_expiry(None)
    store.commit([Insert(orphan, {"id": "atomic a", "v": 1}, MEMO, expires_at=100.0)])
    store.commit([Put(data, 3, "3")])
    assert store.read(orphan) is not None  # never, once off
    store.close()


def test_a_page_of_runs_reads_the_index_of_start_times_not_the_table(tmp_path: Path) -> None:
    """Every listing query seeks (or walks) the partial index of run records, whatever filters
    it carries, so a page costs about its own records; memos and data rows are not in it."""
    from idemflow.stores._sqlite_runs import page_query

    store = SqliteStore(tmp_path / "runs.sqlite3")
    for n in range(6):
        run(count(n), request_id=f"c{n}", store=store)
    conn = sqlite3.connect(store.path)
    indexed = conn.execute(
        "SELECT tbl, rk FROM idemflow_rows INDEXED BY idemflow_runs_by_start WHERE started IS NOT NULL"
    ).fetchall()
    assert indexed == [("idemflowruns", "rcount")] * 6  # the run records, not the memos beside them
    after = store.run_page(RunQuery(2))[-1].position
    for query in (
        RunQuery(10),
        RunQuery(10, after=after),
        RunQuery(10, workflow="count", status="running", started_by=2e9),
        RunQuery(10, open_only=True, after=after),
    ):
        sql, params = page_query(query)
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "USING INDEX idemflow_runs_by_start" in plan and "PRIMARY KEY" not in plan, plan
    conn.close()
    store.close()


def test_a_file_from_before_the_index_gets_it_when_opened(tmp_path: Path) -> None:
    """A file 0.x wrote (no ``started`` column) is upgraded by the first 1.0 process to open it:
    its run records are listed newest first, its other rows stay out of the index."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE idemflow_rows (tbl TEXT NOT NULL, part TEXT NOT NULL, rk TEXT NOT NULL, "
            "v TEXT NOT NULL, ver INTEGER NOT NULL, expires REAL, PRIMARY KEY (tbl, part, rk)) WITHOUT ROWID"
        )
        rows = [
            ("idemflowruns", "old", "rcount", '{"at":5.0,"fp":"f","result":1,"status":"completed"}'),
            ("idemflowruns", "new", "rcount", '{"fp":"f","st":9.0,"status":"running"}'),
            ("idemflowruns", "new", "mcount|new|s1", MEMO),
            ("tablea", "p1", "dn", "1"),
        ]
        conn.executemany("INSERT INTO idemflow_rows VALUES (?, ?, ?, ?, 1, NULL)", rows)
    store = SqliteStore(path)
    assert [item.partition for item in store.run_page(RunQuery(5))] == ["new", "old"]
    with sqlite3.connect(path) as conn:
        started = conn.execute("SELECT rk, started FROM idemflow_rows ORDER BY tbl, part, rk").fetchall()
    assert started == [("mcount|new|s1", None), ("rcount", 9.0), ("rcount", 5.0), ("dn", None)]
    run(count(1), request_id="c1", store=store)  # and it works as a 1.0 file from then on
    assert store.run_page(RunQuery(5))[0].partition == "c1"
    store.close()
