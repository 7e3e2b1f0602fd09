"""The lease of an effect (``effect(fn, lease=seconds)``): one caller at a time, never stuck.

Without a lease, racing executions of one request each call an effect (at
least once, with one idempotency key). With one, an execution first commits a
lease row beside the effect's memo, conditioned on there being no lease held
and no memo: the one that commits it calls ``fn``; the others wait for its
memo and return that. A lease is a promise, not a lock: once its time has
passed (the holder crashed, or its call outlived the lease), the next
execution takes it over with a conditional write, so a crashed holder blocks
the request for at most ``seconds``. The memo commit removes the lease; the
first memo committed wins, as for any step.

Lease times are wall-clock seconds (``time.time``), compared across
processes: skew between hosts lengthens or shortens a lease by that much.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Generator
from typing import Any

from tenacity import wait_exponential

from idemflow.core.policy import backoff
from idemflow.core.requests import Sleep, Steps
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Check, CommitOutcome, Committed, Cond, Insert, Op, Put, Row, RowRef

FIRST_PAUSE, LONGEST_PAUSE = 0.02, 1.0
"""How a waiting execution polls for the holder's memo: doubling from the first to the longest."""
_POLLING = wait_exponential(multiplier=FIRST_PAUSE, max=LONGEST_PAUSE)


MIN_LEASE = 0.1
"""The shortest lease :func:`capped` gives: a holder near its end still gets to make its call."""


def capped(seconds: float, until: float | None, wall: Callable[[], float] = time.time) -> float:
    """``seconds``, or less when the holder's process ends at ``until`` (epoch seconds): a lease
    must not outlive its holder, or a retry waits on a holder that is gone.

    >>> capped(30.0, None), capped(30.0, 100.0, wall=lambda: 95.0)
    (30.0, 5.0)
    """
    return seconds if until is None else max(min(seconds, until - wall()), MIN_LEASE)


def held_until(row: Row) -> float:
    """When the lease in ``row`` ends (a row this version cannot read has ended)."""
    value = row.value
    until = value.get("until") if isinstance(value, dict) else None
    return float(until) if isinstance(until, (int, float)) and not isinstance(until, bool) else 0.0


def acquire(
    memo_ref: RowRef,
    lease_ref: RowRef,
    seconds: float,
    *,
    commit: Callable[[list[Op]], Generator[Any, Any, CommitOutcome]],
    read: Callable[[RowRef], Generator[Any, Any, Row | None]],
    sleep: Callable[[float], Any],
    expires: float,
    wall: Callable[[], float] = time.time,
) -> Steps[Row | None]:
    """Hold the lease (None: call the effect now) or return the memo another execution committed."""
    holder = secrets.token_hex(8)
    looks = 0
    current: Row | None = None
    while True:
        now = wall()
        if current is not None and held_until(current) > now:  # a live holder: wait for its memo
            memo = yield from read(memo_ref)
            if memo is not None:
                return memo
            looks += 1
            yield Sleep(min(backoff(_POLLING, looks), held_until(current) - now), sleep)
            current = yield from read(lease_ref)
            continue
        lease: JSON = {"holder": holder, "until": now + seconds}
        text = encode(lease)
        take = (
            Insert(lease_ref, lease, text, expires)
            if current is None
            else Put(lease_ref, lease, text, current.version, expires)  # a lease that ended: taken over
        )
        outcome = yield from commit([take, Check(memo_ref, Cond.ABSENT)])
        if isinstance(outcome, Committed):
            return None
        failed = {failure.index for failure in outcome.failures}
        if 1 in failed:  # the memo is there: the effect was called and recorded
            memo = yield from read(memo_ref)
            if memo is not None:
                return memo
        current = yield from read(lease_ref)
