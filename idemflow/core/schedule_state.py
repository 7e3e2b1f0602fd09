"""A schedule's state, as its row holds it: whether it is paused and which tick it fired last.

A row kind of its own (format 7), one per schedule, at ``(RUNS_TABLE, SCHEDULES_PARTITION,
s<name>)``. Schedulers race on it with conditional writes (each writes over the version it read),
and nothing else ever needs it to be exact: a tick is one request whatever the row says, because
its request id is derived from the tick (:mod:`idemflow.scheduling.definition`). The row only
remembers how far the schedule's ticks were fired, so that a tick missed while every scheduler
was down is caught up as the schedule's ``catchup`` says, and a tick fired long ago (its request's
rows collected since) is not fired again. It never expires: it is written with no retention.
:mod:`idemflow.records` re-exports it with the other rows.

>>> ScheduleState(after=1_800_000_000.0, last=1_800_000_000.0).to_json()
{'a': 1800000000.0, 'l': 1800000000.0}
>>> ScheduleState.from_json({"a": 5.0, "p": True})
ScheduleState(after=5.0, last=None, paused=True, paused_at=None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idemflow.core.row import RowRef
from idemflow.keys import RUNS_TABLE, SCHEDULES_PARTITION, schedule_key
from idemflow.serialization import JSON


def _seconds(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw)


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What a schedule's row holds (every field optional but ``a``, so later fields can join)."""

    after: float
    """``a``: epoch seconds after which the schedule's ticks are due: the last tick a scheduler
    fired, or the moment the schedule was first seen or resumed (ticks before it are never fired
    by a scheduler: a trigger fires them)."""
    last: float | None = None
    """``l``: the instant of the last tick a scheduler fired (None: none yet)."""
    paused: bool = False
    """``p``: an operator paused it (``pause_schedule``): no scheduler fires its ticks until it is
    resumed, and the ticks of the pause are skipped, never caught up."""
    paused_at: float | None = None
    """``pa``: when the operator paused it (shown by ``schedules list``)."""

    def to_json(self) -> dict[str, JSON]:
        row: dict[str, JSON] = {"a": self.after}
        if self.last is not None:
            row["l"] = self.last
        if self.paused:
            row["p"] = True
            if self.paused_at is not None:
                row["pa"] = self.paused_at
        return row

    @classmethod
    def from_json(cls, raw: Any) -> ScheduleState:
        """The state in a row (``a`` is required; a field it does not read is ignored).

        A ``p`` that is not ``true`` reads as not paused: an operator's pause writes exactly
        ``true``, so anything else is not one.
        """
        after = _seconds(raw["a"])
        if after is None:
            raise ValueError(f"a schedule's row needs epoch seconds in 'a', not {raw['a']!r}")
        paused = raw.get("p") is True
        return cls(after, _seconds(raw.get("l")), paused, _seconds(raw.get("pa")) if paused else None)


def schedule_ref(name: str) -> RowRef:
    """Where the state of the schedule ``name`` lives.

    >>> schedule_ref("nightly")
    RowRef(table='idemflowruns', partition='schedules', key='snightly')
    """
    return RowRef(RUNS_TABLE, SCHEDULES_PARTITION, schedule_key(name))
