"""What a request that continues as new holds and costs, period after period.

A subscription (an outside charge, an atomic bill, a timer of one period, ``continue_as_new``)
runs ``--periods`` periods under ``run`` with a simulated clock (a day per period, a week's
retention) that applies expiry at each timer as the backend's service does: SQLite's sweep, and
on DynamoDB Local the TTL played by deleting every expired item in a random order (the local
engine never applies TTL). Measured:

1. **Rows held** by the request (its bookkeeping rows: run record, memos, event) after periods
   1, 10, 50 and 100: the goal is a constant, one period's rows.
2. **Store calls per period**: reads and commits of the first period, and of a later one, which
   replaces the memos the earlier incarnation left at the same steps.
3. **Calls of the switch**: reads and commits from the last step of a period to the first of the
   next (the record read and rewritten, the sleep's end memo).

Numbers are printed and written to ``renewal.md`` / ``renewal.json``; none is asserted.

Run: ``python -m benchmarks.renewal [--stores sqlite,dynamodb-local] [--periods 100] [--quick]``.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.backends import LABELS, open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from idemflow import RetryPolicy, Tx, atomic, continue_as_new, effect, run, set_event, sleep, workflow
from idemflow.stores import Store
from idemflow.stores.base import CommitOutcome, Op, Row, RowRef
from idemflow.stores.registry import STORES, load
from idemflow.testing import StoreWrapper

KINDS = ("sqlite", "dynamodb-local")
DAY = 86400.0
RETENTION = 7 * DAY
MARKS = (1, 10, 50, 100)


class Counting(StoreWrapper):
    """Counts reads (a batched read is one) and commits, and notes the step a period is at."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.reads = 0
        self.commits = 0

    def read(self, ref: RowRef) -> Row | None:
        self.reads += 1
        return self.inner.read(ref)

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        self.reads += 1
        return self.inner.read_many(refs)

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self.commits += 1
        return self.inner.commit(ops)

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self.commits += 1
        self.inner.commit_cache(ops)


class Periods:
    """The simulated clock: a timer moves it to its end, and expiry is applied there as the
    backend's service applies it; the rows the request holds are noted at every mark."""

    def __init__(self, store: Counting, request_id: str) -> None:
        self.now = 1_800_000_000.0
        self.store = store
        self.request_id = request_id
        self.period = 1
        self.held: dict[int, int] = {}
        self.calls: list[tuple[int, int]] = []
        self._seen = (0, 0)

    def __call__(self) -> float:
        return self.now

    def skip_to(self, when: float) -> None:
        self.now = max(self.now, when)
        expire(self.store.inner, self.now)

    def mark(self, period: int) -> None:
        """Called by the period's first step: the calls of the one before, and its rows."""
        counted = (self.store.reads, self.store.commits)
        self.calls.append((counted[0] - self._seen[0], counted[1] - self._seen[1]))
        self._seen = counted
        if period - 1 in MARKS:
            self.held[period - 1] = len(rows_of(self.store.inner, self.request_id))


def expire(store: Store, now: float) -> None:
    sweep = getattr(store, "expire", None)
    if callable(sweep):
        while sweep(now=now, limit=1000).found:
            pass
        return
    found = load(_entry(store).row_expiries)(store)
    victims = [where for where, at in found.items() if at is not None and at < now]
    random.Random(0).shuffle(victims)
    client: Any = store.client  # type: ignore[attr-defined]
    for table, partition, key in victims:
        client.delete_item(TableName=table, Key={"pk": {"S": partition}, "sk": {"S": key}})


def _entry(store: Store) -> Any:
    entry = STORES.for_blocking(store)
    assert entry is not None and entry.row_expiries is not None
    return entry


def rows_of(store: Store, request_id: str) -> dict[Any, float]:
    found = load(_entry(store).row_expiries)(store)
    return {
        w: at
        for w, at in found.items()
        if at is not None and (w[1] == request_id or f"|{request_id}|" in w[2])
    }


CLOCKS: dict[str, Periods] = {}


def _charged(key: str) -> str:
    return key


def _bill(tx: Tx) -> None:
    tx.increment("billed")


def _marked(request_id: str, period: int) -> Any:
    def note(key: str) -> int:
        CLOCKS[request_id].mark(period)
        return period

    return effect(note, name="mark")


@workflow("bench-subscription")
def subscription(request_id: str, period: int, last: int) -> Generator[Any, Any, int]:
    yield _marked(request_id, period)
    yield effect(_charged, name="charge")
    yield atomic("items", request_id, _bill, name="bill")
    yield set_event("period", period)
    yield sleep(DAY)
    if period < last:
        yield continue_as_new(request_id, period + 1, last)
    return period


def measure(kind: str, periods: int) -> dict[str, Any]:
    with open_backend(kind) as backend:
        counting = Counting(backend.store(backend.tag("renewal"), "items"))
        request_id = "sub-1"
        clock = CLOCKS[request_id] = Periods(counting, request_id)
        policy = RetryPolicy(retention=RETENTION)
        assert (
            run(
                subscription(request_id, 1, periods),
                request_id=request_id,
                store=counting,
                clock=clock,
                policy=policy,
            )
            == periods
        )
        clock.mark(periods + 1)
        # calls[0] is before the first period; calls[p] the period p (from its mark to the next)
        first, later = clock.calls[1], clock.calls[min(periods, 10)]
        return {
            "rows held": clock.held,
            "first period": {"reads": first[0], "commits": first[1]},
            "a later period": {"reads": later[0], "commits": later[1]},
            "rows at the end": len(rows_of(counting.inner, request_id)),
        }


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.renewal", description=__doc__)
    parser.add_argument("--stores", default=",".join(KINDS))
    parser.add_argument("--periods", type=int, default=12 if quick else 100)
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    stores = [kind for kind in args.stores.split(",") if kind in KINDS]
    report = Report(
        "renewal",
        "continue_as_new: rows a renewing request holds, and store calls per period",
        {"stores": stores, "periods": args.periods, "retention (days)": RETENTION / DAY},
        args.out,
    )
    results: dict[str, Any] = {}
    for kind in stores:
        print(f"  renewal {kind}", flush=True)
        results[kind] = found = measure(kind, args.periods)
        print(f"    {kind}: rows held {found['rows held']}; first period {found['first period']},"
              f" a later one {found['a later period']}")  # fmt: skip
    marks = sorted({mark for found in results.values() for mark in found["rows held"]})
    report.add("## Rows held by the request", "", "Bookkeeping rows of the request after each period.", "")
    report.table(
        ["store", *(f"after {m}" for m in marks)],
        [[LABELS[k], *(str(f["rows held"].get(m, "")) for m in marks)] for k, f in results.items()],
    )
    report.add(
        "## Store calls per period", "", "A period runs from its first step to the next period's first.", ""
    )
    report.table(
        ["store", "first: reads", "first: commits", "later: reads", "later: commits"],
        [
            [
                LABELS[k],
                *(str(f[p][c]) for p in ("first period", "a later period") for c in ("reads", "commits")),
            ]
            for k, f in results.items()
        ],
    )
    for kind, found in results.items():
        last = max(found["rows held"]) if found["rows held"] else 0
        report.headline(f"renewal.{kind}.rows_after_{last}", found["rows held"].get(last, 0))
    report.data["results"] = results
    report.write()
    return report
