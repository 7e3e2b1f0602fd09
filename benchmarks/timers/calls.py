"""Backend calls per ``sleep``, ``start`` + ``wait`` and ``send`` + ``receive``, against a plain step.

Each workflow of :mod:`benchmarks.timers.flows` runs one step, then the operation measured;
``bench-base`` runs the step alone, so a workflow's calls minus ``bench-base``'s are the
operation's. Everything is counted from ``submit`` until every request involved is final,
one request at a time, in this process: ``submit`` as a client calls it, then a
:class:`~idemflow.worker.Worker` (relay off) handed each message the real queue
delivers. Counted: the store's own count of its backend calls (round trips, including its
background cache writes, flushed before each count), the store API calls behind them (reads,
partition scans, commits, cache writes), queue sends and messages the worker handled (each one
receive and one delete beside it, not counted as calls).

- *plain step*: ``bench-plain`` (one more ``atomic`` step, a put) − base;
- *sleep(1)*: ``bench-sleep`` − base: the due time's memo, the delayed continuation, the
  resumed run (replaying the memos);
- *start + wait*: ``bench-parent`` − base: the child's claim (and its pointer), the parent
  suspended at ``wait``, the child run as a request of its own (no step), its outcome waking the
  parent, the parent resumed;
- *send + receive*: ``bench-inbox`` (suspended at ``receive``) + ``bench-sender`` (submitted once
  the receiver waits) − 2 × base.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from benchmarks.common.counting import CountingStore, backend_calls
from benchmarks.common.queue_drain import count_sends
from benchmarks.timers.flows import (
    TABLE,
    WORKFLOWS,
    base,
    inbox,
    parent,
    plain,
    queue_url,
    sender,
    short_sleep,
    store_url,
)
from idemflow import Idem, open_store
from idemflow.client import RunStatus, status, submit
from idemflow.stores.base import Row, Store
from idemflow.worker import Worker, open_queue

OPERATIONS = ("plain step", "sleep(1)", "start + wait", "send + receive")
DRAIN_TIMEOUT = 60.0


@dataclass
class Calls:
    """Calls of one unit (a workflow, or an operation: a difference of workflows)."""

    round_trips: float = 0.0
    reads: float = 0.0
    scans: float = 0.0
    commits: float = 0.0
    cache_writes: float = 0.0
    sends: float = 0.0
    handled: float = 0.0
    client_round_trips: float = 0.0
    """Of ``round_trips``, those before ``submit`` returned (the rest: the worker's)."""

    def __sub__(self, other: Calls) -> Calls:
        return Calls(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: Calls) -> Calls:
        return Calls(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def scaled(self, factor: float) -> Calls:
        return Calls(**{f.name: getattr(self, f.name) * factor for f in fields(self)})


class Scanning(CountingStore):
    """A :class:`CountingStore` that also counts partition scans (``receive`` reads its inbox so)."""

    scans = 0

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        self.scans += 1
        return self.inner.scan(table, partition)


class Counter:
    """One store and queue of a backend, a client and a worker on them, and their counts."""

    def __init__(self, spec: dict[str, str], tag: str) -> None:
        self.inner = open_store(store_url(spec, tag))
        self.inner.create_tables(TABLE)
        self.queue = open_queue(queue_url(spec, tag, 60))
        self.sent = count_sends(self.queue)
        self.client, self.workers = Scanning(self.inner), Scanning(self.inner)
        self.worker = Worker(WORKFLOWS, store=self.workers, queue=self.queue, relay_every=None)
        self.handled = 0

    def snapshot(self) -> Calls:
        self.inner.flush()  # background cache writes of what ran, counted with it
        parts = (self.client.tally, self.workers.tally)
        return Calls(
            round_trips=backend_calls(self.inner),
            reads=sum(t.reads for t in parts),
            scans=self.client.scans + self.workers.scans,
            commits=sum(t.commits for t in parts),
            cache_writes=sum(t.cache_writes for t in parts),
            sends=self.sent.value,
            handled=self.handled,
        )

    def drain(self, completions: int) -> None:
        """Hand the worker each message the queue delivers until ``completions`` more requests ended
        and the queue is empty (a message sent on the way, e.g. a duplicate, is counted here too)."""
        stats = self.worker.stats
        target = stats.completed + stats.aborted + completions
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while stats.completed + stats.aborted < target or self.queue.approximate_size() > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target - stats.completed - stats.aborted} requests never finished")
            for message in self.queue.receive(wait=1.0):
                self.worker.handle(message)
                self.handled += 1

    def run(self, submits: Sequence[tuple[Idem[Any], str, int]]) -> Calls:
        """Submit each ``(workflow call, request id, completions by workers)`` in turn, draining
        the workers after each: the calls of all of it, ``client_round_trips`` those of the submits."""
        before = self.snapshot()
        client = 0.0
        for m, request_id, completions in submits:
            ahead = self.snapshot()
            submit(m, request_id=request_id, store=self.client, queue=self.queue)
            client += self.snapshot().round_trips - ahead.round_trips
            self.drain(completions)
        used = self.snapshot() - before
        used.client_round_trips = client
        return used

    def close(self) -> None:
        self.queue.close()
        self.inner.close()


def _final(store: Store, workflow: str, request_id: str, expected: Any) -> None:
    found = status(store, workflow, request_id)
    if found.status is not RunStatus.COMPLETED or found.result != expected:
        raise RuntimeError(f"{workflow} {request_id}: {found.status} {found.result!r}, not {expected!r}")


def count(spec: dict[str, str], tag: str, samples: int) -> dict[str, Any]:
    """Mean calls per workflow (base) and per operation (the rest) over ``samples`` each, interleaved."""
    counter = Counter(spec, tag)
    totals: dict[str, Calls] = {name: Calls() for name in ("base", "plain", "sleep", "parent", "messages")}

    def once(i: int) -> dict[str, Callable[[], Calls]]:
        rid = f"r{i}"
        return {
            "base": lambda: counter.run([(base({"id": rid + "b"}), rid + "b", 0)]),
            "plain": lambda: counter.run([(plain({"id": rid + "p"}), rid + "p", 0)]),
            "sleep": lambda: counter.run([(short_sleep({"id": rid + "s"}), rid + "s", 1)]),
            "parent": lambda: counter.run([(parent({"id": rid + "c"}), rid + "c", 2)]),
            "messages": lambda: counter.run(
                [
                    (inbox({"id": rid + "i"}), rid + "i", 0),
                    (sender({"id": rid + "o", "to": rid + "i"}), rid + "o", 1),
                ]
            ),
        }

    try:
        for i in range(samples):
            for name, work in once(i).items():
                totals[name] = totals[name] + work()
            rid = f"r{i}"  # checked after the counts: these reads are not the workflows'
            _final(counter.inner, parent.name, rid + "c", rid + "ck")
            _final(counter.inner, inbox.name, rid + "i", {"from": rid + "o"})
            _final(counter.inner, short_sleep.name, rid + "s", "slept")
    finally:
        counter.close()
    mean = {name: calls.scaled(1.0 / samples) for name, calls in totals.items()}
    one = mean["base"]
    operations = {
        "plain step": mean["plain"] - one,
        "sleep(1)": mean["sleep"] - one,
        "start + wait": mean["parent"] - one,
        "send + receive": mean["messages"] - one - one,
    }
    return {"base": vars(one), **{name: vars(calls) for name, calls in operations.items()}}
