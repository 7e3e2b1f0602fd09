"""SqliteStore's own promises beyond the conformance suite: how the threads of one process
share its file."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

from tenacity import Retrying, stop_after_attempt

from idemflow import Idem, RetryPolicy, SqliteStore, atomic, run, workflow
from idemflow.records import RunStatus
from idemflow.runner import run_status
from idemflow.stores.base import RowRef


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


def _open_and_count(path: str, ready: Any, start: Any, answers: Any) -> None:
    ready.put(os.getpid())
    start.wait()
    try:
        store = SqliteStore(path)
        run(count(os.getpid()), request_id=f"p{os.getpid()}", store=store)
        store.close()
        answers.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        answers.put(repr(exc))


def test_processes_racing_to_create_one_file_all_open_it(tmp_path: Path) -> None:
    """Processes that open a new store file at the same instant race to create it and switch it
    to WAL mode; SQLite answers some of them "database is locked" at once, without waiting in its
    busy handler. Every one of them must open the store all the same."""
    ctx = multiprocessing.get_context("spawn")
    failures: list[str] = []
    for trial in range(8):
        path = str(tmp_path / f"race{trial}.sqlite3")
        ready, start, answers = ctx.Queue(), ctx.Event(), ctx.Queue()
        args = (path, ready, start, answers)
        processes = [ctx.Process(target=_open_and_count, args=args) for _ in range(6)]
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=60)  # all imported and waiting: then they open the file at once
        start.set()
        failures += [got for got in (answers.get(timeout=60) for _ in processes) if got != "ok"]
        for process in processes:
            process.join(timeout=60)
        total = SqliteStore(path).read(RowRef("tableb", "all", "dn"))
        assert total is not None and total.value == 6
    assert failures == []
