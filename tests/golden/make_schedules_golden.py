"""Golden rows of schedules (``python -m tests.golden.make_schedules_golden OUT``).

Format revision 7 (release 1.2.0) brings a schedule's state row (``s<schedule>`` in the
``schedules`` partition of ``idemflowruns``: ``a``, after which its ticks are due; ``l``, the last
tick fired; ``p`` and ``pa``, paused and when). Schedulers of later releases meet these rows, so
they are pinned in each state: ``g-nightly`` fired one tick (its request queued at its
checkpoint, the message recorded), ``g-paused`` paused by an operator, ``g-fresh`` seen by a
scheduler and never fired. ``tests/test_golden.py`` loads them into every store, finishes the
tick's request once and fires the schedules on: each from where its row says, none twice.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import Schedule, atomic, checkpoint, workflow
from idemflow.admin import pause_schedule
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue, fire_schedules
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under (2027-01-15T08:00:00Z)."""
DAY = 86400.0


@workflow("g-scheduled")
def scheduled(kind: str, tick: str) -> Any:
    """A tick's request: counts its night once, after its checkpoint (so a worker finishes it)."""
    yield checkpoint()
    yield atomic("tablea", kind, lambda tx: tx.increment(tick[:10]))
    return f"{kind} {tick[:10]}"


WORKFLOWS = [scheduled]
NIGHTLY = Schedule(
    "g-nightly", scheduled, cron="0 3 * * *", input="nightly", timezone="Europe/Berlin", catchup="all"
)
PAUSED = Schedule("g-paused", scheduled, cron="0 3 * * *", input="paused", timezone="Europe/Berlin")
FRESH = Schedule("g-fresh", scheduled, cron="0 3 * * *", input="fresh", timezone="Europe/Berlin")
SCHEDULES = [NIGHTLY, PAUSED, FRESH]
FIRED = 1_799_978_400.0
"""The one tick ``g-nightly`` fired: 2027-01-15T03:00:00+01:00."""


def main(out: str) -> None:
    store, queue = MemoryStore(), MemoryQueue()
    fire_schedules([NIGHTLY, PAUSED], store=store, queue=queue, clock=lambda: NOW - DAY)
    pause_schedule(store, PAUSED.name, clock=lambda: NOW - DAY + 60)
    report = fire_schedules(SCHEDULES, store=store, queue=queue, clock=lambda: NOW)
    assert report.fired[0].ticks == (FIRED,), report
    store.flush()
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
