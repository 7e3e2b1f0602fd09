"""Cache writes off the caller's path: a few background threads per store, in order per row.

A cache write (today: a request's completion record) only saves later
duplicates a replay, so the caller must not wait for it: bookkeeping that is
only a cache stays off the caller's critical path. Every store that
does real I/O hands its cache writes to a :class:`CacheWriter`:

- a few worker threads (lanes), a batch's lane chosen by its first row, so
  writes to one row apply in the order they were queued and
  :meth:`CacheWriter.flush` can wait for all earlier ones;
- a write that meets a transient error (a throttle, a transaction conflict
  on a hot row) is resent until the policy's deadline
  (:meth:`idemflow.core.policy.RetryPolicy.resending`), or until
  :data:`CLOSE_GRACE` after the store is closed (a process shutting down with
  its backend unreachable must not hang): a completion record
  dropped on a conflict would leave ``status`` saying ``running`` for a
  finished request;
- a write that still fails is logged and dropped, never raised: the row it
  would have written is a cache (duplicates replay the memos), and the
  caller has long returned;
- the thread is a :class:`~concurrent.futures.ThreadPoolExecutor` worker, so a
  normal interpreter exit still writes what was queued (a killed process loses
  it: its requests' duplicates then replay their memos).

>>> done = []
>>> writer = CacheWriter("demo", lambda ops: done.append(list(ops)), logging.getLogger("demo"))
>>> writer.submit(["op"])
>>> writer.flush()
>>> done
[['op']]
>>> writer.close()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from idemflow.core.policy import DEFAULT_POLICY
from idemflow.stores.base import Conflict

CLOSE_GRACE = 2.0
"""Seconds queued writes keep resending after :meth:`CacheWriter.close`."""


LANES = 8
"""Background threads per store: one wrote about 140 completion records a second on DynamoDB Local,
fewer than 32 concurrent callers finish requests, so its backlog set their pace."""


class CacheWriter:
    """Runs ``write(ops)`` for each submitted batch on one of :data:`LANES` lazily started threads.

    A batch's lane follows its first row, so writes to one row apply in the order they were
    queued; writes to different rows are caches of different facts and need no order.
    """

    def __init__(
        self, name: str, write: Callable[[Sequence[Any]], object], log: logging.Logger, lanes: int = LANES
    ) -> None:
        self._name = name
        self._write = write
        self._log = log
        self._lock = threading.Lock()
        self._lanes: list[ThreadPoolExecutor | None] = [None] * lanes
        self._closed = False
        self._closed_at = 0.0

    def submit(self, ops: Sequence[Any]) -> None:
        """Queue one write; returns at once. After :meth:`close` the write is dropped (logged)."""
        ref = getattr(ops[0], "ref", None) if ops else None
        lane = hash(ref) % len(self._lanes)
        with self._lock:
            if self._closed:
                self._log.warning("dropped a cache write (%s): the store is closed", self._name)
                return
            executor = self._lanes[lane]
            if executor is None:
                prefix = f"idemflow-{self._name}-cache{lane}"
                executor = self._lanes[lane] = ThreadPoolExecutor(1, thread_name_prefix=prefix)
            executor.submit(self._run, list(ops))

    def _run(self, ops: list[Any]) -> None:
        try:
            retrying = DEFAULT_POLICY.resending(DEFAULT_POLICY.until(), give_up=self._past_grace)
            outcome = retrying(self._write, ops)
        except Exception as exc:  # noqa: BLE001 - a lost cache write only costs a later replay
            self._log.warning("dropped a cache write (%s, %d operations): %s", self._name, len(ops), exc)
            return
        if isinstance(outcome, Conflict):
            self._log.debug("a cache write (%s) not applied: %s", self._name, outcome)

    def _past_grace(self) -> bool:
        return self._closed and time.monotonic() > self._closed_at + CLOSE_GRACE

    def flush(self) -> None:
        """Wait until every write queued before this call is done."""
        with self._lock:
            started = [executor for executor in self._lanes if executor is not None]
        try:
            # One thread per lane: a no-op runs after every earlier write of its lane.
            waits = [executor.submit(lambda: None) for executor in started]
            for done in waits:
                done.result()
        except RuntimeError:  # closed meanwhile: close() waited for every write
            return

    def close(self) -> None:
        """Write what is queued, then stop the threads; later writes are dropped."""
        with self._lock:
            self._closed = True
            self._closed_at = time.monotonic()
            started = [executor for executor in self._lanes if executor is not None]
            self._lanes = [None] * len(self._lanes)
        for executor in started:
            executor.shutdown(wait=True)
