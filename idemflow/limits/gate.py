"""An execution under its workflow's limits: take them, run, renew the slots' leases, give back.

``run``, ``arun`` and a worker's delivery wrap the engine's computation with :func:`gated`, so
the blocking and asyncio drivers share it. Nothing of the request runs before its limits are
taken: a full limit raises :class:`~idemflow.errors.LimitReachedError` (``run`` passes it to its
caller; a worker turns it into a delayed continuation). The slots are given back however the
execution ends (finished, aborted, failed, suspended at a timer or a wait, a step's error) and
renewed between its store calls once a third of the shortest lease has passed; an execution
that is killed (or whose test simulates that: :class:`~idemflow.core.requests.ProcessDied`) keeps
them until its lease ends.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from idemflow.core.limit_spec import Limit
from idemflow.core.requests import ProcessDied, Steps
from idemflow.errors import IdemflowError, LimitReachedError
from idemflow.limits.slots import acquire, release, renew

T = TypeVar("T")

log = logging.getLogger("idemflow.limits")


def gated(
    inner: Steps[T],
    limits: Sequence[Limit],
    clock: Callable[[], float],
    *,
    workflow: str,
    request_id: str,
    on_held: Callable[[], Steps[Any]] | None = None,
) -> Steps[T]:
    """``inner`` run while holding ``limits`` (none: ``inner`` as it is); ``on_held`` runs first
    once they are held (a worker clears the note saying the request waited for them)."""
    if not limits:
        return (yield from inner)
    token = secrets.token_hex(8)
    full = yield from acquire(limits, token, clock)
    if full is not None:
        inner.close()
        raise LimitReachedError(workflow, request_id, full.why, full.retry_after)
    if on_held is not None:
        try:
            yield from on_held()
        except (GeneratorExit, ProcessDied):  # dropped or dead: the lease gives the slots back
            raise
        except BaseException:
            yield from give_back(limits, token, clock)
            raise
    leases = [limit.concurrency.lease for limit in limits if limit.concurrency is not None]
    if not leases:  # rates only: a token is spent, nothing is held
        return (yield from inner)
    every = min(leases) / 3.0
    try:
        result = yield from _renewing(inner, limits, token, clock, every, workflow, request_id)
    except (GeneratorExit, ProcessDied):  # the driver dropped us or died: the lease gives them back
        raise
    except BaseException:
        yield from give_back(limits, token, clock)
        raise
    yield from give_back(limits, token, clock)
    return result


def _renewing(
    inner: Generator[Any, Any, T],
    limits: Sequence[Limit],
    token: str,
    clock: Callable[[], float],
    every: float,
    workflow: str,
    request_id: str,
) -> Steps[T]:
    """Pass ``inner``'s requests through, renewing the leases before one once ``every`` passed."""
    renewed = clock()
    answer: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            request = inner.send(answer) if thrown is None else inner.throw(thrown)
        except StopIteration as stop:
            result: T = stop.value
            return result
        if clock() - renewed >= every:
            renewed = clock()
            try:
                kept = yield from renew(limits, token, clock)
            except IdemflowError as exc:  # the store: tried again a third of a lease later
                log.warning("could not renew the limits of %s %r (next time): %s", workflow, request_id, exc)
                kept = True
            if not kept:
                log.warning("%s %r lost a slot: its lease ended before it was renewed", workflow, request_id)
        try:
            answer, thrown = (yield request), None
        except GeneratorExit:
            inner.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - handed on to the engine where it asked
            answer, thrown = None, exc


def give_back(limits: Sequence[Limit], token: str, clock: Callable[[], float]) -> Steps[None]:
    """Give ``token``'s slots back; if the store cannot be reached, their leases will."""
    try:
        yield from release(limits, token, clock)
    except IdemflowError as exc:  # the lease gives them back
        log.warning("could not give back slots (their lease will): %s", exc)
