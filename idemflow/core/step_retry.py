"""How a step or an outside call that raises is tried again: :class:`StepRetry`.

Outside services fail for seconds or minutes at a time (a deploy, a
throttle, a network cut). A request that gave up after a few quick
redeliveries would turn every such blip into a failed booking, so the
policy is about *time*: attempts are spaced by a capped exponential backoff
and go on until the policy's expiry (a day by default) or its attempt
limit. Only an exception of a type named non-retryable, an error of the
library itself (invalid input, non-determinism) or the policy's end fails
the request.

Where the attempts happen depends on who runs the request:

- under :func:`idemflow.run` / :func:`idemflow.arun` (the caller waits), an
  explicit policy — on the call (``effect(..., retry=)``,
  ``atomic(..., retry=)``) or on the workflow (``@workflow(..., retry=)``) —
  retries in place; without one the step's error reaches the caller at once,
  as the caller is the retry layer there;
- under workers, every step has a policy (the call's, else the workflow's,
  else :data:`DEFAULT_STEP_RETRY`) and each next attempt is a delayed
  continuation whose attempt count lives in the run record, so restarts,
  redeliveries and duplicate messages neither shorten nor multiply it.

>>> policy = StepRetry(initial=1.0, backoff=2.0, maximum_interval=5.0, maximum_attempts=5)
>>> [policy.delay(attempt) for attempt in range(1, 5)]
[1.0, 2.0, 4.0, 5.0]
>>> policy.next_delay(5, ConnectionError("down"), elapsed=10.0) is None  # attempts spent
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenacity import wait_exponential

from idemflow.core.policy import backoff as _backoff
from idemflow.errors import EffectTimeoutError, IdemflowError, InvalidInputError
from idemflow.keys import check_duration

__all__ = ["DEFAULT_STEP_RETRY", "StepRetry"]


@dataclass(frozen=True, slots=True)
class StepRetry:
    """A retry policy for a step or an effect: capped exponential backoff until it ends.

    ``initial`` seconds before the second attempt, multiplied by ``backoff``
    each time, never more than ``maximum_interval``; at most
    ``maximum_attempts`` attempts in all (None: no limit) and no attempt
    starting later than ``expiry`` seconds after the first failure (None: no
    limit). An exception that is an instance of one of ``non_retryable`` ends
    the request at once (so does any :class:`~idemflow.errors.IdemflowError`
    a step raises: invalid input, non-determinism).

    >>> StepRetry(maximum_attempts=1).next_delay(1, TimeoutError(), elapsed=0.0) is None
    True
    """

    initial: float = 1.0
    backoff: float = 2.0
    maximum_interval: float = 300.0
    maximum_attempts: int | None = None
    expiry: float | None = 24 * 3600.0
    non_retryable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        check_duration(self.initial, "StepRetry initial")
        check_duration(self.maximum_interval, "StepRetry maximum_interval")
        if (
            isinstance(self.backoff, bool)
            or not isinstance(self.backoff, (int, float))
            or not (1.0 <= self.backoff < math.inf)
        ):
            raise InvalidInputError(f"StepRetry backoff must be a number >= 1, not {self.backoff!r}")
        attempts = self.maximum_attempts
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise InvalidInputError(
                f"StepRetry maximum_attempts must be a positive int or None, not {attempts!r}"
            )
        if self.expiry is not None:
            check_duration(self.expiry, "StepRetry expiry", zero=True)
        kinds = self.non_retryable
        if not isinstance(kinds, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in kinds
        ):
            raise InvalidInputError(
                f"StepRetry non_retryable must be a tuple of exception types, not {kinds!r}"
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first)."""
        wait = wait_exponential(multiplier=self.initial, exp_base=self.backoff, max=self.maximum_interval)
        return min(_backoff(wait, attempt), self.maximum_interval)

    def retryable(self, error: BaseException) -> bool:
        """May a step that raised ``error`` be tried again at all?"""
        if isinstance(error, IdemflowError) and not isinstance(error, EffectTimeoutError):
            return False
        return not isinstance(error, self.non_retryable)

    def next_delay(self, attempts: int, error: BaseException, *, elapsed: float) -> float | None:
        """Seconds until the next attempt after ``attempts`` failed ones, ``elapsed`` seconds after
        the first failure; None when the policy ends here."""
        if not self.retryable(error):
            return None
        if self.maximum_attempts is not None and attempts >= self.maximum_attempts:
            return None
        wait = self.delay(attempts)
        if self.expiry is not None and elapsed + wait > self.expiry:
            return None
        return wait


def check_retry(retry: object) -> StepRetry | None:
    """A step's or workflow's ``retry=``: a :class:`~idemflow.StepRetry` or None."""

    if retry is not None and not isinstance(retry, StepRetry):
        raise InvalidInputError(f"retry= takes a StepRetry or None, not {type(retry).__name__}")
    return retry


DEFAULT_STEP_RETRY = StepRetry()
"""What workers use for a step whose call and workflow name no policy: a transient outside
failure is retried for a day, at most every five minutes."""
