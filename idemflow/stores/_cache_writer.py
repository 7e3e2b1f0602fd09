"""Cache writes off the caller's path: one background thread per store, in order.

A cache write (today: a request's completion record) only saves later
duplicates a replay, so the caller must not wait for it (DESIGN: "bookkeeping
that is only a cache stays off the caller's critical path"). Every store that
does real I/O hands its cache writes to a :class:`CacheWriter`:

- one worker thread, so writes apply in the order they were queued and
  :meth:`CacheWriter.flush` can wait for all earlier ones;
- a write that meets a transient error (a throttle, a transaction conflict
  on a hot row) is resent until the policy's deadline
  (:meth:`idemflow.policy.RetryPolicy.resending`), or until
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

from idemflow.policy import DEFAULT_POLICY
from idemflow.stores.base import Conflict

CLOSE_GRACE = 2.0
"""Seconds queued writes keep resending after :meth:`CacheWriter.close`."""


class CacheWriter:
    """Runs ``write(ops)`` for each submitted batch on one lazily started thread."""

    def __init__(self, name: str, write: Callable[[Sequence[Any]], object], log: logging.Logger) -> None:
        self._name = name
        self._write = write
        self._log = log
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._closed_at = 0.0

    def submit(self, ops: Sequence[Any]) -> None:
        """Queue one write; returns at once. After :meth:`close` the write is dropped (logged)."""
        with self._lock:
            if self._closed:
                self._log.warning("dropped a cache write (%s): the store is closed", self._name)
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"idemflow-{self._name}-cache")
            self._executor.submit(self._run, list(ops))

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
            executor = self._executor
        if executor is None:
            return
        try:
            executor.submit(lambda: None).result()  # one worker: it runs after every earlier write
        except RuntimeError:  # closed meanwhile: close() waited for every write
            return

    def close(self) -> None:
        """Write what is queued, then stop the thread; later writes are dropped."""
        with self._lock:
            self._closed = True
            self._closed_at = time.monotonic()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
