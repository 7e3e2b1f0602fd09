"""Write the golden rows of events and streams: ``python -m tests.golden.make_events_golden OUT``.

A request publishes while it runs (``set_event``, ``write_stream``, ``close_stream``): its
readers, and the request itself when a worker resumes it, depend on those rows across releases.
So they are pinned as the first releases' rows are (``make_golden.py``): a request that finished
(its event set twice, its stream closed) and one submitted and caught at its checkpoint (its
event set, one value of its stream written, the rest for a worker). ``tests/test_golden.py`` loads
them into every store: readers read both, and this version's worker finishes the second at the
next offset.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import checkpoint, close_stream, run, set_event, workflow, write_stream
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""


@workflow("g-publisher")
def publisher(who: str) -> Any:
    yield set_event("stage", "accepted")
    yield write_stream("log", "accepted " + who)
    yield checkpoint()
    yield write_stream("log", "shipped " + who)
    yield set_event("stage", "shipped")
    yield close_stream("log")
    return "published " + who


WORKFLOWS = [publisher]


def main(out: str) -> None:
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: NOW)
    clock = lambda: NOW  # noqa: E731
    run(publisher("dot"), request_id="done-dot", store=store, clock=clock)
    submit(publisher("oli"), request_id="open-oli", store=store, queue=queue, clock=clock)
    store.flush()
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
