"""What a schedule is: a workflow started at every tick of a cron expression, one request per tick.

A tick's request id is derived from the schedule and the tick alone, ``<name>@<tick in UTC>``
(``nightly@2026-12-03T02:00:00Z``): every scheduler that fires the tick submits the same request,
and ``submit`` is idempotent, so however many schedulers race (every worker started with
``--schedules``, a Lambda, an Azure timer) the tick is one request, with no leader and no lock.
The id is at most 121 characters of letters, digits and ``_ . - @ : T Z``: a request id on every
store. The workflow is called as ``workflow(input, tick=...)`` (``workflow(tick=...)`` without an
input), ``tick`` the tick's wall time in the schedule's timezone as ISO 8601 with its offset
(``2026-12-03T03:00:00+01:00``), so a nightly report knows which night it reports on.

>>> from idemflow import workflow
>>> @workflow("report")
... def report(kind, tick):
...     return f"{kind} report for {tick[:10]}"
...     yield
>>> nightly = Schedule("nightly", report, cron="0 3 * * *", input="sales", timezone="Europe/Berlin")
>>> tick = nightly.next_tick(1_800_000_000.0)
>>> nightly.request_id(tick), nightly.tick_text(tick)
('nightly@2027-01-16T02:00:00Z', '2027-01-16T03:00:00+01:00')
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from idemflow.engine.monad import Idem
from idemflow.errors import IdemflowError, InvalidScheduleError
from idemflow.running.request_spec import describe_request
from idemflow.running.workflows import Workflow
from idemflow.scheduling.cron import Cron, local, utc
from idemflow.serialization import JSON

Catchup = Literal["all", "latest", "none"]
"""What a scheduler does with ticks it finds more than ``grace`` late (missed while every
scheduler was down): fire them all (the most recent :data:`MAX_CATCHUP`), only the most recent
one, or none. Ticks found within ``grace`` always fire."""

CATCHUP_MODES: tuple[Catchup, ...] = ("all", "latest", "none")
DEFAULT_CATCHUP: Catchup = "latest"
"""Like a Kubernetes CronJob or anacron after a downtime: one run, not a burst of stale ones."""

MAX_CATCHUP = 100
"""Most missed ticks ``catchup="all"`` fires after an outage: the most recent ones (the older are
skipped and logged). It bounds a pass's work: a minutely schedule down for a day would otherwise
start 1,440 requests in one pass."""

DEFAULT_GRACE = 300.0
"""Seconds a tick may be late and still count as on time (not missed): above a worker's pass
interval, a Lambda or Azure timer's minute and a cold start."""

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")
_SAMPLE_TICK = 946_684_800.0
"""An instant whose tick text checks the workflow takes ``tick=`` and the input is encodable."""


def check_schedule_name(name: object) -> str:
    """A schedule's name: 1-100 of ``A-Z a-z 0-9 _ . -``, not starting with ``.`` or ``-`` (it
    starts every request id of the schedule and keys its state row).

    >>> check_schedule_name("nightly report")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidScheduleError: schedule 'nightly report': a name is 1-100 of A-Z a-z 0-9 _ . -, ...
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidScheduleError(name, "a name is 1-100 of A-Z a-z 0-9 _ . -, not starting with . or -")
    return name


@dataclass(frozen=True, slots=True)
class Schedule:
    """A workflow to start at every tick of ``cron`` in ``timezone`` (see the module docstring).

    ``input`` (JSON-compatible, or a type a codec encodes) is passed first; ``catchup`` says what
    a scheduler does with missed ticks (:data:`Catchup`, default ``"latest"``); ``grace`` is how
    many seconds late a tick may be found and still count as on time. Everything is checked
    here, before any scheduler writes: a bad one raises
    :class:`~idemflow.errors.InvalidScheduleError`.
    """

    name: str
    workflow: Workflow[..., Any]
    _: KW_ONLY
    cron: str
    input: JSON | object = None
    timezone: str = "UTC"
    catchup: Catchup = DEFAULT_CATCHUP
    grace: float = DEFAULT_GRACE
    ticking: Cron = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_schedule_name(self.name)
        if not isinstance(self.workflow, Workflow):
            raise InvalidScheduleError(
                self.name, f"takes a @workflow function, not {type(self.workflow).__name__}"
            )
        if not isinstance(self.cron, str):
            raise InvalidScheduleError(self.name, f"cron must be a str, not {type(self.cron).__name__}")
        if not isinstance(self.timezone, str):
            raise InvalidScheduleError(self.name, f"timezone must be a str, not {self.timezone!r}")
        try:
            object.__setattr__(self, "ticking", Cron(self.cron, self.timezone))
        except ValueError as exc:
            raise InvalidScheduleError(self.name, str(exc)) from exc
        if self.catchup not in CATCHUP_MODES:
            raise InvalidScheduleError(
                self.name, f"catchup must be 'all', 'latest' or 'none', not {self.catchup!r}"
            )
        grace = self.grace
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not (0 <= grace < math.inf):
            raise InvalidScheduleError(
                self.name, f"grace must be a finite number of seconds >= 0, not {grace!r}"
            )
        self.call(_SAMPLE_TICK)

    def request_id(self, tick: float) -> str:
        """The request id of the tick at ``tick`` (epoch seconds): ``<name>@<UTC>``."""
        return f"{self.name}@{utc(tick)}"

    def tick_text(self, tick: float) -> str:
        """What the workflow is given as ``tick``: the wall time in the schedule's timezone."""
        return local(tick, self.ticking.zone)

    def call(self, tick: float) -> Idem[Any]:
        """The workflow call of the tick at ``tick``, checked as ``submit`` checks it."""
        args = () if self.input is None else (self.input,)
        try:
            called = self.workflow(*args, tick=self.tick_text(tick))
        except TypeError as exc:
            taken = "(input, tick=...)" if args else "(tick=...)"
            raise InvalidScheduleError(self.name, f"its workflow does not take {taken}: {exc}") from exc
        try:
            describe_request(called)
        except IdemflowError as exc:
            raise InvalidScheduleError(self.name, f"its input cannot be stored: {exc}") from exc
        return called

    def next_tick(self, after: float) -> float | None:
        """The first tick strictly after ``after`` (epoch seconds)."""
        return self.ticking.next_after(after)


def check_schedules(schedules: Iterable[Schedule]) -> tuple[Schedule, ...]:
    """``schedules`` as a tuple, each a :class:`Schedule` and no two of one name.

    >>> check_schedules(["nightly"])
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidScheduleError: schedule 'nightly': is a str, not a Schedule
    """
    if isinstance(schedules, Schedule):
        schedules = (schedules,)
    checked: dict[str, Schedule] = {}
    for schedule in schedules:
        if not isinstance(schedule, Schedule):
            raise InvalidScheduleError(schedule, f"is a {type(schedule).__name__}, not a Schedule")
        if schedule.name in checked:
            raise InvalidScheduleError(schedule.name, "two schedules have this name: names must differ")
        checked[schedule.name] = schedule
    return tuple(checked.values())


def find_schedule(schedules: Iterable[Schedule], name: str) -> Schedule:
    """The schedule named ``name`` among ``schedules``, or :class:`InvalidScheduleError`."""
    for schedule in check_schedules(schedules):
        if schedule.name == name:
            return schedule
    raise InvalidScheduleError(name, "no schedule of this name is defined")
