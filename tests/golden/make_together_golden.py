"""Golden rows of ``all_of`` and ``any_of`` requests (``python -m tests.golden.make_together_golden OUT``).

A block of branches keeps one memo per branch (an effect's beside the run record, numbered in
argument order) and, for an ``any_of``, a decision memo after them (``{"id": "any_of", "v":
index}``), committed with the winner's. Requests outlive a release, so their rows are pinned
in every state a block leaves them: ``all-half``, run and dead after two of its three calls
were memoized; ``any-done``, finished; ``any-decided``, dead right after its decision;
``any-nap`` and ``any-note``, submitted and waiting in ``any_of(receive, sleep)`` on a worker
(``any-note``'s message already in its inbox). ``tests/test_golden.py`` loads them into every
store and finishes each once on this version, calling only what no memo answers.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from typing import Any

from idemflow import all_of, any_of, checkpoint, effect, receive, run, send, sleep, workflow
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.testing import FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue, Worker
from tests.golden.make_golden import write_golden
from tests.support.together import crash_after

NOW = 1_800_000_000.0
"""The clock the rows were written under."""

NAP = 600.0
"""How long the waiting ones wait for their message."""

CALLS: Counter[str] = Counter()
"""The calls made, by name (the test counts the ones this version makes)."""


def quote(name: str, price: int) -> Any:
    def call(key: str) -> dict[str, Any]:
        CALLS[name] += 1
        return {"from": name, "price": price}

    call.__qualname__ = name
    return call


@workflow("g-all")
def quotes(who: str) -> Any:
    got = yield all_of(effect(quote("a", 3)), effect(quote("b", 1)), effect(quote("c", 2)))
    return min(quote["price"] for quote in got)


@workflow("g-any")
def first(who: str) -> Any:
    index, got = yield any_of(effect(quote("x", 5)), effect(quote("y", 6)))
    return [index, got["from"]]


@workflow("g-wait")
def waiting(who: str) -> Any:
    yield checkpoint()
    index, note = yield any_of(receive("note"), sleep(NAP))
    return [index, note]


WORKFLOWS = [quotes, first, waiting]


def main(out: str) -> None:
    clock = lambda: NOW  # noqa: E731
    seen = [NOW]  # the queue's clock, moved past the wait to take the timers' continuations too
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: seen[0])
    with contextlib.suppress(SimulatedCrash):
        run(
            quotes("ann"),
            request_id="all-half",
            store=FaultyStore(store, crash_after("effect", 2)),
            clock=clock,
        )
    run(first("bo"), request_id="any-done", store=store, clock=clock)
    with contextlib.suppress(SimulatedCrash):
        run(
            first("cy"),
            request_id="any-decided",
            store=FaultyStore(store, crash_after("any_of", 1)),
            clock=clock,
        )
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    for request_id in ("any-nap", "any-note"):
        submit(waiting(request_id), request_id=request_id, store=store, queue=queue, clock=clock)
        worker.handle(queue.receive()[0])  # waiting for its note or its time
    run(send("g-wait", "any-note", "note", "hello"), request_id="note-to-any", store=store, clock=clock)
    store.flush()
    seen[0] = NOW + NAP
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
