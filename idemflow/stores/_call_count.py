"""A count of backend calls that costs no lock on the calling path.

Every store counts its backend calls (``round_trips``) for the conformance
suite and the benchmarks; a lock taken on every SDK call to count it would
make the hot path pay for a reading taken once per test. ``next()`` on an
:func:`itertools.count` advances it atomically (a single C call under the
GIL), and a read advances a second count beside it, so the difference is the
number of calls counted.

>>> count = CallCount()
>>> count.add(); count.add()
>>> count.value, count.value
(2, 2)
"""

from __future__ import annotations

import itertools


class CallCount:
    """Backend calls counted by any number of threads, read at any time."""

    __slots__ = ("_reads", "_ticks")

    def __init__(self) -> None:
        self._ticks = itertools.count()
        self._reads = itertools.count()

    def add(self) -> None:
        """Count one call."""
        next(self._ticks)

    @property
    def value(self) -> int:
        """Calls counted so far (each read advances both counts by one)."""
        return next(self._ticks) - next(self._reads)


__all__ = ["CallCount"]
