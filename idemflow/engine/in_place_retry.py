"""A step's own retry policy (``retry=``), tried in place: the same step, attempt after attempt.

Under ``run``, ``submit`` and an operator's abort, a step or effect whose
policy retries is attempted again here after the policy's wait; workers set
``Plan.retry_in_place=False`` and retry with a delayed continuation instead
(:mod:`idemflow.core.step_retry`). Every attempt is the same step: the cursor is
put back at its number, so its memo, journal entry and idempotency key stay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from idemflow.core.requests import SkippingClock, Sleep, Steps
from idemflow.core.step_retry import StepRetry
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.errors import BackendError, ConflictError, LimitReachedError, NonDeterminismError

INFRASTRUCTURE = (BackendError, ConflictError)
"""Errors of the store, not of a step: never retried by a step's policy, never a reason to fail
a request."""


def tried(
    given: Given, cursor: Cursor, retry: StepRetry | None, attempt: Callable[[bool], Steps[Any]]
) -> Steps[Any]:
    """``attempt(False)`` (``False``: not an attempt after a failed one), or under a policy that
    retries here, :func:`_in_place` (a plain function: no generator frame of its own)."""
    if retry is None or not given.plan.retry_in_place:
        return attempt(False)
    return _in_place(given, cursor, retry, attempt)


def _in_place(
    given: Given, cursor: Cursor, retry: StepRetry, attempt: Callable[[bool], Steps[Any]]
) -> Steps[Any]:
    """``attempt`` until it returns or ``retry`` ends (then its error is raised), waiting the
    policy's backoff between attempts (under a test's :class:`SkippingClock`, counted as time
    tried without a wait)."""
    skipping = isinstance(given.clock, SkippingClock)
    step, failures, first, skipped = cursor.step, 0, time.monotonic(), 0.0
    while True:
        cursor.revisit(step)
        try:
            return (yield from attempt(failures > 0))
        except (NonDeterminismError, LimitReachedError, *INFRASTRUCTURE):  # not the step's failure
            raise
        except Exception as exc:
            failures += 1
            elapsed = time.monotonic() - first + skipped
            wait = retry.next_delay(failures, exc, elapsed=elapsed)
            budget = given.plan.in_place_for
            # An operator waits for the undo, not for a notification: on_abort is tried once.
            if wait is None or (budget is not None and (cursor.cleaning or elapsed + wait > budget)):
                raise
            if skipping:  # a test's clock: the backoff counts as time tried, without a wait
                skipped += wait
            else:
                yield Sleep(wait, given.policy.conflicts.sleep)
