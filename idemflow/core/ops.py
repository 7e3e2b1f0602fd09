"""What one atomic commit is made of and what it answers: the operations on rows and the outcome.

Why below the stores: the engine's request types (:mod:`idemflow.core.requests`) carry these
operations to whichever store answers them, and the stores (:mod:`idemflow.stores.base`, which
re-exports every name) apply them; neither layer owns the other's vocabulary.

A commit either applies every operation or none. When a condition fails the store reports every
failing operation it can identify (at least one) and, for an :class:`Insert` whose row already
existed, the existing row, so that a memo hit costs no extra round trip where the backend
returns the old item.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from idemflow.core.row import Row, RowRef, Version
from idemflow.number_model import Number
from idemflow.serialization import JSON


class Cond(enum.Enum):
    """Conditions that are not a specific version."""

    ABSENT = "absent"
    """The row must not exist."""
    ANY = "any"
    """No condition: a blind write."""


Expect = Version | Cond


@dataclass(frozen=True, slots=True)
class Put:
    """Write ``value`` (``text`` is its canonical JSON) if the row matches ``expect``."""

    ref: RowRef
    value: JSON
    text: str
    expect: Expect = Cond.ANY
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class Insert:
    """Create the row only if absent (memo rows, run records).

    On failure the store reports the existing row with the failure.
    """

    ref: RowRef
    value: JSON
    text: str
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the row if it matches ``expect`` (deleting an absent row is a no-op)."""

    ref: RowRef
    expect: Expect = Cond.ANY


@dataclass(frozen=True, slots=True)
class Increment:
    """Add ``delta`` to a numeric row server-side, creating it at 0 if absent.

    Every store applies it; a backend that cannot add server-side (Azure)
    reads the row inside ``commit`` and writes it back under a version
    condition, retrying that read-write itself when only this row moved.
    Incrementing a row whose value is not a number raises
    :class:`InvalidValueError`.
    """

    ref: RowRef
    delta: Number


@dataclass(frozen=True, slots=True)
class Check:
    """Require the row to match ``expect`` without writing it (a row only read)."""

    ref: RowRef
    expect: Expect


Op = Put | Insert | Delete | Increment | Check


@dataclass(frozen=True, slots=True)
class Committed:
    """Every operation was applied."""


COMMITTED = Committed()


@dataclass(frozen=True, slots=True)
class OpFailure:
    """One operation whose condition failed; ``existing`` is set for a failed Insert."""

    index: int
    existing: Row | None = None


@dataclass(frozen=True, slots=True)
class Conflict:
    """Nothing was applied; ``failures`` lists the failing operations by index."""

    failures: tuple[OpFailure, ...]


CommitOutcome = Committed | Conflict


__all__ = [
    "COMMITTED",
    "Check",
    "CommitOutcome",
    "Committed",
    "Cond",
    "Conflict",
    "Delete",
    "Expect",
    "Increment",
    "Insert",
    "Op",
    "OpFailure",
    "Put",
]
