"""Passes every few seconds beside a worker: what ``idemflow worker --schedules MOD:ATTR`` runs.

A :class:`Scheduler` runs :func:`~idemflow.scheduling.firing.fire_schedules` on a thread of its
own every ``every`` seconds until stopped; an :class:`AsyncScheduler` runs the asyncio pass as a
task. Every worker may run one: there is no leader to elect, because a tick is one request
whatever number of schedulers submit it. A pass that fails (the store unreachable) is logged and
the next one tries again; a tick is never lost by it, only late.

>>> from idemflow import Schedule, checkpoint, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("tick-note")
... def note(tick):
...     yield checkpoint()
>>> notes = Schedule("notes", note, cron="* * * * *")
>>> scheduler = Scheduler([notes], store=MemoryStore(), queue=MemoryQueue())
>>> scheduler.start()
>>> scheduler.stop()
>>> scheduler.passes >= 1
True
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable

from idemflow import telemetry
from idemflow.async_worklist.queues.async_adapters import AsyncQueue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import RetryPolicy
from idemflow.errors import IdemflowError
from idemflow.keys import check_duration
from idemflow.scheduling.definition import Schedule, check_schedules
from idemflow.scheduling.firing import PassReport, afire_schedules, fire_schedules
from idemflow.stores.base import AsyncStore, Store

log = logging.getLogger("idemflow.scheduling")

DEFAULT_EVERY = 10.0
"""Seconds between a scheduler's passes: a tick starts at most this late (plus the pass)."""


class Scheduler:
    """Scheduler passes on a thread, every ``every`` seconds, until :meth:`stop`."""

    def __init__(
        self,
        schedules: Iterable[Schedule],
        *,
        store: Store,
        queue: Queue,
        every: float = DEFAULT_EVERY,
        clock: Callable[[], float] | None = None,
        signing_key: bytes | str | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.schedules = check_schedules(schedules)
        self.every = check_duration(every, "scheduler pass interval")
        self._store, self._queue, self._clock = store, queue, clock
        self._key, self._policy = signing_key, policy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last: PassReport | None = None

    def run_once(self) -> PassReport | None:
        """One pass now; None if it failed (logged)."""
        try:
            report = fire_schedules(
                self.schedules,
                store=self._store,
                queue=self._queue,
                clock=self._clock,
                signing_key=self._key,
                policy=self._policy,
            )
        except IdemflowError as exc:
            telemetry.log_event(log, logging.WARNING, "scheduler-pass-failed", error=str(exc))
            return None
        finally:
            self.passes += 1
        self.last = report
        return report

    def _loop(self) -> None:
        while True:
            self.run_once()
            if self._stop.wait(self.every):
                return

    def start(self) -> None:
        """Start the passes on a daemon thread (the first pass at once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="idemflow-scheduler", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop after the pass under way, waiting at most ``timeout`` seconds for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


class AsyncScheduler:
    """:class:`Scheduler` on the event loop: ``await scheduler.run()`` until :meth:`stop`."""

    def __init__(
        self,
        schedules: Iterable[Schedule],
        *,
        store: Store | AsyncStore,
        queue: Queue | AsyncQueue,
        every: float = DEFAULT_EVERY,
        clock: Callable[[], float] | None = None,
        signing_key: bytes | str | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.schedules = check_schedules(schedules)
        self.every = check_duration(every, "scheduler pass interval")
        self._store, self._queue, self._clock = store, queue, clock
        self._key, self._policy = signing_key, policy
        self._stop = asyncio.Event()
        self.passes = 0
        self.last: PassReport | None = None

    async def run_once(self) -> PassReport | None:
        """One pass now; None if it failed (logged)."""
        try:
            report = await afire_schedules(
                self.schedules,
                store=self._store,
                queue=self._queue,
                clock=self._clock,
                signing_key=self._key,
                policy=self._policy,
            )
        except IdemflowError as exc:
            telemetry.log_event(log, logging.WARNING, "scheduler-pass-failed", error=str(exc))
            return None
        finally:
            self.passes += 1
        self.last = report
        return report

    async def run(self) -> None:
        """Passes every ``every`` seconds (the first at once) until :meth:`stop`."""
        while not self._stop.is_set():
            await self.run_once()
            try:
                await asyncio.wait_for(self._stop.wait(), self.every)
            except TimeoutError:
                continue

    def stop(self) -> None:
        """Stop after the pass under way (call it on the scheduler's loop)."""
        self._stop.set()
