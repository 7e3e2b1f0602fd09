"""What an operator does with schedules: list them, pause, resume, trigger one tick now.

Pause and resume write the schedule's state row over the version they read (retrying while a
scheduler's pass moves it under them), so a pass racing them neither undoes a pause nor fires a
tick of the pause: a paused schedule's ticks are skipped, and resuming starts its ticks after
the moment it resumed (none of the pause is caught up; ``trigger_schedule`` fires one on purpose).
A trigger submits the tick of the instant it is given (now by default, to the second) under the
same request id a scheduler would give a tick of that instant, so triggering one instant twice,
or triggering a tick a scheduler fires too, starts one request.

Each blocking function has its asyncio twin (``a`` + its name); both are one computation.

>>> from idemflow import Schedule, checkpoint, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("tick-note")
... def note(tick):
...     yield checkpoint()
>>> hourly = Schedule("hourly", note, cron="0 * * * *")
>>> store = MemoryStore()
>>> pause_schedule(store, "hourly", clock=lambda: 1_800_000_000.0).paused
True
>>> [(view.name, view.paused, view.next_tick) for view in schedules(store, [hourly])]
[('hourly', True, None)]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from idemflow.async_worklist._handles import AsyncPending, Pending
from idemflow.async_worklist._submission import asubmit, submit
from idemflow.async_worklist.queues.async_adapters import AsyncQueue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import RetryPolicy, resent_until_deadline
from idemflow.core.requests import Commit, Read, ReadMany, Steps
from idemflow.core.schedule_state import ScheduleState, schedule_ref
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import ConflictError, InvalidScheduleError
from idemflow.keys import RUNS_TABLE, SCHEDULES_PARTITION
from idemflow.scheduling.definition import Schedule, check_schedule_name, check_schedules
from idemflow.serialization import encode
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Committed, Insert, Op, Put, Row, Store

ROUNDS = 20
"""Most tries of a pause or resume whose write keeps meeting a pass's (each pass moves the row
once): past them :class:`~idemflow.errors.ConflictError`."""


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """One schedule as ``schedules list`` shows it: its definition beside its stored state."""

    name: str
    workflow: str
    cron: str
    timezone: str
    catchup: str
    paused: bool
    last_tick: float | None
    """The last tick a scheduler fired (epoch seconds; None: none yet)."""
    next_tick: float | None
    """The tick the next pass fires (in the past: due now); None while paused."""
    seen: bool
    """Whether a scheduler (or an operator) has written its state row yet."""


def _view(schedule: Schedule, row: Row | None, now: float) -> ScheduleView:
    state = None if row is None else ScheduleState.from_json(row.value)
    after = now if state is None else state.after
    paused = state is not None and state.paused
    return ScheduleView(
        schedule.name,
        schedule.workflow.name,
        schedule.cron,
        schedule.timezone,
        schedule.catchup,
        paused,
        None if state is None else state.last,
        None if paused else schedule.next_tick(after),
        state is not None,
    )


def views_steps(checked: tuple[Schedule, ...], now: float) -> Steps[list[ScheduleView]]:
    """Every schedule's state in one batched read."""
    rows: list[Row | None] = yield from resent_until_deadline(
        ReadMany([schedule_ref(s.name) for s in checked])
    )
    return [_view(schedule, row, now) for schedule, row in zip(checked, rows, strict=True)]


def schedules(
    store: Store, defined: Iterable[Schedule], *, clock: Callable[[], float] | None = None
) -> list[ScheduleView]:
    """The schedules ``defined`` (the code's) with what the store says of each: paused, last tick
    fired, next tick (see the module docstring's example). One batched read."""
    checked = check_schedules(defined)
    return drive(views_steps(checked, (clock or time.time)()), store)


async def aschedules(
    store: Store | AsyncStore, defined: Iterable[Schedule], *, clock: Callable[[], float] | None = None
) -> list[ScheduleView]:
    """:func:`schedules`, awaitable."""
    checked = check_schedules(defined)
    return await adrive(views_steps(checked, (clock or time.time)()), to_async(store))


def switch_steps(name: str, paused: bool, now: float) -> Steps[ScheduleState]:
    """Pause (or resume) the schedule ``name``: its row rewritten over the version read."""
    ref = schedule_ref(name)
    second = float(math.floor(now))
    for _ in range(ROUNDS):
        row: Row | None = yield from resent_until_deadline(Read(ref))
        state = None if row is None else ScheduleState.from_json(row.value)
        if paused:
            after = second if state is None else state.after
            last = None if state is None else state.last
            wanted = ScheduleState(
                after, last, True, now if state is None or not state.paused else state.paused_at
            )
        else:  # the ticks of the pause are skipped: they start after now
            after = second if state is None else max(state.after, second)
            wanted = ScheduleState(after, None if state is None else state.last)
        value = wanted.to_json()
        write: Op = (
            Insert(ref, value, encode(value))
            if row is None
            else Put(ref, value, encode(value), expect=row.version)
        )
        if isinstance((yield from resent_until_deadline(Commit([write]))), Committed):
            return wanted
    raise ConflictError("(schedule)", name, 0, RUNS_TABLE, SCHEDULES_PARTITION, ROUNDS)


def pause_schedule(store: Store, name: str, *, clock: Callable[[], float] | None = None) -> ScheduleState:
    """Pause the schedule ``name``: no scheduler fires its ticks until it is resumed (a name the
    code does not define yet may be paused ahead of its deploy). Returns the state written.

    >>> from idemflow.stores import MemoryStore
    >>> store = MemoryStore()
    >>> pause_schedule(store, "nightly", clock=lambda: 10.5)
    ScheduleState(after=10.0, last=None, paused=True, paused_at=10.5)
    """
    check_schedule_name(name)
    return drive(switch_steps(name, True, (clock or time.time)()), store)


async def apause_schedule(
    store: Store | AsyncStore, name: str, *, clock: Callable[[], float] | None = None
) -> ScheduleState:
    """:func:`pause_schedule`, awaitable."""
    check_schedule_name(name)
    return await adrive(switch_steps(name, True, (clock or time.time)()), to_async(store))


def resume_schedule(store: Store, name: str, *, clock: Callable[[], float] | None = None) -> ScheduleState:
    """Resume the schedule ``name``: its ticks after now fire again; those of the pause do not.

    >>> from idemflow.stores import MemoryStore
    >>> store = MemoryStore()
    >>> _ = pause_schedule(store, "nightly", clock=lambda: 10.0)
    >>> resume_schedule(store, "nightly", clock=lambda: 99.0)
    ScheduleState(after=99.0, last=None, paused=False, paused_at=None)
    """
    check_schedule_name(name)
    return drive(switch_steps(name, False, (clock or time.time)()), store)


async def aresume_schedule(
    store: Store | AsyncStore, name: str, *, clock: Callable[[], float] | None = None
) -> ScheduleState:
    """:func:`resume_schedule`, awaitable."""
    check_schedule_name(name)
    return await adrive(switch_steps(name, False, (clock or time.time)()), to_async(store))


def _instant(at: float | datetime | None, clock: Callable[[], float] | None, name: str) -> float:
    """The whole second a trigger fires: ``at`` (epoch seconds or an aware datetime) or now."""
    if at is None:
        return float(math.floor((clock or time.time)()))
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise InvalidScheduleError(name, "a trigger's at= datetime needs a timezone (an aware datetime)")
        return float(math.floor(at.timestamp()))
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0:
        raise InvalidScheduleError(name, f"a trigger's at= is epoch seconds or an aware datetime, not {at!r}")
    return float(math.floor(at))


def trigger_schedule(
    store: Store,
    queue: Queue,
    schedule: Schedule,
    *,
    at: float | datetime | None = None,
    clock: Callable[[], float] | None = None,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
) -> Pending:
    """Fire one tick of ``schedule`` now (or at the instant ``at``), paused or not, and return its
    handle: its request id is the one a scheduler gives a tick of that instant, so a repeated
    trigger of one instant is a duplicate. The schedule's state row is not changed."""
    if not isinstance(schedule, Schedule):
        raise InvalidScheduleError(schedule, f"is a {type(schedule).__name__}, not a Schedule")
    tick = _instant(at, clock, schedule.name)
    return submit(
        schedule.call(tick),
        request_id=schedule.request_id(tick),
        store=store,
        queue=queue,
        clock=clock,
        signing_key=signing_key,
        policy=policy,
    )


async def atrigger_schedule(
    store: Store | AsyncStore,
    queue: Queue | AsyncQueue,
    schedule: Schedule,
    *,
    at: float | datetime | None = None,
    clock: Callable[[], float] | None = None,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
) -> AsyncPending:
    """:func:`trigger_schedule`, awaitable."""
    if not isinstance(schedule, Schedule):
        raise InvalidScheduleError(schedule, f"is a {type(schedule).__name__}, not a Schedule")
    tick = _instant(at, clock, schedule.name)
    return await asubmit(
        schedule.call(tick),
        request_id=schedule.request_id(tick),
        store=store,
        queue=queue,
        clock=clock,
        signing_key=signing_key,
        policy=policy,
    )
