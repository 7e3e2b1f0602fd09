"""Requests carried out side by side: the drivers' half of ``all_of`` and ``any_of``.

A branch of ``all_of`` or ``any_of`` asks for its outside call (or a wait it sits out) with
:class:`~idemflow.core.requests.Launch` instead of the plain request: the driver starts it and
answers at once with a flight, so the next branch can launch its own. ``Collect`` then waits for
the first of them to land, and ``Abandon`` lets go of those no one waits for any more. The
blocking driver flies each request on a daemon thread of its own (a call nobody waits for any
more goes on to its end, its answer dropped, as a timed-out effect's does); the asyncio driver
as a task on the loop (cancelled when abandoned). Flights are the drivers' own objects: the
engine only hands them back.

Each landing takes the next number of one counter, so a ``Collect`` answers in the order the
requests really ended: that order is what ``any_of`` calls "first".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from idemflow.core.requests import Landed

_LANDINGS = itertools.count()
"""The order flights land in (``next`` on a count is atomic)."""

_Landing = tuple[int, Landed]


def launch(answer: Callable[[], Any]) -> concurrent.futures.Future[_Landing]:
    """``answer()`` on a daemon thread of its own; the flight is the future of what it gave."""
    flight: concurrent.futures.Future[_Landing] = concurrent.futures.Future()

    def fly() -> None:
        try:
            landed = Landed(answer())
        except BaseException as exc:  # noqa: BLE001 - handed back to the branch that asked
            landed = Landed(error=exc)
        flight.set_result((next(_LANDINGS), landed))

    threading.Thread(target=fly, name="idemflow-branch", daemon=True).start()
    return flight


def collect(flights: Sequence[concurrent.futures.Future[_Landing]]) -> list[tuple[Any, Landed]]:
    """Wait for at least one of ``flights``; those that landed, in the order they did."""
    done, _ = concurrent.futures.wait(flights, return_when=concurrent.futures.FIRST_COMPLETED)
    return _in_order((flight, flight.result()) for flight in done)


def alaunch(answer: Awaitable[Any]) -> asyncio.Task[_Landing]:
    """``answer`` as a task on the running loop; the flight is the task."""

    async def fly() -> _Landing:
        try:
            landed = Landed(await answer)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed back to the branch that asked
            landed = Landed(error=exc)
        return next(_LANDINGS), landed

    return asyncio.ensure_future(fly())


async def acollect(flights: Sequence[asyncio.Task[_Landing]]) -> list[tuple[Any, Landed]]:
    """:func:`collect` on the loop; a caller cancelled while it waits cancels the flights too."""
    try:
        done, _ = await asyncio.wait(flights, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        abandon(flights)
        raise
    return _in_order((flight, flight.result()) for flight in done)


def abandon(flights: Sequence[Any]) -> None:
    """Cancel the tasks among ``flights`` (a thread cannot be stopped: its answer is dropped)."""
    for flight in flights:
        if isinstance(flight, asyncio.Task):
            flight.cancel()


def _in_order(landings: Any) -> list[tuple[Any, Landed]]:
    ordered = sorted(landings, key=lambda pair: pair[1][0])
    return [(flight, landed) for flight, (_, landed) in ordered]


__all__ = ["abandon", "acollect", "alaunch", "collect", "launch"]
