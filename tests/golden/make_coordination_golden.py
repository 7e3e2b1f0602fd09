"""Write the golden rows of requests caught waiting: ``python -m tests.golden.make_coordination_golden OUT``.

Timers, children and messages keep requests in flight for as long as they wait (a sleep of a
week): across releases. So their rows are pinned as the first releases' are (``make_golden.py``),
at the moment each waits: a sleeper suspended until its due time, a parent waiting for its child
(the child's pointer sent, not yet handled), and a receiver waiting for a message another request
sent it (with the message's wake-up). ``tests/test_golden.py`` loads them into every store and
finishes them with this version's workers: each effect once, every result as it would have been.
"""

from __future__ import annotations

import sys
from typing import Any

from idemflow import atomic, receive, send, sleep, start, wait, workflow
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under (the replay moves it past the sleep)."""


def add(key: str) -> Any:
    def body(tx: Any) -> int:
        tx.increment(key)
        return 1

    return body


@workflow("g-sleeper")
def sleeper(who: str) -> Any:
    yield atomic("tablea", who, add("before"), name="before")
    yield sleep(3600)
    yield atomic("tablea", who, add("after"), name="after")
    return "rested"


@workflow("g-kid")
def kid(who: str) -> Any:
    yield atomic("tablea", who, add("kid"), name="kid")
    return "kid of " + who


@workflow("g-parent")
def parent(who: str) -> Any:
    child = yield start(kid(who), request_id="kid-" + who)
    result = yield wait(child)
    yield atomic("tablea", who, add("parent"), name="parent")
    return result


@workflow("g-inbox")
def inbox(who: str) -> Any:
    note = yield receive("note", timeout=7200)
    yield atomic("tablea", who, add("read"), name="read")
    return note


@workflow("g-writer")
def writer(who: str) -> Any:
    yield send("g-inbox", "inbox-" + who, "note", "hello " + who)
    return "sent"


WORKFLOWS = [sleeper, kid, parent, inbox, writer]


def main(out: str) -> None:
    queue_time = [NOW]
    store, queue = MemoryStore(), MemoryQueue(clock=lambda: queue_time[0])
    clock = lambda: NOW  # noqa: E731
    submit(sleeper("sam"), request_id="sleeper-sam", store=store, queue=queue, clock=clock)
    submit(parent("pia"), request_id="parent-pia", store=store, queue=queue, clock=clock)
    submit(inbox("ivy"), request_id="inbox-ivy", store=store, queue=queue, clock=clock)
    submit(writer("ivy"), request_id="writer-ivy", store=store, queue=queue, clock=clock)
    store.flush()
    queue_time[0] += 3600  # every message, the sleeper's delayed continuation too
    messages = sorted(m.body for m in queue.receive(max_messages=10, visibility_timeout=1e6))
    write_golden(out, [store], messages=messages, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
