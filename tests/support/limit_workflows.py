"""Workflows under limits that count themselves in an outside table, for worker processes
(``idemflow worker tests.support.limit_workflows:WORKFLOWS``).

The outside table is a SQLite file named by ``CHAOS_LIMITS_FILE`` (the chaos workload's count,
:mod:`samples.chaos.limits_flows`), outside the store: for each kind of call (``pair``: inside a
workflow limited to 2; ``provider``: inside a call whose effect names a group of 2, from two
workflows), ``inside`` is how many are between their
entry and their exit right now and ``peak`` the most there ever were; ``open`` lists who is
inside, by process, so a test that SIGKILLs a process takes its entries out (a dead process is
inside nothing); ``starts`` keeps each paced request's start time, as its ``now()`` step read it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

from idemflow import Concurrency, LimitGroup, Rate, atomic, checkpoint, effect, now, workflow
from idemflow.testing import SimulatedCrash
from samples.chaos import limits_flows as count
from samples.chaos.limits_flows import FILE_ENV, connect, holders, stats, take_out

__all__ = ["FILE_ENV", "connect", "holders", "stats", "take_out"]

KINDS = ("pair", "provider")
LEASE = 6.0
"""The pair's lease: a SIGKILLed holder's slot is free this long after its last renewal. Not
shorter: moto serves one call at a time, and under the workers' threads one call can wait seconds,
which a holder must not spend past its lease (docs/flow-control.md)."""
INSIDE = 0.15
"""Seconds an execution of the pair stays inside: long enough for the workers' threads to pile up."""
PATIENCE = LEASE / 3
"""Seconds at most an entry then waits for a second one inside, until two were inside at once:
the test demands a peak of 2, which a loaded machine may never overlap by chance (each call
done before the next enters). Well inside the lease: a waiter's slot is not renewed during its
call, and a slot that ended under it would let a third one in. An entry that waited in vain
leaves; the next one waits again, and the test submits more until two met (a liveness figure
waited for, not hoped for)."""


def create(path: str) -> None:
    count.create(path, KINDS)
    with connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS starts (n INTEGER PRIMARY KEY, at REAL)")


def _inside(key: str) -> str:
    return count.counted("pair", key, INSIDE, company=2, patience=PATIENCE)


def _provider(key: str) -> str:
    return count.counted("provider", key, INSIDE, company=2, patience=PATIENCE)


@workflow("pair", concurrency=Concurrency(2, lease=LEASE))
def pair(n: int) -> Generator[Any, Any, int]:
    """Never more than two requests inside, across every process sharing the store."""
    yield effect(_inside)
    yield atomic("tablea", f"pair{n}", lambda tx: tx.increment("done"))
    return n


def _started(n: int, at: float) -> Any:
    def record(key: str) -> None:
        db = connect()
        try:
            db.execute("INSERT OR IGNORE INTO starts VALUES (?, ?)", (n, at))
        finally:
            db.close()

    return effect(record)


PACE = Rate(2, per=1.0)
"""Slow enough that a dozen requests span 5 s of tokens, so a limiter that held nothing shows:
waiters look again at each refill, so the cost grows with the square of the requests held back."""


@workflow("paced", rate=PACE)
def paced(n: int) -> Generator[Any, Any, int]:
    """At most two starts a second, plus the burst of two."""
    at = yield now()
    yield _started(n, at)
    yield atomic("tablea", f"paced{n}", lambda tx: tx.increment("done"))
    return n


PROVIDER = LimitGroup("provider", concurrency=Concurrency(2, lease=LEASE))
"""A provider taking two calls at once, from every workflow that calls it."""


@workflow("booking")
def booking(n: int) -> Generator[Any, Any, int]:
    """Two calls inside the provider at most, with the booking's other steps outside it."""
    yield atomic("tablea", f"booking{n}", lambda tx: tx.increment("held"))
    yield checkpoint()  # the rest is the workers'
    yield effect(_provider, group=PROVIDER)
    yield atomic("tablea", f"booking{n}", lambda tx: tx.increment("done"))
    return n


@workflow("refunding")
def refunding(n: int) -> Generator[Any, Any, int]:
    """The same provider, from another workflow."""
    yield checkpoint()
    yield effect(_provider, group=PROVIDER)
    yield atomic("tablea", f"refunding{n}", lambda tx: tx.increment("done"))
    return n


WORKFLOWS = [pair, paced, booking, refunding]


READY_ENV = "IDEMFLOW_TEST_HELD_READY"
"""A file the call of :func:`held` writes once it is inside, for the test that SIGKILLs it there."""
HELD_LEASE = 30.0
"""Long enough that the slots a killed holder leaves are still held when the test reads them."""
HELD_PROVIDER = LimitGroup("held-provider", concurrency=Concurrency(1, lease=HELD_LEASE))


def _held_call(how: str) -> str:
    """Inside the provider: ``wait`` to be SIGKILLed here, ``crash`` to simulate that, or
    ``return`` (the test's ``FaultyStore`` crashes at the next commit)."""
    if how == "crash":
        raise SimulatedCrash("the process died inside the call")
    if how == "wait":
        Path(os.environ[READY_ENV]).write_text("inside")
        threading.Event().wait(120)  # until the SIGKILL
    return how


@workflow("held-slots", concurrency=Concurrency(1, lease=HELD_LEASE))
def held(how: str) -> Generator[Any, Any, str]:
    """Dies inside (or just out of) a call holding its workflow's slot and a provider's slot."""
    yield atomic("tablea", "held", lambda tx: tx.increment("before"))
    answer: str = yield effect(lambda key: _held_call(how), name="inside", group=HELD_PROVIDER)
    return answer
