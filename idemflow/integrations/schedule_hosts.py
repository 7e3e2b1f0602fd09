"""Scheduler passes as serverless functions: a Lambda handler for an EventBridge schedule and an
Azure Functions timer function, each running one pass of the project's schedules per invocation.

Either may run beside workers that fire the same schedules (``idemflow worker --schedules``), and
several may run at once (two regions, a retried invocation): a tick is one request however many
passes submit it. Run them every minute (``rate(1 minute)``, ``0 */1 * * * *``): a tick then
starts within about a minute, inside a schedule's default ``grace`` of five minutes. The store is
flushed before the function returns, so nothing is left to a thread when the sandbox freezes.
``idemflow.aws_lambda`` and ``idemflow.azure_functions`` export them.

>>> from idemflow import Schedule, checkpoint, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("tick-note")
... def note(tick):
...     yield checkpoint()
>>> notes = Schedule("notes", note, cron="* * * * *")
>>> handler = schedules_handler([notes], store=MemoryStore(), queue=MemoryQueue())
>>> handler({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}, None)
{'submitted': 0, 'schedules': {'notes': {'fired': [], 'skipped': 0, 'paused': False, 'error': None}}}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from idemflow.async_worklist._delivery import event
from idemflow.errors import InvalidInputError
from idemflow.integrations.lambda_queues import queue_of, store_of
from idemflow.scheduling.definition import Schedule, check_schedules
from idemflow.scheduling.firing import PassReport, fire_schedules

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.base import Queue
    from idemflow.stores.base import Store

SCHEDULED_EVENT = "Scheduled Event"


def answer(report: PassReport) -> dict[str, Any]:
    """What a function returns (and logs) of a pass: what each schedule fired, skipped or met."""
    return {
        "submitted": report.submitted,
        "schedules": {
            fired.schedule: {
                "fired": list(fired.request_ids),
                "skipped": fired.skipped,
                "paused": fired.paused,
                "error": fired.error,
            }
            for fired in report.fired
        },
    }


class Pass:
    """One scheduler pass over stores and queues given as objects or URLs (opened on first use
    and kept for the sandbox, as the other handlers keep theirs)."""

    def __init__(
        self,
        schedules: Iterable[Schedule],
        *,
        store: str | Store,
        queue: str | Queue,
        signing_key: bytes | str | None,
        clock: Callable[[], float] | None,
    ) -> None:
        self.schedules = check_schedules(schedules)
        self._store, self._queue, self._key = store, queue, signing_key
        self._clock = time.time if clock is None else clock

    def run(self) -> dict[str, Any]:
        store, queue = store_of(self._store), queue_of(self._queue)
        try:
            report = fire_schedules(
                self.schedules, store=store, queue=queue, clock=self._clock, signing_key=self._key
            )
        finally:
            store.flush()
        done = answer(report)
        event(logging.INFO, "schedules-pass", submitted=done["submitted"])
        return done


class SchedulesHandler(Pass):
    """``handler(event, context)`` for an EventBridge schedule (see :func:`schedules_handler`)."""

    def __call__(self, event: Mapping[str, Any], context: object) -> dict[str, Any]:
        if not isinstance(event, Mapping) or "Records" in event:
            raise InvalidInputError("the schedules handler takes an EventBridge scheduled event, not records")
        kind = event.get("detail-type", SCHEDULED_EVENT)
        if kind != SCHEDULED_EVENT:
            raise InvalidInputError(f"the schedules handler takes a {SCHEDULED_EVENT!r}, not {kind!r}")
        return self.run()


def schedules_handler(
    schedules: Iterable[Schedule],
    *,
    store: str | Store,
    queue: str | Queue,
    signing_key: bytes | str | None = None,
    clock: Callable[[], float] | None = None,
) -> SchedulesHandler:
    """A Lambda handler for an EventBridge schedule (``rate(1 minute)``): one pass of
    ``schedules``, returning what each fired (the module docstring's example). An event that is
    not a ``Scheduled Event`` is an :class:`~idemflow.errors.InvalidInputError`; bad schedules are
    refused here, when the handler is built."""
    return SchedulesHandler(schedules, store=store, queue=queue, signing_key=signing_key, clock=clock)


class SchedulesFunction(Pass):
    """``function(timer)`` for an Azure Functions timer trigger (see :func:`schedules_function`)."""

    def __call__(self, timer: object = None) -> dict[str, Any]:
        done = self.run()
        if getattr(timer, "past_due", False):
            event(logging.INFO, "schedules-timer-past-due", submitted=done["submitted"])
        return done


def schedules_function(
    schedules: Iterable[Schedule],
    *,
    store: str | Store,
    queue: str | Queue,
    signing_key: bytes | str | None = None,
    clock: Callable[[], float] | None = None,
) -> SchedulesFunction:
    """A function for an Azure Functions timer trigger (every minute, ``0 */1 * * * *``): one pass
    of ``schedules``, returning what each fired. A past-due timer (the host was down) is one pass
    like any other: the missed ticks are caught up as each schedule's ``catchup`` says::

        passes = schedules_function(SCHEDULES, store=os.environ["STORE_URL"], queue=os.environ["QUEUE_URL"])

        @app.timer_trigger(arg_name="timer", schedule="0 */1 * * * *")
        def idemflow_schedules(timer: func.TimerRequest) -> None:
            passes(timer)
    """
    return SchedulesFunction(schedules, store=store, queue=queue, signing_key=signing_key, clock=clock)
