"""Counting what is sent to a queue, and a :class:`Worker` draining it while a round runs.

Why apart: ``users``, ``calls`` and the timers benchmark's call counts all measure ``submit``
against a queue and need to know when every message sent was finished; one copy of that here.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from idemflow import Workflow
from idemflow.stores import Store
from idemflow.worker import Queue, Worker

DRAIN_TIMEOUT = 300.0


class Sent:
    """Messages sent to a queue, counted by :func:`count_sends`."""

    def __init__(self) -> None:
        self.value = 0
        self.lock = threading.Lock()


def count_sends(queue: Queue) -> Sent:
    """Count ``queue.send`` calls (wrapping the bound method of this one instance)."""
    sent, send = Sent(), queue.send

    def counting(*args: Any, **kwargs: Any) -> Any:
        result = send(*args, **kwargs)
        with sent.lock:
            sent.value += 1
        return result

    setattr(queue, "send", counting)  # noqa: B010 - an instance attribute shadowing the method
    return sent


class Draining:
    """A :class:`Worker` running in a thread while the block runs; ``wait(n)`` blocks until
    ``n`` more messages were finished (or dead-lettered) and returns the dead letters."""

    def __init__(self, workflows: list[Workflow[Any, Any]], store: Store, queue: Queue, workers: int) -> None:
        # No relay: the auction's items were registered with ``run``, each starting its closing
        # timer through the outbox; relayed, those timers would add messages (and suspensions)
        # this benchmark of bids does not count. A bid's ``submit`` sends its own continuation.
        self.worker = Worker(workflows, store=store, queue=queue, concurrency=workers, relay_every=None)
        self.thread = threading.Thread(target=self.worker.run, name="bench-worker", daemon=True)
        self._seen = 0

    def __enter__(self) -> Draining:
        self.thread.start()
        return self

    def wait(self, messages: int) -> int:
        stats = self.worker.stats
        target = self._seen + messages
        dead_before = stats.dead_lettered
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while stats.finished + stats.dead_lettered < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not drain the queue within {DRAIN_TIMEOUT}s")
            time.sleep(0.002)
        self._seen = stats.finished + stats.dead_lettered
        return stats.dead_lettered - dead_before

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join()
