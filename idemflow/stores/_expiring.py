"""When a store sweeps its expired rows: the schedule, kept apart from the rules.

The rules (what to delete, what to keep) are :mod:`idemflow.stores.expiry`; this leaf
module holds only what ``commit`` needs on its hot path, so the store modules
import it without importing the engine's machinery (which imports them).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from idemflow import telemetry
from idemflow.errors import ConfigurationError
from idemflow.stores.base import ExpiryReport

log = logging.getLogger("idemflow.expiry")

EXPIRE_EVERY = 60.0
"""Default seconds between two sweeps a store starts by itself from ``commit``."""
LIMIT = 100
"""Default rows one sweep settles (per table on Azure): what bounds a sweep's cost."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """What a store's sweeps met in their last complete pass over its rows (the expiry metric).

    A pass ends where a sweep starts again from the first row (SQLite's window, the memory
    store's expiry order) or from the first page of every table (Azure).
    """

    expired_left: int
    """Expired rows the pass met and left in place: finished run records in their hold, rows of
    unfinished requests (written back for later) and rows a writer changed meanwhile."""
    deleted: int
    """Rows the pass deleted."""
    latest: float
    """Most seconds past its ``expires_at`` of a row the pass deleted: how far behind the sweep ran."""
    seconds: float
    """How long the pass took (wall clock)."""
    rows: int
    """Rows the pass read (SQLite: every row of the file; elsewhere the expired rows it met)."""


class Passes:
    """Adds up the sweeps of the current pass; :attr:`last` is the last complete one's :class:`Backlog`."""

    __slots__ = ("_deleted", "_latest", "_left", "_rows", "_started", "last")

    def __init__(self, now: float) -> None:
        self.last: Backlog | None = None
        self._started = now
        self._left = self._deleted = self._rows = 0
        self._latest = 0.0

    def note(self, report: ExpiryReport, rows: int, wrapped: bool, now: float) -> None:
        """One sweep: ``report``, the ``rows`` it read, and whether the pass ended with it."""
        self._left += report.found - report.deleted - report.kept
        self._deleted += report.deleted
        self._latest = max(self._latest, report.late)
        self._rows += rows
        if wrapped:
            seconds = max(0.0, now - self._started)
            self.last = Backlog(self._left, self._deleted, self._latest, seconds, self._rows)
            self._started = now
            self._left = self._deleted = self._rows = 0
            self._latest = 0.0


class Schedule:
    """When a store sweeps next: at most once per ``every`` seconds, one sweep at a time.

    ``commit`` asks :meth:`due` after its own work; the common answer is one
    ``time.monotonic()`` compare (``ticks``: the clock sweeps are spaced by; monotonic unless
    the schedule is given a clock of its own, as tests give one, then that one: simulated
    time). A sweep that found a full batch, or whose store says it has more to read
    (``more``: SQLite's pace, an Azure page with more after it), asks for the next one at
    once (the next commit), so sweeping keeps pace with writing. ``clock`` is the wall clock
    rows expire by (tests pass a fixed one).

    >>> schedule = Schedule(None)
    >>> schedule.due()
    False
    """

    __slots__ = ("_lock", "_running", "clock", "every", "next_at", "passes", "ticks")

    def __init__(self, every: float | None, clock: Callable[[], float] = time.time) -> None:
        if every is not None and not every >= 0:
            raise ConfigurationError(f"expire_every must be None or seconds >= 0, not {every!r}")
        self.every = every
        self.clock = clock
        self.ticks = time.monotonic if clock is time.time else clock
        self.next_at = math.inf if every is None else self.ticks() + every
        self.passes = Passes(clock())
        self._lock = threading.Lock()
        self._running = False

    def due(self, *, early: bool = False) -> bool:
        """Claim the next sweep if it is due (``early``: the store's pace asks for one before
        its time); the caller then runs it and calls :meth:`done`."""
        if self.every is None or (not early and self.ticks() < self.next_at):
            return False
        with self._lock:
            if self._running or (not early and self.ticks() < self.next_at):
                return False
            self._running = True
            return True

    def done(self, report: ExpiryReport | None, limit: int, *, more: bool = False) -> None:
        """The sweep claimed by :meth:`due` ended (``report`` None: it failed)."""
        with self._lock:
            self._running = False
            if self.every is None:
                self.next_at = math.inf
            elif report is not None and (more or report.found >= limit):
                self.next_at = self.ticks()
            else:
                self.next_at = self.ticks() + self.every

    @property
    def backlog(self) -> Backlog | None:
        """The last complete pass's :class:`Backlog` (None before the first ends)."""
        return self.passes.last


def swept(
    sweep: Callable[[float, int], ExpiryReport],
    schedule: Schedule,
    where: str,
    more: Callable[[], bool] = lambda: False,
) -> None:
    """Run one due sweep of a blocking store; a failure is logged, never raised (the caller's
    commit is done, and the next sweep takes the rows up again). ``more`` (asked after the
    sweep) says the store has fallen behind and wants the next sweep at once."""
    report, before = None, schedule.backlog
    try:
        report = sweep(schedule.clock(), LIMIT)
    except Exception as exc:  # noqa: BLE001 - a sweep is housekeeping: it must not fail a commit
        log.warning("expiry sweep of %s failed: %s", where, exc)
    finally:
        schedule.done(report, LIMIT, more=report is not None and more())
    _ended(schedule, before, where)
    if report is not None and (report.deleted or report.kept):
        log.debug("expiry sweep of %s: %s", where, report)


async def aswept(
    sweep: Callable[[float, int], Awaitable[ExpiryReport]],
    schedule: Schedule,
    where: str,
    more: Callable[[], bool] = lambda: False,
) -> None:
    """:func:`swept` for an asynchronous store."""
    report, before = None, schedule.backlog
    try:
        report = await sweep(schedule.clock(), LIMIT)
    except Exception as exc:  # noqa: BLE001 - a sweep is housekeeping: it must not fail a commit
        log.warning("expiry sweep of %s failed: %s", where, exc)
    finally:
        schedule.done(report, LIMIT, more=report is not None and more())
    _ended(schedule, before, where)


def _ended(schedule: Schedule, before: Backlog | None, where: str) -> None:
    """Report a pass that ended with this sweep to the telemetry gauges (and the debug log)."""
    backlog = schedule.backlog
    if backlog is not None and backlog is not before:
        telemetry.expiry_pass(where, backlog.expired_left, backlog.latest)
        log.debug("expiry pass of %s ended: %s", where, backlog)
