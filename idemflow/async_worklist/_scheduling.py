"""When a submitted request may start and in which queue lane: ``submit(delay=, not_before=,
priority=)`` checked before anything is written; and how its continuations are timed on the
queue (:func:`hop`, :data:`MAX_HOP`) and when a copy of a ``submit`` takes over sending one
(:data:`TAKEOVER`). Both the submitting client and the worker that re-queues an early pointer
time continuations by these, so they live here rather than on either side.

A delayed request is claimed at once (its input, its outbox entry) but runs nothing before its
time, not even the steps before its first checkpoint that ``submit`` otherwise runs in the
caller: every step of it runs in a worker, which re-queues a pointer that arrives early. The
time is kept in its run record, so an early pointer (a queue's longest delay, a relay, a copy of
the submission, an operator's ``retry``, a worker whose clock runs ahead) is always held back.

>>> schedule(None, None, "normal", now=100.0, retention=3600.0)
Schedule(not_before=None, lane=None)
>>> schedule(30, None, "high", now=100.0, retention=3600.0)
Schedule(not_before=130.0, lane='high')
>>> schedule(None, datetime(1970, 1, 1, 0, 3, tzinfo=UTC), "low", now=100.0, retention=3600.0)
Schedule(not_before=180.0, lane='low')
>>> schedule(30, 130.0, "normal", now=100.0, retention=3600.0)
Traceback (most recent call last):
...
idemflow.errors.InvalidValueError: submit delay/not_before: give one of them, not both
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from idemflow.errors import InvalidValueError, LimitExceededError

Priority = Literal["high", "normal", "low"]
"""What ``submit(priority=)`` takes."""

PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")
"""The priorities ``submit`` takes, highest first: each is a lane of the queue (see
:mod:`idemflow.async_worklist.queues.lanes`); ``normal`` is the queue itself."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A submission's start time (epoch seconds, None: at once) and lane (None: normal)."""

    not_before: float | None
    lane: str | None


def schedule(
    delay: object, not_before: object, priority: object, *, now: float, retention: float
) -> Schedule:
    """The checked schedule of a submission made at ``now`` whose rows are kept ``retention``
    seconds: a start later than that would find its input expired, so it is refused."""
    if priority not in PRIORITIES:
        raise InvalidValueError(
            "submit priority", f"must be one of {', '.join(PRIORITIES)}, not {priority!r}"
        )
    lane = None if priority == "normal" else str(priority)
    if delay is not None and not_before is not None:
        raise InvalidValueError("submit delay/not_before", "give one of them, not both")
    if delay is None and not_before is None:
        return Schedule(None, lane)
    what = "submit delay" if delay is not None else "submit not_before"
    given = _seconds(what, delay if delay is not None else not_before)
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given):
        unit = "a finite number of seconds" if delay is not None else "finite epoch seconds"
        raise InvalidValueError(what, f"must be {unit}, not {given!r}")
    if delay is not None and given < 0:
        raise InvalidValueError(what, f"must be >= 0 seconds, not {given!r}")
    at = now + float(given) if delay is not None else float(given)
    if at - now >= retention:
        raise LimitExceededError(
            what,
            f"starts {at - now:.0f} s from now, past the request's retention of {retention:.0f} s "
            "(its input would expire first): submit it later, or with a longer RetryPolicy(retention=)",
        )
    return Schedule(at if at > now else None, lane)  # a time already past: at once


def _seconds(what: str, given: object) -> object:
    """A ``timedelta`` delay or an aware ``datetime`` time as seconds; anything else as given."""
    if isinstance(given, timedelta):
        return given.total_seconds()
    if isinstance(given, datetime):
        if given.tzinfo is None:
            raise InvalidValueError(what, f"{given!r} has no time zone: give an aware datetime (tzinfo=UTC)")
        return given.timestamp()
    return given


def check_lanes(priority: object, laned: bool) -> None:
    """Refuse a priority other than ``normal`` for a queue without lanes (it would be lost)."""
    if priority in PRIORITIES and priority != "normal" and not laned:
        raise InvalidValueError(
            "submit priority",
            f"{priority!r} needs a queue with priority lanes (open it with ?lanes=true, or LanedQueue)",
        )


def waiting_until(not_before: float) -> str:
    """The run record's note for a request not yet due: ``waiting until <UTC time>``.

    >>> waiting_until(0.0)
    'waiting until 1970-01-01T00:00:00.000+00:00'
    """
    return "waiting until " + datetime.fromtimestamp(not_before, UTC).isoformat(timespec="milliseconds")


TAKEOVER = 5.0
"""Seconds after a request's claim before a copy of its ``submit`` sends the continuation itself
if the first has not (its outbox entry is still there): a live ``submit`` sends well within this,
so racing copies enqueue nothing, and a client retrying later than this after a crash is not left
to the relay (a sooner retry is: the outbox grace, ``submit(grace=)``)."""


MAX_HOP = 900.0
"""The longest delay a suspended continuation is queued with (SQS's limit, used on every queue):
a timer due later is re-queued when it arrives, until it is due."""


def hop(due: float, now: float) -> float:
    """The delay to queue a continuation due at ``due`` with."""
    return min(max(due - now, 0.0), MAX_HOP)


__all__ = [
    "MAX_HOP",
    "PRIORITIES",
    "TAKEOVER",
    "Priority",
    "Schedule",
    "check_lanes",
    "hop",
    "schedule",
    "waiting_until",
]
