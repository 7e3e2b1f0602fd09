"""An effect's limit group, held around its outside call alone (``effect(..., group=)``).

A workflow's limits are held for a whole execution; a provider's contract is about calls, so
a group named by an effect is taken just before the call is made and given back as soon as the
call is over at the provider (:func:`call_over`); a call that may still be running there keeps
its slot until the slot's lease ends by itself. Only a call that is really made takes it: a
replay answered by the memo, or a racing execution answered by the holder of the effect's
lease, takes nothing (the stepper asks for room only after both). No store call happens while
the provider works, so the slot's lease is not renewed during the call: the group's lease must
outlast it (``effect`` refuses a ``timeout=`` longer than the lease).

A full group is waited out as the execution waits for time: under workers and ``submit`` the
rest of the request becomes a continuation due when the group may have room (never an
attempt; the run record says what it waits for); under ``run`` in place, for at most
:data:`IN_PLACE_WAIT` seconds (less if the caller's own time is shorter: a Lambda
invocation's), then :class:`~idemflow.errors.LimitReachedError`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from idemflow.core.limit_spec import Limit, limit_whys
from idemflow.core.plan import JournalEntry
from idemflow.core.requests import Sleep, Steps
from idemflow.core.step_retry import StepRetry
from idemflow.engine.given import Given
from idemflow.engine.run_record import RunRecorder
from idemflow.errors import LimitReachedError
from idemflow.limits.slots import acquire

IN_PLACE_WAIT = 30.0
"""Seconds ``run`` waits in place, in all, for an effect's group to have room."""


MAY_STILL_RUN: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError)
"""Failures that say the request may have reached the provider and still be worked on, whatever
a policy says of them: a timeout (``EffectTimeoutError``, ``socket.timeout``, asyncio's) or a
connection that broke (reset, aborted, refused after a retry sent it)."""


def call_over(error: Exception, retry: StepRetry | None) -> bool:
    """Whether a call that raised ``error`` is over at the provider, so its slot is given back
    at once. Only the user can know: an exception is taken as the provider's answer (a refusal,
    a decline) when the step's policy (``effect(..., retry=)``, else the workflow's) names it
    ``non_retryable`` and it is not one of :data:`MAY_STILL_RUN`. Anything else (a timeout of
    any HTTP library, a broken connection, an exception nobody declared) may have left the call
    running at the provider: its slot stays taken until its lease ends, which outlasts the call
    (:func:`~idemflow.core.limit_spec.effect_group`), so the group never lets one call too many in.

    >>> declined = StepRetry(non_retryable=(KeyError, TimeoutError))
    >>> call_over(KeyError("card"), declined), call_over(KeyError("card"), None)
    (True, False)
    >>> call_over(TimeoutError(), declined), call_over(ConnectionResetError(), declined)
    (False, False)
    """
    if retry is None or not isinstance(error, retry.non_retryable):
        return False
    return not isinstance(error, MAY_STILL_RUN)


def room(
    given: Given,
    recorder: RunRecorder,
    journal: Callable[[], tuple[JournalEntry, ...]],
    group: Limit,
    since: float,
) -> Steps[str | None]:
    """The token holding ``group`` for one call, or None once this execution waited here for
    room (the caller looks again, from the effect's lease). ``since``: ``time.monotonic()`` when
    the effect first asked. A full group hands the request over (raises ``Suspended``) where
    the plan suspends, and raises ``LimitReachedError`` once ``run``'s wait is spent."""
    plan, token = given.plan, secrets.token_hex(8)
    full = yield from acquire((group,), token, given.clock)
    if full is None:
        if plan.no_longer_waiting is not None:
            yield from plan.no_longer_waiting(limit_whys((group,)))
        return token
    if plan.suspend:
        yield from recorder.hand_over(journal(), given.clock() + full.retry_after, full.why)
    budget = IN_PLACE_WAIT if plan.in_place_for is None else min(IN_PLACE_WAIT, plan.in_place_for)
    if time.monotonic() - since + full.retry_after > budget:
        raise LimitReachedError(given.workflow, given.request_id, full.why, full.retry_after)
    yield Sleep(full.retry_after, given.policy.conflicts.sleep)
    return None
