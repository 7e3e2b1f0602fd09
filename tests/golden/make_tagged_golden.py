"""Golden rows of tagged requests (``python -m tests.golden.make_tagged_golden OUT``).

Format revision 5 stores a request's tags in its run record (``tg``, ``submit(tags=)``,
``run(tags=)``), beside its status, so every rewrite of the record and its outcome keep them.
Requests outlive a release, so their rows are pinned in every state a record holds tags in:
``done-dan`` finished under ``run``, ``queue-quinn`` submitted and queued, ``nap-nell`` asleep on
a timer a worker set (the record rewritten with its continuation), ``cancel-cole`` cancelled by
an operator. ``tests/test_golden.py`` loads them into every store, lists them by tag, finishes
them on this version and lists them again.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import atomic, checkpoint, run, sleep, workflow
from idemflow.admin import cancel
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue, Worker
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""

NAP = 600.0
"""How long ``nap-nell`` sleeps after its first step."""

TAGS = {
    "done-dan": {"customer": "c-1", "region": "eu"},
    "queue-quinn": {"customer": "c-1"},
    "nap-nell": {"customer": "c-2", "region": "eu"},
    "cancel-cole": {"customer": "c-1", "order": "o:7"},
}
"""The tags each request was started with."""


@workflow("g-tag")
def tagged(who: str, nap: bool) -> Any:
    yield atomic("tablea", who, lambda tx: tx.increment("paid"), name="pay")
    yield checkpoint()
    if nap:
        yield sleep(NAP)
    yield atomic("tablea", who, lambda tx: tx.increment("shipped"), name="ship")
    return "shipped " + who


WORKFLOWS = [tagged]


def main(out: str) -> None:
    clock = lambda: NOW  # noqa: E731
    seen = [NOW]  # the queue's clock, moved past the nap to take its timer too
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: seen[0])
    run(tagged("dan", False), request_id="done-dan", store=store, clock=clock, tags=TAGS["done-dan"])
    submit(
        tagged("nell", True),
        request_id="nap-nell",
        store=store,
        queue=queue,
        clock=clock,
        tags=TAGS["nap-nell"],
    )
    Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None).handle(queue.receive()[0])
    for who, request_id in (("quinn", "queue-quinn"), ("cole", "cancel-cole")):
        submit(
            tagged(who, False),
            request_id=request_id,
            store=store,
            queue=queue,
            clock=clock,
            tags=TAGS[request_id],
        )
    cancel(store, "g-tag", "cancel-cole", reason="checking")
    store.flush()
    seen[0] = NOW + NAP
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
