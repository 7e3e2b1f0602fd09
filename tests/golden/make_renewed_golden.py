"""Golden rows of requests that continued as new (``python -m tests.golden.make_renewed_golden OUT``).

Format revision 7 (release 1.2.0): a request that continued as new keeps one run record whose
incarnation ``i`` ends in ``g<number>`` (its memos carry the same), with the current
incarnation's input in ``in``; the memos its earlier incarnation left stand at their step numbers
until the next incarnation replaces them. Pinned: ``done-rita``, three incarnations run to the end
under ``run``; ``nap-nina``, submitted and caught asleep on a worker's timer in its second
incarnation, its first incarnation's memos still beside it. ``tests/test_golden.py`` loads them
into every store, answers the finished one, finishes the other exactly once and checks the count.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import atomic, checkpoint, continue_as_new, run, sleep, workflow
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue, Worker
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""
NAP = 600.0
"""How long each incarnation sleeps."""


class Skipping:
    """A clock that a ``run``'s timer moves on to its end."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now

    def skip_to(self, when: float) -> None:
        self.now = max(self.now, when)


@workflow("g-renew")
def renewing(who: str, period: int, last: int) -> Any:
    yield checkpoint()
    yield atomic("tablea", who, lambda tx: tx.increment("paid"), name="pay")
    yield sleep(NAP)
    if period < last:
        yield continue_as_new(who, period + 1, last)
    return f"renewed {who} {period}"


WORKFLOWS = [renewing]


def main(out: str) -> None:
    store = MemoryStore()
    run(renewing("rita", 1, 3), request_id="done-rita", store=store, clock=Skipping())
    seen = [NOW]
    queue = MemoryQueue(clock=lambda: seen[0])
    submit(renewing("nina", 1, 3), request_id="nap-nina", store=store, queue=queue, clock=lambda: NOW)
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=lambda: seen[0], relay_every=None)
    worker.handle(queue.receive()[0])  # the first incarnation's pay, then its timer
    seen[0] = NOW + NAP
    worker.handle(queue.receive()[0])  # the switch: the second incarnation queued
    worker.handle(queue.receive()[0])  # its pay, then its timer
    store.flush()
    seen[0] = NOW + 3 * NAP
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
