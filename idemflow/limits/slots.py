"""Slots and token buckets kept in the store, taken and given back with conditional writes.

Every limit has at most two rows in the ``limits`` partition of the runs table: ``slots``
(``{"holders": {token: until}}``, the executions inside and when each one's lease ends) and
``bucket`` (``{"tokens": t, "at": when}``). One row per limit, not one per slot index: taking
a slot is then one read of every row a request needs (``ReadMany``) and one commit of them all,
conditioned on the versions read, whatever the number of slots or limits. That is what every
backend's conditional write does in one call (DynamoDB ``TransactWriteItems``, an Azure
entity group transaction, a SQLite transaction); a row per slot index would take one read per
slot on Azure, whose ``read_many`` is one call per row. Racing takers meet a version conflict
and read again; a slot held past its lease is free to anyone (the holder died or stalled).

Times are the run's clock (``time.time``): hosts' skew lengthens or shortens a lease or a
refill by that much, as for an effect's lease (:mod:`idemflow.engine.lease`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from idemflow.core.limit_spec import Limit
from idemflow.core.policy import resent_until_deadline
from idemflow.core.requests import Commit, ReadMany, Sleep, Steps
from idemflow.keys import LIMITS_PARTITION, RUNS_TABLE, limit_key
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Insert, Op, Put, Row, RowRef

log = logging.getLogger("idemflow.limits")

CONFLICT_TRIES = 8
"""Reads and commits a taker tries when racing takers keep moving its rows; then it waits."""
ROUNDING = 1e-6
"""A bucket this close to a whole token has it: epoch seconds in floats lose the last digits of
a refill (``1e6 + 0.2 - 1e6`` is ``0.19999999995``)."""
SLOT_POLL = (0.1, 0.5)
"""Seconds (a uniform draw) a request waiting for a slot waits before it looks again: a slot
given back wakes nobody, so waiters look again, spread out so they do not all look at once."""


@dataclass(frozen=True, slots=True)
class Full:
    """A limit had no room: what the request waits for, and when to look again."""

    why: str
    retry_after: float


def slots_ref(limit: Limit) -> RowRef:
    return RowRef(RUNS_TABLE, LIMITS_PARTITION, limit_key(limit.kind, limit.name, "slots"))


def bucket_ref(limit: Limit) -> RowRef:
    return RowRef(RUNS_TABLE, LIMITS_PARTITION, limit_key(limit.kind, limit.name, "bucket"))


def holders(row: Row | None, now: float) -> dict[str, float]:
    """The live holders of a slots row: leases that end after ``now``."""
    value = None if row is None else row.value
    held = value.get("holders") if isinstance(value, dict) else None
    if not isinstance(held, dict):
        return {}
    return {
        token: float(until)
        for token, until in held.items()
        if isinstance(until, (int, float)) and not isinstance(until, bool) and float(until) > now
    }


def tokens(row: Row | None, limit: Limit, now: float) -> float:
    """The tokens a bucket holds at ``now``: refilled from the time of its last write."""
    assert limit.rate is not None
    value = None if row is None else row.value
    if not isinstance(value, dict):
        return float(limit.rate.capacity)
    held, at = value.get("tokens"), value.get("at")
    if not isinstance(held, (int, float)) or not isinstance(at, (int, float)):
        return float(limit.rate.capacity)
    refilled = float(held) + max(now - float(at), 0.0) * limit.rate.per_second
    return min(refilled, float(limit.rate.capacity))


def _write(ref: RowRef, row: Row | None, value: JSON) -> Op:
    text = encode(value)
    return Insert(ref, value, text) if row is None else Put(ref, value, text, row.version)


def _parts(limits: Sequence[Limit]) -> list[tuple[Limit, RowRef, bool]]:
    """Every row ``limits`` need, as ``(limit, row, is the slots row)``."""
    parts: list[tuple[Limit, RowRef, bool]] = []
    for limit in limits:
        if limit.concurrency is not None:
            parts.append((limit, slots_ref(limit), True))
        if limit.rate is not None:
            parts.append((limit, bucket_ref(limit), False))
    return parts


def acquire(limits: Sequence[Limit], token: str, clock: Callable[[], float]) -> Steps[Full | None]:
    """Take a slot of each concurrency limit and a token of each rate for ``token``, all at once.

    None when held; a :class:`Full` (nothing taken) when any limit has no room.
    """
    parts = _parts(limits)
    refs = [ref for _, ref, _ in parts]
    for _ in range(CONFLICT_TRIES):
        rows: list[Row | None] = yield from resent_until_deadline(ReadMany(refs))
        now = clock()
        ops: list[Op] = []
        full: list[Full] = []
        for (limit, ref, is_slots), row in zip(parts, rows, strict=True):
            if is_slots:
                assert limit.concurrency is not None
                held = holders(row, now)
                if token not in held and len(held) >= limit.concurrency.slots:
                    first_free = min(held.values()) - now
                    full.append(Full(limit.slots_why(), min(first_free, random.uniform(*SLOT_POLL))))
                    continue
                held[token] = now + limit.concurrency.lease
                ops.append(_write(ref, row, {"holders": dict(held)}))
            else:
                assert limit.rate is not None
                left = tokens(row, limit, now)
                if left < 1.0 - ROUNDING:
                    full.append(Full(limit.rate_why(), (1.0 - left) / limit.rate.per_second))
                    continue
                ops.append(_write(ref, row, {"tokens": max(left - 1.0, 0.0), "at": now}))
        if full:
            return Full(full[0].why, max(max(f.retry_after for f in full), 0.01))
        # Safe to resend: one that applied meets its own version as a conflict, and the next look
        # finds the slot already held (a lost answer to a bucket's commit spends a second token).
        if isinstance((yield from resent_until_deadline(Commit(ops))), Committed):
            return None
        yield Sleep(random.uniform(0.0, 0.02), time.sleep)  # asyncio.sleep on the event loop
    return Full(_parts_why(parts), random.uniform(*SLOT_POLL))


def _parts_why(parts: list[tuple[Limit, RowRef, bool]]) -> str:
    limit, _, is_slots = parts[0]
    return limit.slots_why() if is_slots else limit.rate_why()


def release(limits: Sequence[Limit], token: str, clock: Callable[[], float]) -> Steps[None]:
    """Give back ``token``'s slots (a rate's tokens are spent: nothing to give back)."""
    yield from _rewrite(limits, token, clock, renew=False)


def renew(limits: Sequence[Limit], token: str, clock: Callable[[], float]) -> Steps[bool]:
    """Extend ``token``'s leases by a lease from now; False if a slot was lost (its lease ended
    and the limit filled up since): the execution goes on, one over the limit until it ends."""
    return (yield from _rewrite(limits, token, clock, renew=True))


def _rewrite(limits: Sequence[Limit], token: str, clock: Callable[[], float], *, renew: bool) -> Steps[bool]:
    parts = [(limit, ref) for limit, ref, is_slots in _parts(limits) if is_slots]
    if not parts:
        return True
    refs = [ref for _, ref in parts]
    for _ in range(CONFLICT_TRIES):
        rows: list[Row | None] = yield from resent_until_deadline(ReadMany(refs))
        now = clock()
        ops: list[Op] = []
        kept = True
        for (limit, ref), row in zip(parts, rows, strict=True):
            assert limit.concurrency is not None
            held = holders(row, now)
            if not renew:
                if token in held or (row is not None and len(held) != _stored(row)):
                    held.pop(token, None)  # dead holders are swept on the way
                    ops.append(_write(ref, row, {"holders": dict(held)}))
                continue
            if token not in held and len(held) >= limit.concurrency.slots:
                kept = False
                continue
            if token not in held:  # its lease ended first: while it was over, others could enter
                log.warning("a slot of %s %s was renewed after its lease ended", limit.kind, limit.name)
            held[token] = now + limit.concurrency.lease
            ops.append(_write(ref, row, {"holders": dict(held)}))
        if not ops or isinstance((yield from resent_until_deadline(Commit(ops))), Committed):
            return kept
        yield Sleep(random.uniform(0.0, 0.02), time.sleep)
    return False


def _stored(row: Row) -> int:
    value = row.value
    held = value.get("holders") if isinstance(value, dict) else None
    return len(held) if isinstance(held, dict) else 0
