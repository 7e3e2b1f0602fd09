"""Write the golden rows of requests caught retrying: ``python -m tests.golden.make_retrying_golden OUT``.

Format revision 4 keeps a worker's retry count in the run record (``rt``) and memoizes the undo of
an outside call beside it. Requests retried for hours outlive a release, so their rows are pinned
at the moment they wait: ``retry-rae`` charged a card, then failed its next step twice (a policy of
three attempts: one is left); ``late-dee`` did the same under a deadline that has passed when the
rows are replayed; ``cancel-cal`` was cancelled by an operator; ``undo-uma`` charged a card, aborted
and refunded it. The rows are
loaded into every store by ``tests/test_golden.py``, which finishes them on this version: the card
is never charged or refunded again and the stored count is kept.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import StepRetry, abort, atomic, checkpoint, effect, workflow
from idemflow.admin import cancel
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue, Worker
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""

CALLS: dict[str, int] = {}
"""Outside calls made, by name: the replay must make none of the recorded ones again."""


def card(name: str) -> Any:
    def call(key: str) -> dict[str, str]:
        CALLS[name] = CALLS.get(name, 0) + 1
        return {"charge": name, "key": key[:8]}

    return call


def refund(key: str, charge: Any) -> str:
    CALLS["refund " + charge["charge"]] = CALLS.get("refund " + charge["charge"], 0) + 1
    return "refunded"


FIXED = [False]
"""Whether the failing step works now (the replay fixes it)."""


def ship(tx: Any) -> str:
    if not FIXED[0]:
        raise ConnectionError("carrier down")
    tx.increment("shipped")
    return "shipped"


@workflow("g-retry", retry=StepRetry(initial=60, maximum_attempts=3))
def retrying(who: str) -> Any:
    yield checkpoint()
    paid = yield effect(card("charge " + who), compensate=refund, name="charge")
    yield atomic("tablea", who, ship, name="ship")
    return paid


@workflow("g-undo")
def undoing(who: str) -> Any:
    yield effect(card("charge " + who), compensate=refund, name="charge")
    yield abort("sold out")
    return "never"


WORKFLOWS = [retrying, undoing]


def main(out: str) -> None:
    now = [NOW]
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: now[0])
    clock = lambda: now[0]  # noqa: E731
    submit(retrying("rae"), request_id="retry-rae", store=store, queue=queue, clock=clock)
    submit(undoing("uma"), request_id="undo-uma", store=store, queue=queue, clock=clock)
    late = retrying("dee")
    submit(late, request_id="late-dee", store=store, queue=queue, clock=clock, deadline=NOW + 5400)
    submit(retrying("cal"), request_id="cancel-cal", store=store, queue=queue, clock=clock)
    cancel(store, "g-retry", "cancel-cal", reason="checking")
    worker = Worker(WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    for _ in range(2):  # two failed attempts of "ship", each followed by a delayed continuation
        while received := queue.receive():
            worker.handle(received[0])
        now[0] += 3600
    store.flush()
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=now[0], calls=CALLS)


if __name__ == "__main__":
    main(sys.argv[1])
