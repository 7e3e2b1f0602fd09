"""A scheduler process for the kill tests: ``python -m tests.support.schedule_racer STORE_URL TICKS``
walks the same simulated hours every racer walks (a pass at each tick of a ten-minute schedule,
five seconds after it), printing ``tick K`` after each, then prints ``done``. Its workflow has no
checkpoint, so each pass runs a tick to its end and the tick's count in ``tablea`` (partition
``racers``) shows how often it ran."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from idemflow import Schedule, atomic, open_store, workflow
from idemflow.worker import MemoryQueue, fire_schedules

T0 = 1_800_000_000.0


@workflow("sched-racer")
def raced(tag: str, tick: str) -> Any:
    at = int(datetime.fromisoformat(tick).timestamp())
    yield atomic("tablea", tag, lambda tx: tx.increment(f"t{at}"))


EVERY10 = Schedule("racers", raced, cron="*/10 * * * *", input="racers", catchup="all")


def main(url: str, ticks: int) -> None:
    store = open_store(url)
    queue = MemoryQueue()
    for k in range(ticks):
        at = T0 + 600 * k + 5
        fire_schedules([EVERY10], store=store, queue=queue, clock=lambda at=at: at)
        print("tick", k, flush=True)  # the test kills a racer after some of these
    store.flush()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
