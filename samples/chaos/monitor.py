"""The checks made while a workload runs: :func:`watching` checks invariants over and over."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from idemflow import IdemflowError, open_store
from idemflow.stores import SqliteStore, Store


class Monitor:
    """What :func:`watching` found while the block ran: how many checks, which problems (once each)."""

    def __init__(self) -> None:
        self.checks = 0
        self.problems: list[str] = []


@contextlib.contextmanager
def watching(
    where: Path | str, invariants: Callable[[Store], list[str]], every: float = 0.1
) -> Iterator[Monitor]:
    """Check ``invariants`` on the SQLite file ``where`` (or the store at the URL ``where``) from a
    thread, over and over, while the block runs (from when the file exists: the workload creates it).

    >>> import tempfile, time
    >>> path = Path(tempfile.mkdtemp()) / "w.sqlite3"
    >>> SqliteStore(path).close()
    >>> with watching(path, lambda store: ["always wrong"], every=0.01) as monitor:
    ...     while monitor.checks < 2:  # checked over and over while the block runs
    ...         time.sleep(0.01)
    >>> monitor.checks >= 2, monitor.problems
    (True, ['while running: always wrong'])
    """
    monitor, stop = Monitor(), threading.Event()

    def run() -> None:
        store: Store | None = None
        while not stop.wait(0 if monitor.checks == 0 else every):
            try:
                if store is None and isinstance(where, str):
                    store = open_store(where)
                elif store is None and isinstance(where, Path) and where.exists():
                    store = SqliteStore(where)
                if store is None:
                    continue
                found = invariants(store)
            except IdemflowError:  # busy, or tables not created yet: check again next time
                continue
            monitor.checks += 1
            for problem in found:
                if f"while running: {problem}" not in monitor.problems:
                    monitor.problems.append(f"while running: {problem}")
        if store is not None:
            store.close()

    thread = threading.Thread(target=run, name="chaos-monitor", daemon=True)
    thread.start()
    try:
        yield monitor
    finally:
        stop.set()
        thread.join()


def money_holds(total: int) -> Callable[[Store], list[str]]:
    """The transfer sample's invariant at every instant: no money appears, no balance goes negative
    (a transfer between its debit and its credit holds some back)."""

    def invariants(store: Store) -> list[str]:
        from samples.transfer.workflows import balances

        found = balances(store)
        if sum(found.values()) > total or any(value < 0 for value in found.values()):
            return [f"balances {found} (opening total {total})"]
        return []

    return invariants
