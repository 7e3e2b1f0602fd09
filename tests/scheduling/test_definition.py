"""A schedule is checked where it is declared, before any scheduler writes: each bad part raises
:class:`~idemflow.errors.InvalidScheduleError` (an ``InvalidInputError``, code ``invalid_input``),
and the functions that take schedules or a schedule's name refuse bad ones with nothing written."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from idemflow import InvalidInputError, InvalidScheduleError, Schedule, checkpoint, workflow
from idemflow.admin import pause_schedule, resume_schedule, schedules, trigger_schedule
from idemflow.errors import ErrorCode
from idemflow.keys import RUNS_TABLE
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue, Scheduler, fire_schedules


@workflow("sched-check")
def noted(kind: str, tick: str) -> Any:
    yield checkpoint()
    return kind + tick


@workflow("sched-untimed")
def untimed(kind: str) -> Any:
    yield checkpoint()
    return kind


def good(**changes: Any) -> Schedule:
    given: dict[str, Any] = {"cron": "0 3 * * *", "input": "k", "timezone": "Europe/Berlin", **changes}
    return Schedule(changes.pop("name", "nightly"), noted, **given)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"cron": "61 * * * *"}, "bad cron expression '61 \\* \\* \\* \\*': Bad minute"),
        ({"cron": "* * *"}, "Wrong number of fields"),
        ({"cron": "0 0 30 2 *"}, "Bad day-of-month"),
        ({"cron": "* * * * * * *"}, "Wrong number of fields"),
        ({"cron": 5}, "cron must be a str"),
        ({"timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"timezone": "../../etc/passwd"}, "unknown timezone"),
        ({"timezone": None}, "timezone must be a str"),
        ({"catchup": "some"}, "catchup must be 'all', 'latest' or 'none', not 'some'"),
        ({"catchup": None}, "catchup must be"),
        ({"grace": -1}, "grace must be a finite number of seconds >= 0"),
        ({"grace": float("nan")}, "grace must be"),
        ({"input": {1, 2}}, "its input cannot be stored"),
        ({"input": {"when": object()}}, "its input cannot be stored"),
    ],
)
def test_a_bad_part_of_a_schedule_is_refused_where_it_is_declared(changes: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidScheduleError, match=said) as caught:
        good(**changes)
    assert isinstance(caught.value, InvalidInputError) and caught.value.code is ErrorCode.INVALID_INPUT
    assert caught.value.schedule == "nightly"


@pytest.mark.parametrize("name", ["", "nightly report", "a|b", "-x", ".x", "x" * 101, 7, None, "nä"])
def test_a_bad_name_is_refused(name: Any) -> None:
    with pytest.raises(InvalidScheduleError, match="a name is 1-100 of"):
        Schedule(name, noted, cron="0 3 * * *", input="k")


def test_a_workflow_that_is_not_a_workflow_or_takes_no_tick_is_refused() -> None:
    with pytest.raises(InvalidScheduleError, match="takes a @workflow function, not function"):
        Schedule("plain", lambda tick: tick, cron="0 3 * * *")  # type: ignore[arg-type]
    with pytest.raises(InvalidScheduleError, match="takes a @workflow function, not str"):
        Schedule("named", "sched-check", cron="0 3 * * *")  # type: ignore[arg-type]
    with pytest.raises(InvalidScheduleError, match=r"does not take \(input, tick=...\)"):
        Schedule("untimed", untimed, cron="0 3 * * *", input="k")
    with pytest.raises(InvalidScheduleError, match=r"does not take \(tick=...\)"):
        Schedule("no-input", noted, cron="0 3 * * *")


def test_schedules_given_together_are_schedules_of_different_names_and_nothing_is_written() -> None:
    store, queue = MemoryStore(), MemoryQueue()
    twice = [good(), good(cron="0 4 * * *")]
    with pytest.raises(InvalidScheduleError, match="two schedules have this name"):
        fire_schedules(twice, store=store, queue=queue)
    with pytest.raises(InvalidScheduleError, match="is a str, not a Schedule"):
        fire_schedules(["nightly"], store=store, queue=queue)  # type: ignore[list-item]
    with pytest.raises(InvalidScheduleError, match="two schedules have this name"):
        schedules(store, twice)
    with pytest.raises(InvalidScheduleError, match="two schedules have this name"):
        Scheduler(twice, store=store, queue=queue)
    with pytest.raises(InvalidInputError, match="scheduler pass interval"):
        Scheduler([good()], store=store, queue=queue, every=0)
    with pytest.raises(InvalidScheduleError, match="a name is"):
        pause_schedule(store, "not a name")
    with pytest.raises(InvalidScheduleError, match="a name is"):
        resume_schedule(store, "a|b")
    with pytest.raises(InvalidScheduleError, match="is a str, not a Schedule"):
        trigger_schedule(store, queue, "nightly")  # type: ignore[arg-type]
    for at in (float("inf"), -1.0, "now", True, dt.datetime(2027, 1, 1)):
        with pytest.raises(InvalidScheduleError, match="at="):
            trigger_schedule(store, queue, good(), at=at)  # type: ignore[arg-type]
    assert list(store.scan(RUNS_TABLE)) == [] and queue.approximate_size() == 0


def test_a_tick_is_given_as_its_wall_time_and_named_by_its_instant() -> None:
    nightly = good()
    tick = nightly.next_tick(1_800_000_000.0)
    assert tick is not None
    assert nightly.request_id(tick) == "nightly@2027-01-16T02:00:00Z"
    assert nightly.tick_text(tick) == "2027-01-16T03:00:00+01:00"
    call = nightly.call(tick)
    assert call.node.args == ("k", "2027-01-16T03:00:00+01:00")  # type: ignore[union-attr]
    longest = Schedule("n" * 100, noted, cron="0 3 * * *", input="k").request_id(tick)
    assert len(longest) == 121
