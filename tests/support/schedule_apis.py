"""The schedules' functions through the ``api`` fixture: blocking, or their asyncio twins awaited on
the session's loop against the store's asynchronous twin (``tests/support/apis.py``).

Each call is counted as a call of the test's API, so a test taking ``api`` runs each function on
both APIs, as the rest of the conformance suite does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from idemflow import Schedule
from idemflow.admin import (
    ScheduleView,
    apause_schedule,
    aresume_schedule,
    aschedules,
    atrigger_schedule,
    pause_schedule,
    resume_schedule,
    schedules,
    trigger_schedule,
)
from idemflow.core.schedule_state import ScheduleState
from idemflow.stores import Store
from idemflow.worker import PassReport, afire_schedules, fire_schedules
from tests.support.apis import LOOP, Api, _flushed, async_queue_twin, async_twin


def fire(
    api: Api, defined: Iterable[Schedule], store: Store, queue: Any, clock: Callable[[], float]
) -> PassReport:
    """One scheduler pass (:func:`~idemflow.worker.fire_schedules` or its twin)."""
    api.calls.note()
    if api.name == "blocking":
        return fire_schedules(defined, store=store, queue=queue, clock=clock)
    twin, sink = async_twin(store), async_queue_twin(queue)
    return LOOP.run(_flushed(twin, afire_schedules(defined, store=twin, queue=sink, clock=clock)))


def listed(
    api: Api, store: Store, defined: Iterable[Schedule], clock: Callable[[], float]
) -> list[ScheduleView]:
    """``admin.schedules`` (or ``aschedules``)."""
    api.calls.note()
    if api.name == "blocking":
        return schedules(store, defined, clock=clock)
    return LOOP.run(aschedules(async_twin(store), defined, clock=clock))


def pause(api: Api, store: Store, name: str, clock: Callable[[], float]) -> ScheduleState:
    """``admin.pause_schedule`` (or ``apause_schedule``)."""
    api.calls.note()
    if api.name == "blocking":
        return pause_schedule(store, name, clock=clock)
    twin = async_twin(store)
    return LOOP.run(_flushed(twin, apause_schedule(twin, name, clock=clock)))


def resume(api: Api, store: Store, name: str, clock: Callable[[], float]) -> ScheduleState:
    """``admin.resume_schedule`` (or ``aresume_schedule``)."""
    api.calls.note()
    if api.name == "blocking":
        return resume_schedule(store, name, clock=clock)
    twin = async_twin(store)
    return LOOP.run(_flushed(twin, aresume_schedule(twin, name, clock=clock)))


def trigger(api: Api, store: Store, queue: Any, schedule: Schedule, **options: Any) -> str:
    """``admin.trigger_schedule`` (or ``atrigger_schedule``): the request id it submitted."""
    api.calls.note()
    if api.name == "blocking":
        return trigger_schedule(store, queue, schedule, **options).request_id
    twin, sink = async_twin(store), async_queue_twin(queue)
    pending = LOOP.run(_flushed(twin, atrigger_schedule(twin, sink, schedule, **options)))
    return pending.request_id
