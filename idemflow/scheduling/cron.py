"""A schedule's ticks: a cron expression in a timezone, as cronsim computes them.

cronsim (a pure-Python library with no dependencies) evaluates expressions as Debian's cron does,
daylight-saving transitions included: a job at a fixed time of day (``30 2 * * *``) whose time
falls in the hour a spring-forward skips runs at the first minute after the gap (03:00), and
once, not twice, in the hour a fall-back repeats; a job every hour or more often (``0 * * * *``,
``*/15 * * * *``) runs at each instant the wall clock shows the time: none in the skipped hour,
twice in the repeated one (a fixed time in the repeated hour runs at its first occurrence).
Ticks are instants (epoch seconds, whole), so a repeated hour's two
``02:00`` are two ticks with two request ids. Every scheduler computes the same ticks from the
same expression, zone and library version: that is what makes a tick's request id agree.

>>> cron = Cron("0 9 * * MON", "Europe/Berlin")
>>> when = cron.next_after(1_800_000_000.0)
>>> local(when, cron.zone)
'2027-01-18T09:00:00+01:00'
>>> cron.ticks(when - 7 * 86400 - 1, when, limit=10)
((1799654400.0, 1800259200.0), False)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

_CHECK_FROM = datetime(2000, 1, 1, tzinfo=UTC)

MARGIN = 3 * 3600.0
"""Seconds of wall time walked beyond a window: longer than any daylight-saving shift (an hour;
half an hour at Lord Howe Island), so a fall-back's repeated wall times are met in the window."""


def zone_of(timezone: str) -> tzinfo:
    """The zone a timezone name names (an IANA name, ``Europe/Berlin``), or ValueError.

    ``"UTC"`` is :data:`datetime.UTC` itself, which cronsim evaluates without any daylight-saving
    handling (there is none to do).
    """
    if timezone == "UTC":
        return UTC
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown timezone {timezone!r} (an IANA name, e.g. 'Europe/Berlin')") from exc


def check_expression(expression: str, zone: tzinfo) -> str:
    """``expression`` if cronsim reads it and it ever fires, else ValueError saying why.

    Five fields (minute hour day month weekday) or six (seconds first), as cronsim takes them.
    """
    try:
        upcoming = CronSim(expression, _CHECK_FROM.astimezone(zone))
    except CronSimError as exc:
        raise ValueError(f"bad cron expression {expression!r}: {exc}") from exc
    try:
        next(upcoming)
    except StopIteration as exc:
        raise ValueError(f"cron expression {expression!r} never fires (no match within 50 years)") from exc
    return expression


def local(at: float, zone: tzinfo) -> str:
    """The instant ``at`` as ISO 8601 wall time in ``zone``, with its offset (what the workflow is
    given as ``tick``: both the instant and the night it belongs to)."""
    return datetime.fromtimestamp(at, zone).isoformat()


def utc(at: float) -> str:
    """The instant ``at`` as ``YYYY-MM-DDTHH:MM:SSZ`` (a tick's request id ends with it).

    >>> utc(1_800_000_000.0)
    '2027-01-15T08:00:00Z'
    """
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Cron:
    """A checked cron expression in its zone (see :func:`check_expression`, :func:`zone_of`)."""

    expression: str
    timezone: str
    zone: tzinfo = field(init=False, compare=False)
    margin: float = field(init=False, compare=False)
    """How far out of order the walk forwards may meet ticks: :data:`MARGIN` where cronsim walks
    wall times (a job at fixed times of day in a zone with daylight saving), else none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", zone_of(self.timezone))
        check_expression(self.expression, self.zone)
        walk = CronSim(self.expression, datetime.fromtimestamp(0, self.zone))
        object.__setattr__(self, "margin", MARGIN if getattr(walk, "fixup_tz", True) is not None else 0.0)

    def _walk(self, start: float) -> Iterator[float]:
        """The ticks cronsim's walk forwards meets from ``start`` (less :attr:`margin`), in the
        order it meets them: increasing, except around a transition where wall times are walked
        (out of order by less than :data:`MARGIN`)."""
        begin = datetime.fromtimestamp(math.floor(start) - self.margin, self.zone)
        return (moment.timestamp() for moment in CronSim(self.expression, begin))

    def next_after(self, at: float) -> float | None:
        """The first tick strictly after ``at`` (None past cronsim's 50-year horizon)."""
        margin, best = self.margin, None
        for tick in self._walk(at):
            if best is not None and tick > best + margin:
                break
            if tick > at and (best is None or tick < best):
                best = tick
                if not margin:
                    break
        return best

    def ticks(self, after: float, upto: float, *, limit: int) -> tuple[tuple[float, ...], bool]:
        """The most recent ``limit`` ticks in ``(after, upto]``, oldest first, and whether older
        ones were left out.

        Every pass finds the ticks of one walk forwards, whatever its window: the walk starts
        :attr:`margin` before ``after`` and goes :attr:`margin` past ``upto``, so the wall times
        of a fall-back (met out of order) are each met once, by the window holding their instant.
        A schedule down for years does not walk them all: a walk backwards from ``upto`` finds
        where the most recent ``limit`` begin, and the walk forwards starts there.
        """
        margin = self.margin
        begin, older = after, False
        earlier = CronSim(
            self.expression, datetime.fromtimestamp(math.floor(upto) + 1, self.zone), reverse=True
        )
        for count, moment in enumerate(earlier):
            if moment.timestamp() <= after:
                break
            if count == limit + 1:
                begin, older = moment.timestamp() - margin, True
                break
        found = []
        for tick in self._walk(max(begin, after)):
            if tick > upto + margin:
                break
            if max(begin, after) < tick <= upto:
                found.append(tick)
        found.sort()
        if len(found) > limit:
            found, older = found[-limit:], True
        return tuple(found), older
