"""The scheduler loops beside a worker: passes on a thread (or a task) until stopped, each pass's
ticks submitted once, a failing pass logged and the next one tried. Time is a clock that moves a
minute at each reading; the loops' waits are their ``every``, and the tests wait on what the
passes did, never on a duration."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from idemflow import Schedule, atomic, workflow
from idemflow.client import rows
from idemflow.errors import BackendError
from idemflow.stores import MemoryStore
from idemflow.testing import StoreWrapper
from idemflow.worker import AsyncScheduler, MemoryQueue, Scheduler

T0 = 1_800_000_000.0
T = TypeVar("T")


@workflow("sched-loop")
def counted(tick: str) -> Any:
    yield atomic("tablea", "loop", lambda tx: tx.increment(tick))


class Minutes:
    """A clock that a pass moves on by a minute before it runs (:meth:`passing`)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def passing(self, run_once: Callable[[], T]) -> Callable[[], T]:
        def moved() -> T:
            self.now += 60.0
            return run_once()

        return moved


class Down(StoreWrapper):
    """A store whose reads are refused (not retried) while ``down`` is set."""

    down = True

    def read_many(self, refs: Any) -> Any:
        if self.down:
            raise BackendError("the store refused", backend="memory", operation="read_many")
        return self.inner.read_many(refs)


def test_a_scheduler_thread_fires_each_tick_once_until_stopped() -> None:
    store, fired, clock = MemoryStore(), threading.Event(), Minutes()
    minutely = Schedule("loop", counted, cron="* * * * *", catchup="all")
    scheduler = Scheduler([minutely], store=store, queue=MemoryQueue(), every=0.001, clock=clock)
    original = clock.passing(scheduler.run_once)

    def watched() -> Any:
        report = original()
        if scheduler.passes >= 5:
            fired.set()
        return report

    scheduler.run_once = watched  # type: ignore[method-assign]
    scheduler.start()
    assert fired.wait(30)
    scheduler.stop()
    passes = scheduler.passes
    counts = rows(store, "tablea")
    assert passes >= 5 and len(counts) == passes - 1  # the first pass only saw the schedule
    assert set(counts.values()) == {1}


def test_a_failing_pass_is_logged_and_the_next_one_fires() -> None:
    store = Down(MemoryStore())
    minutely = Schedule("down", counted, cron="* * * * *", catchup="all")
    clock = Minutes()
    scheduler = Scheduler([minutely], store=store, queue=MemoryQueue(), clock=clock)
    scheduler.run_once = clock.passing(scheduler.run_once)  # type: ignore[method-assign]
    report = scheduler.run_once()
    assert report is not None and report.fired[0].error is not None and "refused" in report.fired[0].error
    store.down = False
    assert scheduler.run_once() is not None and scheduler.run_once() is not None
    assert list(rows(store.inner, "tablea").values()) == [1]


def test_an_asyncio_scheduler_runs_passes_until_stopped() -> None:
    store = MemoryStore()
    minutely = Schedule("aloop", counted, cron="* * * * *", catchup="all")

    async def main() -> int:
        clock = Minutes()
        scheduler = AsyncScheduler([minutely], store=store, queue=MemoryQueue(), every=0.001, clock=clock)
        original = scheduler.run_once

        async def moved() -> Any:
            clock.now += 60.0
            return await original()

        scheduler.run_once = moved  # type: ignore[method-assign]
        task = asyncio.create_task(scheduler.run())
        while scheduler.passes < 4:
            await asyncio.sleep(0)
        scheduler.stop()
        await asyncio.wait_for(task, 30)
        return scheduler.passes

    passes = asyncio.run(main())
    assert passes >= 4 and len(rows(store, "tablea")) == passes - 1
