"""A schedule's ticks: a cron expression in a timezone, as cronsim computes them.

cronsim (a pure-Python library with no dependencies) evaluates expressions as Debian's cron does,
daylight-saving transitions included: a job at a fixed time of day (``30 2 * * *``) whose time
falls in the hour a spring-forward skips runs at the first minute after the gap (03:00), and
once, not twice, in the hour a fall-back repeats; a job every hour or more often (``0 * * * *``,
``*/15 * * * *``) runs at each instant the wall clock shows the time: none in the skipped hour,
twice in the repeated one. Ticks are instants (epoch seconds, whole), so a repeated hour's two
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
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

_CHECK_FROM = datetime(2000, 1, 1, tzinfo=UTC)


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", zone_of(self.timezone))
        check_expression(self.expression, self.zone)

    def next_after(self, at: float) -> float | None:
        """The first tick strictly after ``at`` (None past cronsim's 50-year horizon)."""
        start = datetime.fromtimestamp(math.floor(at), self.zone)
        try:
            return next(CronSim(self.expression, start)).timestamp()
        except StopIteration:
            return None

    def ticks(self, after: float, upto: float, *, limit: int) -> tuple[tuple[float, ...], bool]:
        """The most recent ``limit`` ticks in ``(after, upto]``, oldest first, and whether older
        ones were left out.

        Walked backwards from ``upto``, so a schedule that was down for years costs ``limit``
        steps, not one per missed tick; cronsim's walk backwards meets the same instants as its
        walk forwards, daylight-saving transitions included.
        """
        found: list[float] = []
        start = datetime.fromtimestamp(math.floor(upto) + 1, self.zone)
        earlier = CronSim(self.expression, start, reverse=True)
        for moment in earlier:
            at = moment.timestamp()
            if at <= after:
                return tuple(reversed(found)), False
            if len(found) == limit:
                return tuple(reversed(found)), True
            found.append(at)
        return tuple(reversed(found)), False
