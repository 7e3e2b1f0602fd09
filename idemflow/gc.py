"""Garbage collection of memo rows and run records of finished requests.

DynamoDB expires them by TTL (``expires_at``); Azure Tables and SQLite have
no TTL, so ``idemflow gc`` does it. Only requests whose run record says they
finished (completed or aborted) more than ``older_than`` seconds ago are
collected: a request that is not finished keeps every row it needs to
resume. Memos go first and the run record last, so a duplicate arriving
during collection still finds the finished record and returns it. After
collection a duplicate of that request id is a new request: the retention
window is the deduplication window.

>>> from idemflow import MemoryStore, atomic, run
>>> store = MemoryStore()
>>> run(atomic("items", "p", lambda tx: tx.put("k", 1)), request_id="r", store=store)
>>> collect(store, older_than=0.0, now=lambda: 1e12).requests
1
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from idemflow.keys import RUNS_TABLE, parse_memo_key
from idemflow.policy import resend
from idemflow.records import RunRecord, RunStatus
from idemflow.stores.base import Delete, Op, RowRef, Store

_BATCH = 25  # operations per delete commit: under every backend's limit


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one collection removed."""

    requests: int
    memo_rows: int
    run_records: int


def collect(store: Store, *, older_than: float, now: Callable[[], float] = time.time) -> GcReport:
    """Delete bookkeeping rows of requests finished more than ``older_than`` seconds ago."""
    cutoff = now() - older_than
    finished: dict[tuple[str, str], RowRef] = {}
    for partition, key, row in store.scan(RUNS_TABLE):
        if not key.startswith("r"):
            continue
        try:
            record = RunRecord.from_json(row.value)
        except (KeyError, TypeError, ValueError):
            continue
        done = record.status in (RunStatus.COMPLETED, RunStatus.ABORTED)
        if done and record.finished_at is not None and record.finished_at <= cutoff:
            finished[(key[1:], partition)] = RowRef(RUNS_TABLE, partition, key)
    memo_rows = 0
    for table in store.tables():
        doomed: dict[str, list[Op]] = {}
        for partition, key, _row in store.scan(table):
            parsed = parse_memo_key(key)
            if parsed is not None and (parsed[0], parsed[1]) in finished:
                doomed.setdefault(partition, []).append(Delete(RowRef(table, partition, key)))
        for ops in doomed.values():  # one partition per commit: every backend allows that
            for start in range(0, len(ops), _BATCH):
                resend(store.commit, ops[start : start + _BATCH])
                memo_rows += len(ops[start : start + _BATCH])
    for ref in finished.values():
        resend(store.commit, [Delete(ref)])
    return GcReport(requests=len(finished), memo_rows=memo_rows, run_records=len(finished))


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``12h`` or ``7d``.

    >>> parse_duration("7d"), parse_duration("90")
    (604800.0, 90.0)
    """
    from idemflow.errors import InvalidInputError

    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    stripped = text.strip().lower()
    factor = units.get(stripped[-1:])
    number = stripped[:-1] if factor is not None else stripped
    try:
        value = float(number) * (factor or 1.0)
    except ValueError:
        raise InvalidInputError(f"duration {text!r} is not like 90s, 15m, 12h or 7d") from None
    if value < 0:
        raise InvalidInputError(f"duration {text!r} is negative")
    return value
