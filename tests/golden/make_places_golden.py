"""Golden rows of requests that name their steps' places (``python -m tests.golden.make_places_golden OUT``).

Format revision 6 (release 1.1.0) names where a request's atomic steps keep their memos (``pl``, ``sn``: the
completion record, a worker's rewrite of a waiting request, and the places row a submission's
checkpoint writes beside the record, ``m<workflow>|<request>|j``), so ``runs show`` lists every
step without the workflow's code. Requests outlive a release, so their rows are pinned in every
state that names places: ``done-dora`` finished under ``run``, ``queue-quill`` submitted and
queued at its checkpoint, ``nap-nora`` asleep on a timer a worker set after two steps of its own
on a new table. ``tests/test_golden.py`` loads them into every store, lists their steps without
the code, finishes them on this version and lists them again.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import atomic, checkpoint, effect, now, run, sleep, workflow
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue, Worker
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""

NAP = 600.0
"""How long ``nap-nora`` sleeps after its steps under a worker."""


@workflow("g-place")
def placed(who: str, nap: bool) -> Any:
    yield atomic("tablea", who, lambda tx: tx.increment("paid"), name="pay")
    yield atomic("tableb", who, lambda tx: tx.put("note", "paid"), name="note")
    yield now()
    yield checkpoint()
    yield effect(lambda key: "mailed " + who, name="mail")
    yield atomic("tableb", who + "-ship", lambda tx: tx.increment("shipped"), name="ship")
    if nap:
        yield sleep(NAP)
    yield atomic("tablea", who, lambda tx: tx.increment("done"), name="done")
    return "done " + who


WORKFLOWS = [placed]

STEPS = [
    (1, "atomic", "pay", "tablea", ""),
    (2, "atomic", "note", "tableb", ""),
    (3, "now", "", "idemflowruns", None),
    (4, "effect", "mail", "idemflowruns", None),
    (5, "atomic", "ship", "tableb", "-ship"),
]
"""Every request's steps up to its timer, as ``(number, kind, name, table, partition suffix)``: the
partition is the request's name plus the suffix, or the request id (None: beside its record)."""


def main(out: str) -> None:
    clock = lambda: NOW  # noqa: E731
    seen = [NOW]  # the queue's clock, moved past the nap to take its timer too
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: seen[0])
    run(placed("dora", False), request_id="done-dora", store=store, clock=clock)
    submit(placed("nora", True), request_id="nap-nora", store=store, queue=queue, clock=clock)
    Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None).handle(queue.receive()[0])
    submit(placed("quill", False), request_id="queue-quill", store=store, queue=queue, clock=clock)
    store.flush()
    seen[0] = NOW + NAP
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
