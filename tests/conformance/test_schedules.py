"""Schedules on every store and both APIs: one request per tick however many schedulers race, weeks
of ticks in simulated time, ticks missed while every scheduler was down (each ``catchup``), a
daylight-saving change in Europe/Berlin, pause, resume and trigger, and a scheduler dying at any
store call of its pass.

Time is a clock the test moves (no sleeping): each pass is given the instant it runs at. Each
tick's workflow increments a counter named for its tick in one atomic step, so a tick started
twice (or lost) shows as a count of 2 (or a missing key), and its run records are listed by id.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from idemflow import Schedule, atomic, workflow
from idemflow.client import rows
from idemflow.keys import RUNS_TABLE
from idemflow.stores import Store
from idemflow.testing import Fault, FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue, fire_schedules
from tests.support.apis import Api
from tests.support.schedule_apis import fire, listed, pause, resume, trigger

T0 = 1_800_000_000.0
"""2027-01-15T08:00:00Z, a Friday."""
HOUR = 3600.0


@workflow("sched-tick")
def ticked(tag: str, tick: str) -> Any:
    """Counts its tick once under ``tag`` (the tick's epoch seconds name the counter)."""
    at = int(datetime.fromisoformat(tick).timestamp())
    yield atomic("tablea", tag, lambda tx: tx.increment(f"t{at}"))
    return tick


class Clock:
    """The instant passes run at, moved by the test."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counts(store: Store, tag: str) -> dict[float, int]:
    """How often each tick of ``tag`` ran its step: ``{tick: count}``."""
    return {
        float(key[1:]): value for (partition, key), value in rows(store, "tablea").items() if partition == tag
    }


def request_ids(store: Store, name: str) -> list[str]:
    """The ids of the schedule ``name``'s requests that have a run record, sorted."""
    return sorted(
        partition
        for partition, key, _ in store.scan(RUNS_TABLE)
        if key == "rsched-tick" and partition.startswith(name + "@")
    )


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_weeks_of_ticks_start_one_request_each(api: Api, store: Store) -> None:
    """Three weeks of a daily schedule, a pass every three hours: 21 requests, each counted once,
    with the ids the ticks give."""
    clock, queue = Clock(), MemoryQueue()
    daily = Schedule("daily", ticked, cron="0 6 * * *", input="daily")
    assert fire(api, [daily], store, queue, clock).submitted == 0  # first seen: starts after now
    end = T0 + 21 * 24 * HOUR
    while clock.now < end:
        clock.now += 3 * HOUR
        fire(api, [daily], store, queue, clock)
    expected = [T0 + 22 * HOUR + day * 24 * HOUR for day in range(21)]  # 06:00Z from the 16th
    assert counts(store, "daily") == {tick: 1 for tick in expected}
    assert request_ids(store, "daily") == sorted(daily.request_id(tick) for tick in expected)
    assert daily.request_id(expected[0]) == "daily@2027-01-16T06:00:00Z"


def test_racing_schedulers_start_each_tick_once(api: Api, store: Store) -> None:
    """Four schedulers on threads walk the same hour of a ten-minute schedule: each tick is one
    request with one count, though every scheduler submits it."""
    queue = MemoryQueue()
    every10 = Schedule("race", ticked, cron="*/10 * * * *", input="race", catchup="all")
    fire(api, [every10], store, queue, Clock(T0 - 1))
    walk = [T0 + 600 * n + 5 for n in range(6)]
    failures: list[BaseException] = []

    def scheduler() -> None:
        try:
            for at in walk:
                fire(api, [every10], store, queue, Clock(at))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=scheduler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    ticks = [T0 + 600 * n for n in range(6)]
    assert counts(store, "race") == {tick: 1 for tick in ticks}
    assert request_ids(store, "race") == sorted(every10.request_id(tick) for tick in ticks)


@pytest.mark.parametrize(("catchup", "caught"), [("all", 5), ("latest", 1), ("none", 0)])
def test_ticks_missed_while_every_scheduler_was_down(
    api: Api, store: Store, catchup: Any, caught: int
) -> None:
    """Schedulers down from 08:01 to 13:30: the five hourly ticks missed (09:00-13:00, the last
    half an hour late, past the grace) fire as ``catchup`` says; the 14:00 tick fires on time
    in every mode."""
    queue = MemoryQueue()
    hourly = Schedule("hourly", ticked, cron="0 * * * *", input="hourly", catchup=catchup)
    fire(api, [hourly], store, queue, Clock(T0 + 60))
    missed = [T0 + HOUR * n for n in range(1, 6)]
    report = fire(api, [hourly], store, queue, Clock(T0 + 5.5 * HOUR))
    assert report.fired[0].ticks == tuple(missed[len(missed) - caught :])
    assert report.fired[0].skipped == len(missed) - caught
    fire(api, [hourly], store, queue, Clock(T0 + 6 * HOUR + 30))
    fired = [*missed[len(missed) - caught :], T0 + 6 * HOUR]
    assert counts(store, "hourly") == {tick: 1 for tick in fired}
    assert fire(api, [hourly], store, queue, Clock(T0 + 6 * HOUR + 90)).submitted == 0


def _walk(api: Api, defined: list[Schedule], store: Store, start: str, hours: float) -> None:
    queue = MemoryQueue()
    at = utc(start)
    fire(api, defined, store, queue, Clock(at))
    for _ in range(int(hours * 3)):
        at += 1200.0
        fire(api, defined, store, queue, Clock(at))


def _ticks(store: Store, name: str, day: str) -> list[str]:
    """The tick texts (Berlin wall time) of ``name``'s requests on ``day`` between 01:00 and 03:59."""
    texts = [ticked_text(request_id) for request_id in request_ids(store, name)]
    return [text for text in texts if text.startswith(day) and text[11:13] in ("01", "02", "03")]


def ticked_text(request_id: str) -> str:
    at = utc(request_id.split("@", 1)[1].rstrip("Z"))
    return datetime.fromtimestamp(at, BERLIN).isoformat()


BERLIN = ZoneInfo("Europe/Berlin")


def test_daylight_saving_in_berlin_as_cron_does(api: Api, store: Store) -> None:
    """Spring forward (2027-03-28, 02:00 -> 03:00) and fall back (2027-10-31, 03:00 -> 02:00):
    a daily 02:30 runs at 03:00 on the short night and once on the long one; a half-hourly
    schedule skips the missing hour and runs both of the repeated one (two ticks, two ids)."""
    daily = Schedule("berlin", ticked, cron="30 2 * * *", input="berlin", timezone="Europe/Berlin")
    half = Schedule("berlin-half", ticked, cron="*/30 * * * *", input="half", timezone="Europe/Berlin")
    _walk(api, [daily, half], store, "2027-03-27T22:00:00", 5)
    _walk(api, [daily, half], store, "2027-10-30T22:00:00", 5)
    assert _ticks(store, "berlin", "2027-03-28") == ["2027-03-28T03:00:00+02:00"]
    assert _ticks(store, "berlin", "2027-10-31") == ["2027-10-31T02:30:00+02:00"]
    assert _ticks(store, "berlin-half", "2027-03-28") == [
        "2027-03-28T01:00:00+01:00",
        "2027-03-28T01:30:00+01:00",
        "2027-03-28T03:00:00+02:00",
        "2027-03-28T03:30:00+02:00",
    ]
    assert _ticks(store, "berlin-half", "2027-10-31") == [
        "2027-10-31T01:00:00+02:00",
        "2027-10-31T01:30:00+02:00",
        "2027-10-31T02:00:00+02:00",
        "2027-10-31T02:30:00+02:00",
        "2027-10-31T02:00:00+01:00",
        "2027-10-31T02:30:00+01:00",
        "2027-10-31T03:00:00+01:00",
        "2027-10-31T03:30:00+01:00",
    ]
    assert all(count == 1 for count in counts(store, "half").values())


def test_pause_resume_and_trigger(api: Api, store: Store) -> None:
    """A paused schedule fires nothing and its ticks are never caught up; resumed, its next tick
    fires; a trigger fires one tick now or at a given instant, and triggering an instant twice
    (or one a scheduler fired) is one request. The list shows each state."""
    queue = MemoryQueue()
    hourly = Schedule("ops", ticked, cron="0 * * * *", input="ops", catchup="all")
    fire(api, [hourly], store, queue, Clock(T0 + 30))
    [view] = listed(api, store, [hourly], Clock(T0 + 40))
    assert (view.seen, view.paused, view.last_tick, view.next_tick) == (True, False, None, T0 + HOUR)
    assert pause(api, store, "ops", Clock(T0 + 0.5 * HOUR)).paused
    assert fire(api, [hourly], store, queue, Clock(T0 + 2.5 * HOUR)).fired[0].paused
    [view] = listed(api, store, [hourly], Clock(T0 + 2.5 * HOUR))
    assert (view.paused, view.next_tick) == (True, None)
    resumed = resume(api, store, "ops", Clock(T0 + 2.5 * HOUR))
    assert (resumed.paused, resumed.after) == (False, T0 + 2.5 * HOUR)
    assert fire(api, [hourly], store, queue, Clock(T0 + 3 * HOUR + 10)).fired[0].ticks == (T0 + 3 * HOUR,)
    [view] = listed(api, store, [hourly], Clock(T0 + 3 * HOUR + 20))
    assert (view.last_tick, view.next_tick) == (T0 + 3 * HOUR, T0 + 4 * HOUR)
    first = trigger(api, store, queue, hourly, at=T0 + HOUR)  # a tick of the pause, on purpose
    assert first == trigger(api, store, queue, hourly, at=T0 + HOUR + 0.4) == "ops@2027-01-15T09:00:00Z"
    assert trigger(api, store, queue, hourly, at=T0 + 3 * HOUR) == hourly.request_id(T0 + 3 * HOUR)
    now = trigger(api, store, queue, hourly, clock=Clock(T0 + 3 * HOUR + 1205.7))
    assert now == "ops@2027-01-15T11:20:05Z"
    assert counts(store, "ops") == {T0 + HOUR: 1, T0 + 3 * HOUR: 1, T0 + 3 * HOUR + 1205: 1}


def _crashing(at: int, fault: Fault) -> Callable[[Any], Fault | None]:
    return lambda point: fault if point.index == at else None


@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER])
def test_a_scheduler_dying_anywhere_in_its_pass_loses_no_tick_and_doubles_none(
    store: Store, fault: Fault
) -> None:
    """A pass firing two ticks dies (or loses an answer) at each of its commits in turn; the next
    pass, another scheduler's, leaves each tick counted exactly once."""
    queue = MemoryQueue()
    for index in range(40):
        hourly = Schedule(f"crash{index}", ticked, cron="0 * * * *", input=f"c{index}", catchup="all")
        fire_schedules([hourly], store=store, queue=queue, clock=Clock(T0 + 30))
        faulty = FaultyStore(store, _crashing(index, fault))
        with contextlib.suppress(SimulatedCrash):
            fire_schedules([hourly], store=faulty, queue=queue, clock=Clock(T0 + 2 * HOUR + 30))
        if not faulty.injected:
            break  # past the pass's last commit
        fire_schedules([hourly], store=store, queue=queue, clock=Clock(T0 + 2 * HOUR + 40))
        assert counts(store, f"c{index}") == {T0 + HOUR: 1, T0 + 2 * HOUR: 1}, (index, fault)
    else:
        pytest.fail("the pass never ran out of commits")
    assert index > 3
