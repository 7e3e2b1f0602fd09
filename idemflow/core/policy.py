"""How idemflow retries: until a deadline, never a fixed number of times.

Two things are retried. A **data conflict** (a body's reads went stale
before its commit) reruns the body, and so does a **transient store error**
inside a step (throttling, a timeout, a transaction conflict the backend
reports as such), on a read or on the step's commit — except an effect's
commit, which is resent as it is. Outside a step, a transient error
resends the same call (:meth:`RetryPolicy.resend`).
Both keep going, with jittered exponential backoff, until the step's
deadline (:attr:`RetryPolicy.deadline`, 30 s by default): on a hot
partition requests queue up and finish at the partition's serial rate
instead of failing after a few attempts. Only then does the caller get
:class:`~idemflow.errors.ConflictError` or
:class:`~idemflow.errors.TransientError`.

Every retry in the library goes through this module: the step engine, the
worker's bookkeeping writes, status reads and the stores' background cache
writes (:func:`resend`).

Both retryers are tenacity ``Retrying`` objects, so a caller can pass their
own wait, stop (combined with the deadline: whichever comes first) and
sleep (tests inject one that never waits). The defaults are shared safely:
a ``Retrying`` is only ever used through ``.copy()``.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any, ParamSpec, TypeVar

import tenacity
from tenacity import (
    AsyncRetrying,
    DoAttempt,
    DoSleep,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_never,
    wait_exponential,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from idemflow.core.requests import Backoff, Request, Sleep, Steps
from idemflow.errors import TransientError

P = ParamSpec("P")
T = TypeVar("T")
Y = TypeVar("Y")

DEADLINE = 30.0
"""Seconds a step keeps retrying by default (API gateways commonly give up after 29-30 s)."""


class DataConflict(Exception):
    """A body's reads went stale before its commit: run it again."""


class _StopAt(stop_base):
    """A tenacity stop: ``also`` (the caller's own stop), or no attempt after ``deadline``
    (a ``time.monotonic()`` value). Stops *before* a sleep that would end past the
    deadline, so the last attempt is never wasted waiting.
    """

    def __init__(self, deadline: float, also: Callable[[RetryCallState], bool]) -> None:
        self.deadline = deadline
        self.also = also

    def __call__(self, state: RetryCallState) -> bool:
        return self.also(state) or time.monotonic() + (state.upcoming_sleep or 0.0) >= self.deadline


def _default_conflict_retrying() -> Retrying:  # copied before every use: never iterated itself
    # Small waits, a low cap: on a hot row someone is always about to commit, so the
    # partition stays near its serial rate; the deadline, not the cap, bounds a request.
    return Retrying(
        stop=stop_never,
        wait=wait_random_exponential(multiplier=0.002, max=0.2),
        retry=retry_if_exception_type(DataConflict),
        reraise=True,
    )


def _default_transient_retrying() -> Retrying:
    return Retrying(
        stop=stop_never,
        wait=wait_random_exponential(multiplier=0.01, max=1.0),
        retry=retry_if_exception_type(TransientError),
        reraise=True,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an execution retries: data conflicts (the body reruns) and
    transient store errors (the same call is resent), both until ``deadline``.
    Pass your own tenacity ``Retrying`` objects to change waits, add a stop
    or replace the sleep.

    >>> RetryPolicy().deadline, RetryPolicy().retention / 86400
    (30.0, 7.0)
    """

    conflicts: Retrying = field(default_factory=_default_conflict_retrying)
    transient: Retrying = field(default_factory=_default_transient_retrying)
    retention: float = 7 * 24 * 3600.0
    """Seconds memo and run rows are kept where the backend expires rows (TTL), counted from wall time."""
    deadline: float = DEADLINE
    """Seconds one step (or one bookkeeping call) keeps retrying before the error reaches the caller."""

    def until(self) -> float:
        """The ``time.monotonic()`` deadline of a step starting now."""
        return time.monotonic() + self.deadline

    def rerunning(self, until: float) -> Retrying:
        """The conflict retryer of one step: reruns on data conflicts and transient errors."""
        base = self.conflicts
        return base.copy(
            stop=_StopAt(until, base.stop),
            retry=retry_if_exception_type((DataConflict, TransientError)),
        )

    def resending(self, until: float, give_up: Callable[[], bool] | None = None) -> Retrying:
        """The transient-error retryer of one call; it also stops once ``give_up()`` is true."""
        base = self.transient
        also = base.stop if give_up is None else (lambda state: give_up() or base.stop(state))
        return base.copy(stop=_StopAt(until, also))

    def resend(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``call(*args, **kwargs)``, resent on transient store errors until the deadline.

        For the library's calls outside a step (status reads, a worker's
        bookkeeping writes, cache writes): each is safe to resend (a read, or
        a write whose conditions make a second application a no-op or a conflict).
        """
        result: T = self.resending(self.until())(call, *args, **kwargs)
        return result

    async def aresend(self, call: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`resend` for a coroutine function: the same stop, wait and retry, awaited."""
        base = self.resending(self.until())
        retrying = AsyncRetrying(stop=base.stop, wait=base.wait, retry=base.retry, reraise=True)
        result: T = await retrying(call, *args, **kwargs)
        return result


DEFAULT_POLICY = RetryPolicy()


def kept_for(policy: RetryPolicy, retention: float | None) -> RetryPolicy:
    """``policy`` writing rows with a request's own retention (its run record's, from ``submit``),
    or unchanged for a request that carries none: whoever writes for a request afterwards (a
    worker, an operator's abort) keeps its rows as long as its submitter asked, not as long as
    that process's own policy says.

    >>> kept_for(DEFAULT_POLICY, 60.0).retention, kept_for(DEFAULT_POLICY, None) is DEFAULT_POLICY
    (60.0, True)
    """
    if retention is None or retention == policy.retention:
        return policy
    return replace(policy, retention=retention)


"""Shared safely: its ``Retrying`` objects are only ever used through ``.copy()``."""


def resend(call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """:meth:`RetryPolicy.resend` under :data:`DEFAULT_POLICY`."""
    return DEFAULT_POLICY.resend(call, *args, **kwargs)


def retried(retrying: Retrying, attempt: Callable[[], Generator[Y, Any, T]]) -> Generator[Y | Sleep, Any, T]:
    """Run the computation ``attempt()`` under ``retrying``, yielding its sleeps as :class:`Backoff`.

    The engine's computations and the stores' SDK calls alike: one retry loop for both.

    tenacity's own loop (``Retrying.__call__``) sleeps in place; the engine
    must *yield* its waits so a blocking run sleeps and an ``arun`` awaits.
    This is that loop, step for step, over tenacity's public ``iter`` protocol:
    the same stops, waits, statistics and re-raising.
    """
    retrying.begin()
    statistics = retrying.statistics
    state = RetryCallState(retrying, fn=None, args=(), kwargs={})
    while True:
        here = retrying.statistics
        if here is not statistics:  # resumed on another thread: tenacity keeps statistics per thread
            here.update(statistics)
            statistics = here
        do = retrying.iter(retry_state=state)
        if isinstance(do, DoAttempt):
            try:
                result = yield from attempt()
            except BaseException:  # noqa: BLE001 - judged by the retry predicate, re-raised by iter
                state.set_exception(sys.exc_info())  # type: ignore[arg-type]
            else:
                state.set_result(result)
        elif isinstance(do, DoSleep):
            state.prepare_for_next_attempt()
            yield Backoff(float(do), retrying.sleep)
        else:
            answer: T = do
            return answer


class _LastLookAt(tenacity.wait.wait_base):
    """``wait``, shortened so that the last look is made at ``deadline`` (monotonic) itself."""

    def __init__(self, deadline: float, wait: tenacity.wait.wait_base) -> None:
        self.deadline = deadline
        self.wait = wait

    def __call__(self, state: RetryCallState) -> float:
        return max(0.0, min(self.wait(state), self.deadline - time.monotonic()))


NOT_YET: Any = object()
"""What a look of :func:`polling` answers while the row it waits for is not there."""

FIRST_LOOK_AGAIN = 0.01
"""Seconds a reader waits before its second look at a row another request writes (then twice as
long after each look, up to its ``poll``)."""


def polling(until: float | None, longest: float) -> Retrying:
    """The retryer of a reader waiting for a row another request writes (an event, a stream's
    next value), on stores that cannot tell it: a look answering :data:`NOT_YET` is made again
    after :data:`FIRST_LOOK_AGAIN` seconds, then twice as long each time up to ``longest``, until
    the ``time.monotonic()`` deadline ``until`` (None: for as long as it takes), when the last
    look's :data:`NOT_YET` is the answer. Its waits are yielded (:func:`retried`), so a blocking
    reader sleeps and an asynchronous one awaits; an error of a look is raised at once.

    >>> [backoff(polling(None, 0.05).wait, attempt) for attempt in (1, 2, 3, 4)]
    [0.01, 0.02, 0.04, 0.05]
    """
    growing = wait_exponential(multiplier=FIRST_LOOK_AGAIN, max=longest)
    return Retrying(
        stop=stop_never if until is None else (lambda state: time.monotonic() >= until),
        wait=growing if until is None else _LastLookAt(until, growing),
        retry=retry_if_result(lambda answer: answer is NOT_YET),
        retry_error_callback=lambda state: NOT_YET,
        reraise=True,
    )


def backoff(wait: tenacity.wait.wait_base, attempt: int) -> float:
    """The seconds tenacity's ``wait`` gives before attempt ``attempt + 1``: for the loops that wait
    between looks rather than retry a call (a lease's holder, a message's redelivery), so their
    pacing is tenacity's too."""
    state = RetryCallState(_PACING, None, (), {})
    state.attempt_number = attempt
    return float(wait(state))


_PACING = Retrying()
"""The retryer :func:`backoff`'s call states name (a wait reads only the attempt number)."""


_BLOCKING_SLEEPS = (tenacity.nap.sleep, time.sleep)


def pause(request: Sleep) -> None:
    """Carry out a retry's wait on this thread, with the retryer's own sleep."""
    request.sleep(request.seconds)


async def apause(request: Sleep) -> None:
    """Carry out a retry's wait on an event loop: a blocking sleep becomes ``asyncio.sleep``; an
    injected one is called (and awaited if it returns an awaitable)."""
    if request.sleep in _BLOCKING_SLEEPS:
        await asyncio.sleep(request.seconds)
        return
    slept = request.sleep(request.seconds)
    if inspect.isawaitable(slept):
        await slept


def _once(request: Request) -> Steps[Any]:
    return (yield request)


def resent(retrying: Retrying, request: Request) -> Steps[Any]:
    """Send ``request`` until it gets an answer or ``retrying`` gives up."""
    return (yield from retried(retrying, lambda: _once(request)))


def resent_until_deadline(request: Request, policy: RetryPolicy = DEFAULT_POLICY) -> Steps[Any]:
    """``request`` resent on transient errors until ``policy``'s deadline from now: the library's
    bookkeeping outside a step, each request safe to resend (a read, or a write whose condition
    makes a second application a no-op or a conflict its caller reads)."""
    return resent(policy.resending(policy.until()), request)


def each_resent(steps: Steps[T], policy: RetryPolicy = DEFAULT_POLICY) -> Steps[T]:
    """``steps`` with each of its requests resent on transient errors
    (:func:`resent_until_deadline`); an error that stays, or any other, is thrown back into
    ``steps``, which decides."""
    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            request = steps.send(answer) if failure is None else steps.throw(failure)
        except StopIteration as done:
            value: T = done.value
            return value
        try:
            answer, failure = (yield from resent_until_deadline(request, policy)), None
        except Exception as exc:  # noqa: BLE001 - handed to the computation, which decides
            answer, failure = None, exc
