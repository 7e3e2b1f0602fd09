"""When a store sweeps its expired rows: the schedule, kept apart from the rules.

The rules (what to delete, what to keep) are :mod:`idemflow.expiry`; this leaf
module holds only what ``commit`` needs on its hot path, so the store modules
import it without importing the engine's machinery (which imports them).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable

from idemflow.errors import StoreConfigError
from idemflow.stores.base import ExpiryReport

log = logging.getLogger("idemflow.expiry")

EXPIRE_EVERY = 60.0
"""Default seconds between two sweeps a store starts by itself from ``commit``."""
LIMIT = 100
"""Default rows one sweep settles (per table on Azure): what bounds a sweep's cost."""


class Schedule:
    """When a store sweeps next: at most once per ``every`` seconds, one sweep at a time.

    ``commit`` asks :meth:`due` after its own work; the common answer is one
    ``time.monotonic()`` compare. A sweep that found a full batch asks for the
    next one at once (the next commit), so sweeping keeps pace with writing.
    ``clock`` is the wall clock rows expire by (tests pass a fixed one).

    >>> schedule = Schedule(None)
    >>> schedule.due()
    False
    """

    __slots__ = ("_lock", "_running", "clock", "every", "next_at")

    def __init__(self, every: float | None, clock: Callable[[], float] = time.time) -> None:
        if every is not None and not every >= 0:
            raise StoreConfigError(f"expire_every must be None or seconds >= 0, not {every!r}")
        self.every = every
        self.clock = clock
        self.next_at = math.inf if every is None else time.monotonic() + every
        self._lock = threading.Lock()
        self._running = False

    def due(self) -> bool:
        """Claim the next sweep if it is due; the caller then runs it and calls :meth:`done`."""
        if time.monotonic() < self.next_at:
            return False
        with self._lock:
            if self._running or time.monotonic() < self.next_at:
                return False
            self._running = True
            return True

    def done(self, report: ExpiryReport | None, limit: int) -> None:
        """The sweep claimed by :meth:`due` ended (``report`` None: it failed)."""
        with self._lock:
            self._running = False
            if self.every is None:
                self.next_at = math.inf
            elif report is not None and report.found >= limit:
                self.next_at = time.monotonic()
            else:
                self.next_at = time.monotonic() + self.every


def swept(sweep: Callable[[float, int], ExpiryReport], schedule: Schedule, where: str) -> None:
    """Run one due sweep of a blocking store; a failure is logged, never raised (the caller's
    commit is done, and the next sweep takes the rows up again)."""
    report = None
    try:
        report = sweep(schedule.clock(), LIMIT)
    except Exception as exc:  # noqa: BLE001 - a sweep is housekeeping: it must not fail a commit
        log.warning("expiry sweep of %s failed: %s", where, exc)
    finally:
        schedule.done(report, LIMIT)
    if report is not None and (report.deleted or report.kept):
        log.debug("expiry sweep of %s: %s", where, report)


async def aswept(
    sweep: Callable[[float, int], Awaitable[ExpiryReport]], schedule: Schedule, where: str
) -> None:
    """:func:`swept` for an asynchronous store."""
    report = None
    try:
        report = await sweep(schedule.clock(), LIMIT)
    except Exception as exc:  # noqa: BLE001 - a sweep is housekeeping: it must not fail a commit
        log.warning("expiry sweep of %s failed: %s", where, exc)
    finally:
        schedule.done(report, LIMIT)
