"""What an operation means, whatever backend applies it: conditions, versions, increments.

The stores differ in *where* a condition is evaluated and a version or sum is
computed (in-process for memory and SQLite, server-side on DynamoDB, by
read-then-write on Azure), not in what an operation means. These helpers are
that meaning, shared so that the backends cannot drift apart.

Versions are opaque to callers (only compared for equality), but a version must
never be reused for the same row, not even after the row is deleted and created
again: a body that read the row before the delete holds the old version, and a
reused one would let its stale write commit (the ABA problem). Every write adds
one to the version it replaces (:func:`version_after`), so versions are never
reused within one incarnation of a row; what differs per backend is the first
version of a new incarnation, which must lie above every version the row ever
had. The local stores know a store-wide bound (see :mod:`idemflow.stores._local`);
a backend that creates rows without reading them and keeps no state beyond the
row (DynamoDB) starts each row at a random :func:`fresh_version`.
"""

from __future__ import annotations

import secrets
from decimal import Decimal

from idemflow.errors import InvalidValueError
from idemflow.number_model import DIGITS, Number, is_number, sum_of
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Cond, Expect, Increment, Insert, Op, RowRef

_SMALL = 10**DIGITS
"""Ints below this in size add exactly and are stored as their digits (:mod:`idemflow.number_model`)."""

FRESH_VERSION_BITS = 62
"""Width of a random first version: a new incarnation collides with a version an
old one had with odds about (writes to that incarnation) / 2**62, and versions
stay below 2**63 (a signed 64-bit integer) for any realistic number of writes."""


def expectation(op: Op) -> Expect:
    """The condition ``op`` puts on its row: an Insert expects no row, an Increment nothing."""
    if isinstance(op, Insert):
        return Cond.ABSENT
    if isinstance(op, Increment):
        return Cond.ANY
    return op.expect


def version_after(current: int | None, created: int) -> int:
    """The version a write leaves: one more than the row's, or ``created`` for a new row."""
    return created if current is None else current + 1


def fresh_version() -> int:
    """A first version for a row whose history the store cannot see: random, never 0.

    It comes from ``os.urandom`` (not a seeded generator that forked workers
    would share), so two processes creating the same row draw independently.
    """
    return secrets.randbits(FRESH_VERSION_BITS) + 1


def increment_where(ref: RowRef) -> str:
    """What an increment error names: the table and partition of the row."""
    return f"increment of {ref.table}/{ref.partition}"


def not_a_number(
    ref: RowRef,
    held: str,
    note: str = "",
    *,
    backend: str | None = None,
    operation: str | None = None,
    service_code: str | None = None,
) -> InvalidValueError:
    """The error for an increment of a row holding a ``held`` (a type name), not a number; a
    backend that found it by a failed condition says so (``service_code``)."""
    where = increment_where(ref)
    problem = f"row holds {held}, not a number{note}"
    return InvalidValueError(where, problem, backend=backend, operation=operation, service_code=service_code)


def counted(text: str, delta: Number) -> str | None:
    """The text of the int counter stored as ``text`` plus an int ``delta``, or None when either is
    not a small int (then :func:`added` decides, with its errors).

    Why apart: most increments add an int to an int, and a stored int's canonical text is its
    ASCII digits (JSON allows digits outside strings only in ASCII), so the sum needs neither a
    parse nor an encoding: a tenth of :func:`added`'s time, on every counter a step bumps.

    >>> counted("41", 1), counted("-3", 1), counted("1.5", 1), counted('"7"', 1)
    ('42', '-2', None, None)
    """
    if type(delta) is not int or not -_SMALL < delta < _SMALL:
        return None
    digits = text[1:] if text[:1] == "-" else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > DIGITS:
        return None
    if digits[0] == "0" and len(digits) > 1:  # not JSON: the full path says so
        return None
    summed = int(text) + delta
    return str(summed) if -_SMALL < summed < _SMALL else None


def added(ref: RowRef, base: JSON, delta: Number) -> str:
    """Canonical JSON text of ``base + delta`` (:mod:`idemflow.number_model`); a ``base`` that is
    not a number is an error."""
    if not is_number(base):
        raise not_a_number(ref, type(base).__name__)
    assert isinstance(base, (int, float, Decimal))
    where = increment_where(ref)
    return encode(sum_of(base, delta, where), where)
