"""A scheduler's pass: every due tick of every schedule submitted, once per tick however many race.

One pass reads every schedule's state row (one batched read), submits the ticks that are due through
the ordinary idempotent ``submit`` (the request id derived from the tick: a second scheduler's
submit of the same tick is a duplicate and starts nothing), and then moves the row past them with
a write conditional on the version it read. Racing schedulers are harmless: a write that loses
the race changes nothing, and a tick submitted twice is one request. The order (submit, then
move the row) makes a scheduler killed between the two cost a duplicate submit on the next pass,
never a lost tick. A pass with nothing due costs that one read.

The pass is one computation (:func:`pass_steps`) that :func:`fire_schedules` drives on a blocking
store and queue and :func:`afire_schedules` on the event loop.

>>> from idemflow import Schedule, checkpoint, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("tick-note")
... def note(tick):
...     yield checkpoint()
>>> every_minute = Schedule("notes", note, cron="* * * * *")
>>> store, queue, now = MemoryStore(), MemoryQueue(), [1_800_000_000.0]
>>> fire_schedules([every_minute], store=store, queue=queue, clock=lambda: now[0]).submitted
0
>>> now[0] += 120
>>> report = fire_schedules([every_minute], store=store, queue=queue, clock=lambda: now[0])
>>> [fired.request_ids for fired in report.fired]
[('notes@2027-01-15T08:01:00Z', 'notes@2027-01-15T08:02:00Z')]
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist._queue_answers import on_async_queue, on_queue
from idemflow.async_worklist._submission import submission_steps
from idemflow.async_worklist.outbox import DEFAULT_GRACE
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import RetryPolicy, resent_until_deadline
from idemflow.core.requests import Commit, ReadMany, Steps
from idemflow.core.schedule_state import ScheduleState, schedule_ref
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.engine.tx import Reader
from idemflow.errors import IdemflowError
from idemflow.running.request_spec import describe_request
from idemflow.scheduling.definition import MAX_CATCHUP, Schedule, check_schedules
from idemflow.serialization import encode
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Committed, Insert, Put, Row, Store

log = logging.getLogger("idemflow.scheduling")


@dataclass(frozen=True, slots=True)
class Fired:
    """What one pass did for one schedule."""

    schedule: str
    ticks: tuple[float, ...] = ()
    """The ticks it submitted (epoch seconds), oldest first."""
    request_ids: tuple[str, ...] = ()
    """Their request ids, in the same order."""
    skipped: int = 0
    """Missed ticks it did not fire, as the schedule's ``catchup`` says (past the catch-up cap,
    one more stands for all the older ones, which are not counted)."""
    paused: bool = False
    error: str | None = None
    """Why the pass gave up on this schedule (a store or queue error): the next pass tries again."""


@dataclass(frozen=True, slots=True)
class PassReport:
    """What one pass did, schedule by schedule."""

    at: float
    """The pass's clock when it began (epoch seconds)."""
    fired: tuple[Fired, ...]

    @property
    def submitted(self) -> int:
        """Ticks submitted by this pass (a tick another scheduler started counts here too: its
        submit was a duplicate)."""
        return sum(len(fired.ticks) for fired in self.fired)


@dataclass(frozen=True, slots=True)
class Submitting:
    """How the pass submits: what ``submit`` is given besides the workflow call and its id."""

    store: Store | AsyncStore
    max_body_bytes: int
    reader: Reader | None
    signing_key: bytes | str | None
    policy: RetryPolicy | None
    clock: Callable[[], float]

    def steps(self, schedule: Schedule, tick: float) -> Steps[Any]:
        """``submit`` of the tick's request, as steps."""
        call = schedule.call(tick)
        request = describe_request(call)
        return submission_steps(
            call,
            request,
            schedule.request_id(tick),
            self.store,
            self.max_body_bytes,
            self.signing_key,
            self.policy,
            self.clock,
            DEFAULT_GRACE,
            reader=self.reader,
        )


def chosen_ticks(schedule: Schedule, due: tuple[float, ...], now: float) -> tuple[float, ...]:
    """Which of the ``due`` ticks (oldest first) a pass at ``now`` fires: those within the
    schedule's ``grace`` always; of the missed ones, all, the most recent, or none.

    >>> from idemflow import workflow
    >>> @workflow("w")
    ... def w(tick):
    ...     yield
    >>> [chosen_ticks(Schedule("s", w, cron="* * * * *", catchup=mode), (0.0, 60.0, 600.0), 610.0)
    ...  for mode in ("all", "latest", "none")]
    [(0.0, 60.0, 600.0), (600.0,), (600.0,)]
    """
    if schedule.catchup == "all" or not due:
        return due
    on_time = tuple(tick for tick in due if now - tick <= schedule.grace)
    if schedule.catchup == "latest" and not on_time:
        return due[-1:]
    return on_time


def schedule_steps(schedule: Schedule, row: Row | None, submitting: Submitting, now: float) -> Steps[Fired]:
    """One pass of one schedule whose state row was read as ``row`` (see the module docstring)."""
    ref = schedule_ref(schedule.name)
    if row is None:  # first seen: its ticks start after now (a trigger fires earlier ones)
        state = ScheduleState(after=float(math.floor(now)))
        value = state.to_json()
        yield from resent_until_deadline(Commit([Insert(ref, value, encode(value))]))
        return Fired(schedule.name)
    try:
        state = ScheduleState.from_json(row.value)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return Fired(schedule.name, error=f"its state row cannot be read: {exc}")
    if state.paused:
        return Fired(schedule.name, paused=True)
    due, older = schedule.ticking.ticks(state.after, now, limit=MAX_CATCHUP)
    if not due:
        return Fired(schedule.name)
    ticks = chosen_ticks(schedule, due, now)
    if older:
        telemetry.log_event(
            log, logging.WARNING, "schedule-catchup-capped", schedule=schedule.name, fired=len(ticks)
        )
    for tick in ticks:
        yield from submitting.steps(schedule, tick)
    moved = ScheduleState(after=due[-1], last=ticks[-1] if ticks else state.last)
    value = moved.to_json()
    # Over the version read: a pause, a resume or a faster scheduler's move since then wins.
    outcome = yield from resent_until_deadline(Commit([Put(ref, value, encode(value), expect=row.version)]))
    if not isinstance(outcome, Committed):
        telemetry.log_event(log, logging.DEBUG, "schedule-moved-by-another", schedule=schedule.name)
    return Fired(
        schedule.name,
        ticks,
        tuple(schedule.request_id(tick) for tick in ticks),
        skipped=len(due) - len(ticks) + (1 if older else 0),
    )


def pass_steps(schedules: tuple[Schedule, ...], submitting: Submitting) -> Steps[PassReport]:
    """One pass over every schedule; a schedule whose store or queue fails is reported, and the
    others still fire."""
    now = submitting.clock()
    fired: list[Fired] = []
    try:  # every schedule's row in one batched read: an idle pass costs one call
        rows: list[Row | None] = yield from resent_until_deadline(
            ReadMany([schedule_ref(s.name) for s in schedules])
        )
    except IdemflowError as exc:
        telemetry.log_event(log, logging.WARNING, "schedule-pass-failed", error=str(exc))
        return PassReport(now, tuple(Fired(s.name, error=f"{type(exc).__name__}: {exc}") for s in schedules))
    for schedule, row in zip(schedules, rows, strict=True):
        try:
            fired.append((yield from schedule_steps(schedule, row, submitting, now)))
        except IdemflowError as exc:
            telemetry.log_event(
                log, logging.WARNING, "schedule-pass-failed", schedule=schedule.name, error=str(exc)
            )
            fired.append(Fired(schedule.name, error=f"{type(exc).__name__}: {exc}"))
    return PassReport(now, tuple(fired))


def fire_schedules(
    schedules: Iterable[Schedule],
    *,
    store: Store,
    queue: Queue,
    clock: Callable[[], float] | None = None,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
) -> PassReport:
    """Submit every due tick of ``schedules`` (one scheduler pass): run it every few seconds, from
    as many processes as you like (``idemflow worker --schedules``, a Lambda, an Azure timer).

    ``clock`` (epoch seconds, ``time.time`` by default) says what is due, and is the submitted
    requests' clock, as ``submit``'s; ``signing_key`` and ``policy`` are ``submit``'s. Returns what
    each schedule fired (see the module docstring's example).
    """
    checked = check_schedules(schedules)
    wall = time.time if clock is None else clock
    submitting = Submitting(store, queue.max_body_bytes, store, signing_key, policy, wall)
    return drive(pass_steps(checked, submitting), store, on_queue(queue))


async def afire_schedules(
    schedules: Iterable[Schedule],
    *,
    store: Store | AsyncStore,
    queue: Queue | AsyncQueue,
    clock: Callable[[], float] | None = None,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
) -> PassReport:
    """:func:`fire_schedules` on the event loop (asynchronous stores and queues, or blocking ones
    on threads of their own): the same pass, the same request per tick."""
    checked = check_schedules(schedules)
    wall = time.time if clock is None else clock
    target, sink = to_async(store), to_async_queue(queue)
    submitting = Submitting(target, sink.max_body_bytes, sync_reader(target), signing_key, policy, wall)
    return await adrive(pass_steps(checked, submitting), target, on_async_queue(sink))
