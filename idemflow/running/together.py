"""``all_of`` and ``any_of``: a workflow doing several things at once.

``quotes = yield all_of(effect(ask_a), effect(ask_b), effect(ask_c))`` makes the three calls
concurrently (threads under :func:`~idemflow.run` and workers, tasks under
:func:`~idemflow.arun` and the asyncio worker) and returns their results in order;
``index, value = yield any_of(receive("approval"), sleep(3600))`` goes on with the first of
its branches to end: ``(0, message)`` or ``(1, None)`` after an hour. Each branch is the step
it would be alone, memoized under its own step number and, for an effect, its own
idempotency key and retry policy, so a replay after a crash in the middle makes no call whose
answer was kept (:mod:`idemflow.engine.together`).

Branches: an outside call (:func:`~idemflow.effect`), a child's outcome
(:func:`~idemflow.wait`), a message (:func:`~idemflow.receive`, with or without a timeout) and,
in ``any_of`` only, a timer (:func:`~idemflow.sleep`, :func:`~idemflow.sleep_until`: a
timeout). Anything else is refused before anything is written: start a child first, then wait
for it in a branch.

>>> from idemflow import effect, run, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("quotes")
... def quotes(item):
...     return (yield all_of(*(effect(lambda key, n=n: n * 10, name=f"quote-{n}") for n in (1, 2, 3))))
>>> run(quotes("lamp"), request_id="q-1", store=MemoryStore())
[10, 20, 30]
"""

from __future__ import annotations

from typing import Any

from idemflow.engine.monad import (
    AllOf,
    AnyOf,
    Bind,
    Branch,
    ContinueAsNew,
    Deadline,
    Effect,
    Idem,
    Receive,
    TimedReceive,
    Timer,
    WaitFor,
)
from idemflow.errors import ContinueAsNewError, InvalidInputError
from idemflow.running.coordination import SLEEP_LABEL, TIMEOUT_LABEL

__all__ = ["all_of", "any_of"]

_KINDS = "effect(...), wait(child) or receive(topic)"


def all_of(*steps: Idem[Any]) -> Idem[list[Any]]:
    """Run ``steps`` concurrently; their results, in the order given, once every one ended.

    Each step is an outside call, a wait for a child or a receive. A step that fails (after
    its own retry policy) is the ``all_of``'s failure, as it would be alone: the calls already
    made are memoized first, and none not made yet is made. The calls' compensations run if
    the request is undone.

    >>> all_of()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: all_of() needs at least one step: effect(...), ...
    """
    return Idem(AllOf(_branches("all_of", steps, timers=False)))


def any_of(*steps: Idem[Any]) -> Idem[tuple[int, Any]]:
    """Run ``steps`` concurrently until the first ends: ``(index, value)`` of that one.

    Besides the steps :func:`all_of` takes, a ``sleep``/``sleep_until`` makes a timeout:
    ``any_of(wait(child), sleep(60))`` is ``(1, None)`` once a minute passed first. Which one
    ended first is decided once, in the same commit as its memo, so every execution and every
    replay returns the same index; the other branches are abandoned where they stand (a call
    in flight is not waited for: its answer is dropped, and its compensation, if it has one,
    runs with None if the request is undone). A branch that fails first is the ``any_of``'s
    failure.

    >>> from idemflow import effect
    >>> any_of(effect(lambda key: 1), "later")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: any_of() takes steps, not str (argument 2): effect(...), ...
    """
    return Idem(AnyOf(_branches("any_of", steps, timers=True)))


def _branches(what: str, steps: tuple[Any, ...], *, timers: bool) -> tuple[Branch, ...]:
    """The branches ``steps`` describe, each checked before anything is written."""
    kinds = _KINDS.replace(" or ", ", ") + " or sleep(seconds)" if timers else _KINDS
    if not steps:
        raise InvalidInputError(f"{what}() needs at least one step: {kinds}")
    if len(steps) == 1 and isinstance(steps[0], list | tuple):
        raise InvalidInputError(f"{what}() takes the steps as arguments: {what}(*steps), not {what}([...])")
    return tuple(_branch(what, position, step, kinds, timers) for position, step in enumerate(steps, 1))


def _branch(what: str, position: int, step: object, kinds: str, timers: bool) -> Branch:
    if not isinstance(step, Idem):
        raise InvalidInputError(
            f"{what}() takes steps, not {type(step).__name__} (argument {position}): {kinds}"
        )
    node = step.node
    match node:
        case Effect() | WaitFor() | Receive():
            return node
        case Bind(Deadline(label=label) as deadline) if label.startswith(TIMEOUT_LABEL):
            return TimedReceive(deadline, label[len(TIMEOUT_LABEL) :])
        case Bind(Deadline(label=label) as deadline) if label == SLEEP_LABEL:
            if not timers:
                raise InvalidInputError(
                    f"{what}() waits for every step: a sleep there only delays it (argument {position}); "
                    "sleep before or after it, or use any_of(..., sleep(seconds)) as a timeout"
                )
            return Timer(deadline)
    if isinstance(node, ContinueAsNew):
        raise ContinueAsNewError(
            f"beside other steps in {what}() (argument {position}): it ends the incarnation"
        )
    shown = _SHOWN.get(type(node).__name__, type(node).__name__.lower())
    hint = " (start the child first, then wait for it in a branch)" if shown == "start" else ""
    raise InvalidInputError(
        f"{what}() cannot run this step beside others (argument {position}, {shown}){hint}: it takes {kinds}"
    )


_SHOWN = {"AllOf": "all_of", "AnyOf": "any_of", "Bind": "a chain of steps", "Call": "a workflow call"}
"""What a refused step is called in the error, where its node's name would not say."""
