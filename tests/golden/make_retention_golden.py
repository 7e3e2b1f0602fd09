"""Golden rows of requests submitted with a retention (``python -m tests.golden.make_retention_golden OUT``).

Format revision 5 stores a submitted request's retention with its input (``in.rn``), so the
workers and operators that write for it later keep its rows as long as its submitter asked.
Requests outlive a release, so their rows are pinned while they wait: ``keep-kim`` paid and is
queued for the rest, ``cancel-ken`` paid and was cancelled by an operator; both were submitted
with a retention of :data:`RETENTION` seconds. ``tests/test_golden.py`` loads them into every
store and finishes them on this version, under a worker whose own retention differs.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import RetryPolicy, atomic, checkpoint, workflow
from idemflow.admin import cancel
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""

RETENTION = 60.0
"""The retention both requests were submitted with."""


@workflow("g-keep")
def keeping(who: str) -> Any:
    yield atomic("tablea", who, lambda tx: tx.increment("paid"), name="pay")
    yield checkpoint()
    yield atomic("tablea", who, lambda tx: tx.increment("shipped"), name="ship")
    return "kept " + who


WORKFLOWS = [keeping]


def main(out: str) -> None:
    clock = lambda: NOW  # noqa: E731
    store, queue = MemoryStore(), MemoryQueue(clock=clock)
    policy = RetryPolicy(retention=RETENTION)
    submit(keeping("kim"), request_id="keep-kim", store=store, queue=queue, clock=clock, policy=policy)
    submit(keeping("ken"), request_id="cancel-ken", store=store, queue=queue, clock=clock, policy=policy)
    cancel(store, "g-keep", "cancel-ken", reason="checking")
    store.flush()
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
