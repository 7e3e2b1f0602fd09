"""A timer's two questions every waiting step asks: how its end reads in a note, and whether a
test's clock has been moved past it.

Sleeps, receives with a timeout, ``any_of``'s sleeps and a compensation's wait for a call that
may still land all put their end into the request's ``wait`` note and all meet the same
frozen test clock, so they share these answers rather than each keeping a copy.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from idemflow.core.requests import SkippingClock

__all__ = ["skipped_to", "when"]


def when(epoch: float) -> str:
    """``epoch`` as the UTC time a ``wait`` note names (``2026-12-03T10:00:00+00:00``)."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="seconds")


def skipped_to(clock: Callable[[], float], due: float) -> bool:
    """Whether ``clock`` is a test's :class:`~idemflow.core.requests.SkippingClock`, now moved on
    to ``due``: its frozen time would never get there, so a timer or a receive's timeout would
    wait forever."""
    if not isinstance(clock, SkippingClock):
        return False
    clock.skip_to(due)
    return True
