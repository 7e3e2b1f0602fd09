"""The one loop that runs a sans-I/O computation: send each answer in, or throw its error in.

The step engine (:mod:`idemflow.core.requests`), the stores' SDK calls and the queues'
SDK calls are all generators that yield what they need and are sent the
answer. :func:`trampoline` runs one with a blocking ``answer`` function,
:func:`atrampoline` with an awaited one; an exception raised while answering
is thrown back in where the computation asked, so it handles the error as if
it had made the call itself (cancellation and interrupts too: its ``finally``
blocks run).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

Q = TypeVar("Q")
T = TypeVar("T")


def trampoline(steps: Generator[Q, Any, T], answer: Callable[[Q], Any]) -> T:
    """Run ``steps`` to their value, answering each request with ``answer(request)``."""
    value: Any = None
    failure: BaseException | None = None
    while True:
        try:
            request = steps.send(value) if failure is None else steps.throw(failure)
        except StopIteration as stop:
            result: T = stop.value
            return result
        value = failure = None
        try:
            value = answer(request)
        except BaseException as exc:  # noqa: BLE001 - thrown back where the computation asked
            failure = exc


async def atrampoline(steps: Generator[Q, Any, T], answer: Callable[[Q], Awaitable[Any]]) -> T:
    """:func:`trampoline` with each answer awaited (on an event loop)."""
    value: Any = None
    failure: BaseException | None = None
    while True:
        try:
            request = steps.send(value) if failure is None else steps.throw(failure)
        except StopIteration as stop:
            result: T = stop.value
            return result
        value = failure = None
        try:
            value = await answer(request)
        except BaseException as exc:  # noqa: BLE001 - thrown back where the computation asked
            failure = exc
