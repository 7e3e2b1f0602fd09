"""What a schedule costs and how it behaves under racing schedulers.

1. **Requests per tick** — ``1``, ``3`` and ``10`` schedulers on threads walk the same simulated
   hour of a minutely schedule (``catchup="all"``), each pass given the instant it runs at (every
   tick plus 5 s): the distinct requests each tick became (the goal is exactly 1) and how many
   submits each tick got (the duplicates the racing costs).
2. **Lateness** — a real :class:`~idemflow.worker.Scheduler` thread passing every ``--every``
   seconds over a schedule ticking every second (``* * * * * *``) for ``--seconds`` seconds of
   wall time: each tick's claim time (its run record's ``st``) minus the tick, p50 and p99.
3. **Cost per tick** — store calls (the store's own count of its backend calls) of a pass with
   nothing due, and of a pass firing one tick of a workflow that stops at its first checkpoint
   (the claim and the queued continuation: what a worker then finishes is the workflow's own
   cost).

On SQLite (WAL, synchronous=FULL), DynamoDB Local and Azurite. Numbers are printed and written to
``schedules.md`` / ``schedules.json``; none is asserted.

Run: ``python -m benchmarks schedules [--stores sqlite,dynamodb-local,azurite] [--quick]``.
"""

from __future__ import annotations

import argparse
import calendar
import statistics
import threading
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.backends import LABELS, Backend, open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from idemflow import Idem, Schedule, atomic, checkpoint, workflow
from idemflow.admin import RunRecord
from idemflow.keys import RUNS_TABLE
from idemflow.records import run_ref
from idemflow.stores import Store
from idemflow.worker import MemoryQueue, Scheduler, fire_schedules

KINDS = ("sqlite", "dynamodb-local", "azurite")
T0 = 1_800_000_000.0
RACERS = (1, 3, 10)


@workflow("bench-tick")
def ticked(kind: str, tick: str) -> Generator[Idem[Any], Any, str]:
    yield checkpoint()
    yield atomic("items", kind, lambda tx: tx.increment(tick))
    return tick


def _at(instant: float) -> Callable[[], float]:
    """A clock stopped at ``instant`` (each pass is given the instant it runs at)."""
    return lambda: instant


def _requests(store: Store, name: str) -> list[str]:
    return [p for p, k, _ in store.scan(RUNS_TABLE) if k == "rbench-tick" and p.startswith(name + "@")]


def racing(store: Store, racers: int, ticks: int) -> dict[str, float]:
    """Requests and submits per tick with ``racers`` schedulers walking the same ticks."""
    name = f"race{racers}"
    minutely = Schedule(name, ticked, cron="* * * * *", input=name, catchup="all")
    queue = MemoryQueue()
    fire_schedules([minutely], store=store, queue=queue, clock=lambda: T0 - 1)
    submits = [0] * racers

    def scheduler(n: int) -> None:
        for k in range(ticks):
            at = T0 + 60 * k + 5
            passed = fire_schedules([minutely], store=store, queue=queue, clock=_at(at))
            submits[n] += passed.submitted

    threads = [threading.Thread(target=scheduler, args=(n,)) for n in range(racers)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    found = _requests(store, name)
    return {
        "requests per tick": len(found) / ticks,
        "distinct ids": float(len(set(found)) == len(found)),
        "submits per tick": sum(submits) / ticks,
        "wall ms per tick": seconds / ticks * 1e3,
    }


def lateness(store: Store, every: float, seconds: float) -> dict[str, float]:
    """p50 / p99 of claim time minus tick, a real scheduler thread passing every ``every`` s."""
    name = "late"
    each = Schedule(name, ticked, cron="* * * * * *", input=name, catchup="all")
    scheduler = Scheduler([each], store=store, queue=MemoryQueue(), every=every)
    scheduler.start()
    time.sleep(seconds)
    scheduler.stop()
    late = []
    for partition in _requests(store, name):
        row = store.read(run_ref("bench-tick", partition))
        assert row is not None
        record = RunRecord.from_json(row.value)
        tick = calendar.timegm(time.strptime(partition.split("@")[1], "%Y-%m-%dT%H:%M:%SZ"))
        if record.started_at is not None:
            late.append(record.started_at - tick)
    late.sort()
    return {
        "ticks": float(len(late)),
        "p50 s": statistics.median(late),
        "p99 s": late[min(len(late) - 1, int(len(late) * 0.99))],
        "max s": late[-1],
    }


def cost(store: Store) -> dict[str, float]:
    """Backend calls of an idle pass and of a pass firing one tick (median of 5 each)."""
    hourly = Schedule("cost", ticked, cron="0 * * * *", input="cost")
    queue = MemoryQueue()
    fire_schedules([hourly], store=store, queue=queue, clock=lambda: T0 + 1)  # first seen
    idle, firing = [], []
    for hour in range(5):
        before = store.round_trips
        fire_schedules([hourly], store=store, queue=queue, clock=_at(T0 + 3600 * hour + 1800))
        store.flush()
        idle.append(store.round_trips - before)
        before = store.round_trips
        due = T0 + 3600 * (hour + 1) + 5
        report = fire_schedules([hourly], store=store, queue=queue, clock=_at(due))
        store.flush()
        assert report.submitted == 1
        firing.append(store.round_trips - before)
    return {"idle pass": statistics.median(idle), "pass firing one tick": statistics.median(firing)}


def measure(backend: Backend, args: argparse.Namespace) -> dict[str, Any]:
    found: dict[str, Any] = {"racing": {}}
    for racers in RACERS:
        store = backend.make_store(f"race{racers}", ("items",))
        found["racing"][str(racers)] = racing(store, racers, args.ticks)
    found["lateness"] = lateness(backend.make_store("late", ("items",)), args.every, args.seconds)
    found["cost"] = cost(backend.make_store("cost", ("items",)))
    return found


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks schedules", description=__doc__)
    parser.add_argument("--stores", default=",".join(KINDS))
    parser.add_argument("--ticks", type=int, default=5 if quick else 30, help="ticks each racing run walks")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between a scheduler's passes")
    parser.add_argument("--seconds", type=float, default=4.0 if quick else 30.0, help="lateness run length")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    stores = [kind for kind in args.stores.split(",") if kind in KINDS]
    params = {k: getattr(args, k) for k in ("ticks", "every", "seconds")}
    report = Report(
        "schedules", "Schedules: requests per tick, lateness, cost", {"stores": stores, **params}, args.out
    )
    results: dict[str, Any] = {}
    for kind in stores:
        print(f"  schedules {kind}", flush=True)
        with open_backend(kind) as backend:
            results[kind] = measure(backend, args)
        print(f"    {kind}: {results[kind]}", flush=True)
    _write(report, results)
    return report


def _write(report: Report, results: dict[str, Any]) -> None:
    report.add("## Requests per tick, schedulers racing", "")
    report.add("Distinct requests per tick (the goal: 1) and submits per tick (the duplicates).", "")
    rows = []
    for kind, found in results.items():
        for racers, got in found["racing"].items():
            rows.append(
                [LABELS[kind], racers, f"{got['requests per tick']:.2f}", f"{got['submits per tick']:.2f}"]
            )
            report.headline(f"schedules.{kind}.requests_per_tick_{racers}", got["requests per tick"])
    report.table(["store", "schedulers", "requests per tick", "submits per tick"], rows)
    report.add("## Lateness", "", "A scheduler thread passing every `--every` s; claim time minus tick.", "")
    report.table(
        ["store", "ticks", "p50 s", "p99 s", "max s"],
        [
            [LABELS[k], f"{f['lateness']['ticks']:.0f}", f"{f['lateness']['p50 s']:.3f}",
             f"{f['lateness']['p99 s']:.3f}", f"{f['lateness']['max s']:.3f}"]
            for k, f in results.items()
        ],
    )  # fmt: skip
    report.add("## Cost per tick", "", "Backend calls, median of 5 passes each.", "")
    report.table(
        ["store", "idle pass", "pass firing one tick"],
        [
            [LABELS[k], f"{f['cost']['idle pass']:.0f}", f"{f['cost']['pass firing one tick']:.0f}"]
            for k, f in results.items()
        ],
    )
    for kind, found in results.items():
        report.headline(f"schedules.{kind}.lateness_p99_s", found["lateness"]["p99 s"])
        report.headline(f"schedules.{kind}.calls_per_tick", found["cost"]["pass firing one tick"])
    report.data["results"] = results
    report.write()
