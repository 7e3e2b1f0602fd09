"""Background workers: finish submitted workflows from a reliable queue.

A worker receives a pointer (workflow, version, request id) with a
visibility timeout and reads the request's run record: a pointer to a
request nobody submitted is dead-lettered, a finished one is a duplicate.
The request then runs on the version it *started* with, through the same
step engine as ``run``: every step already committed replays from its memo,
and each memo's step identity is checked against the code. The message is
deleted only after the outcome was written durably, so ``status()`` is final
once the message is gone. While it works the worker keeps extending the
message's visibility; a worker killed at any point loses nothing.

What cannot run here waits instead of running on other code: a request
whose version this worker does not hold, or whose memos do not match this
code (a step changed without a new version), is given back to the queue
with a delay and its run record says why (``status(...).waiting``). A step
that keeps raising ends, after ``max_deliveries`` attempts, in ``failed``
(reason, step, attempts), or is compensated and ends ``aborted`` for a
workflow declared ``on_failure="compensate"``; so does a workflow no worker
here holds at all. Store and queue errors never fail a request: they are
retried with backoff. Malformed, tampered or unknown messages are
dead-lettered at once with a reason starting ``rejected:``. Every worker
also runs the outbox relay (:mod:`idemflow.async_worklist.outbox`).

>>> from idemflow import atomic, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow import checkpoint
>>> from idemflow.client import submit
>>> from idemflow.worker import MemoryQueue, Worker
>>> @workflow("greet")
... def greet(name):
...     yield checkpoint()
...     return (yield atomic("tablea", name, lambda tx: "hello " + name))
>>> store, queue = MemoryStore(), MemoryQueue()
>>> pending = submit(greet("ada"), request_id="g-1", store=store, queue=queue)
>>> Worker([greet], store=store, queue=queue).run(idle_timeout=0.2).completed
1
>>> pending.result(timeout=5)
'hello ada'
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist._delivery import Holder, WorkerStats, event
from idemflow.async_worklist._handling import Handling
from idemflow.async_worklist._queue_answers import on_queue
from idemflow.async_worklist.outbox import relay_steps
from idemflow.async_worklist.queues.base import Message, Queue
from idemflow.async_worklist.signals import stop_on_signals
from idemflow.core.policy import RetryPolicy
from idemflow.core.step_retry import StepRetry
from idemflow.engine.drive import drive
from idemflow.errors import MessageLostError
from idemflow.running.workflows import Workflow
from idemflow.stores.base import Store

__all__ = ["Worker", "WorkerStats"]


class Worker(Handling):
    """Drains ``queue``, finishing workflows found by name and version among ``workflows``.

    ``workflows`` may hold several versions of one workflow: each request
    finishes on the version it started with. ``concurrency`` threads take
    messages; ``signing_key`` (default: ``IDEMFLOW_SIGNING_KEY``) makes the
    worker refuse unsigned or tampered messages; a step that raises is tried
    again under its retry policy (its call's, else its workflow's, else
    ``step_retry``, by default :data:`~idemflow.core.step_retry.DEFAULT_STEP_RETRY`:
    a day), each attempt a delayed continuation counted in the run record,
    and once the policy ends the request is ``failed`` (or compensated);
    ``max_deliveries`` only bounds a message that cannot even be read
    (a workflow no worker here holds); ``policy`` is
    the runs' :class:`~idemflow.core.policy.RetryPolicy` (a request keeps the retention
    ``submit`` stored with it; ``policy.retention`` is for requests that carry none:
    children, and records written before 1.0); ``wait`` is the receive
    long-poll in seconds; ``version_wait`` (at most 900 s, SQS's longest
    delay) how long a request this worker cannot run waits before it is
    offered again, as a fresh message, so waiting never counts as an
    attempt; ``relay_every`` how
    often the outbox relay runs (``None``: never). ``clock`` is the wall clock
    of the runs (seconds since the epoch: ``now()`` values, ``finished_at``,
    when timers, retries, deadlines and outbox entries are due), ``time.time``
    by default; rows expire a retention after the later of it and the
    machine's ``time.time()``; the worker's own pacing and statistics use the
    monotonic clock.
    """

    def __init__(
        self,
        workflows: Iterable[Workflow[Any, Any]],
        *,
        store: Store,
        queue: Queue,
        concurrency: int = 1,
        signing_key: bytes | str | None = None,
        max_deliveries: int = 5,
        policy: RetryPolicy | None = None,
        wait: float = 0.5,
        version_wait: float = 30.0,
        relay_every: float | None = 10.0,
        clock: Callable[[], float] | None = None,
        step_retry: StepRetry | None = None,
    ) -> None:
        super().__init__(
            workflows,
            store=store,
            reader=store,
            signing_key=signing_key,
            max_deliveries=max_deliveries,
            policy=policy,
            version_wait=version_wait,
            clock=clock,
            step_retry=step_retry,
        )
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = store
        self.queue = queue
        self.concurrency = concurrency
        self.wait = wait
        self.relay_every = relay_every
        self._stop = threading.Event()
        self._signalled: str | None = None
        """The stop signal received, which :meth:`run` logs (never the handler itself)."""
        self._busy = 0
        self._last_activity = time.monotonic()

    def stop(self) -> None:
        """Stop taking messages; what is held is finished (or released by its timeout).

        It ends the run under way, or, asked between runs, the next run at once (a stop that
        races a run's start is not lost); once that run returned, the worker can run again."""
        self._stop.set()

    def run(
        self,
        idle_timeout: float | None = None,
        *,
        on_progress: Callable[[WorkerStats], None] | None = None,
        progress_every: float = 5.0,
    ) -> WorkerStats:
        """Work until stopped (SIGTERM/SIGINT in the main thread) or idle ``idle_timeout`` seconds.

        A :class:`~idemflow.errors.ConfigurationError` from the store or the queue (a refused
        credential, a missing table or queue) stops it too: what it holds goes back to the queue
        and ``run`` raises that error, since every later message would meet it.

        ``run`` may be called again on the same worker (advance a test clock, run, repeat):
        each run ends on its own stop, and the next one starts taking messages afresh."""
        restore = self._install_signal_handlers()
        unwatch = telemetry.watch_queue(self.queue)
        threads = [
            threading.Thread(target=self._consume, name=f"idemflow-worker-{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        if self.relay_every is not None:
            threads.append(threading.Thread(target=self._relay_loop, name="idemflow-relay", daemon=True))
        for thread in threads:
            thread.start()
        next_progress = time.monotonic() + progress_every
        try:
            while not self._stop.wait(0.05) and self.halted is None:
                now = time.monotonic()
                if on_progress is not None and now >= next_progress:
                    on_progress(self.stats)
                    next_progress = now + progress_every
                with self._lock:
                    idle = self._busy == 0 and now - self._last_activity >= (idle_timeout or 0.0)
                if idle_timeout is not None and idle:
                    self._stop.set()
        finally:
            self._stop.set()
            if self._signalled is not None:
                event(logging.INFO, "stopping", signal=self._signalled)
                self._signalled = None
            for thread in threads:
                thread.join()
            self._stop.clear()  # this run's stop: the next run works again
            unwatch()
            restore()
        if self.halted is not None:
            raise self.halted
        return self.stats

    def relay(self) -> int:
        """Send the continuations due in the outbox now (the relay thread calls this)."""
        sent = drive(relay_steps(self.key, self.clock), self.store, on_queue(self.queue))
        self._relayed(sent)
        if sent:
            with self._lock:
                self._last_activity = time.monotonic()
        return sent

    def _relay_loop(self) -> None:
        assert self.relay_every is not None
        while True:
            try:
                self.relay()
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                if self.halt(exc):
                    return
                event(logging.WARNING, "relay-failed", error=repr(exc))
            if self._stop.wait(self.relay_every):
                return

    def _install_signal_handlers(self) -> Callable[[], None]:
        def stopping(sig: signal.Signals) -> None:
            self._signalled = sig.name  # logged by run: a handler's write may land inside another
            self.stop()

        return stop_on_signals(stopping)

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                for message in self.queue.consume(wait=self.wait, stop=self._stop):
                    with self._lock:
                        self._busy += 1
                    progressed = False
                    try:
                        progressed = self.handle(message)
                    finally:
                        with self._lock:
                            self._busy -= 1
                            if progressed:  # a request only offered back is not activity
                                self._last_activity = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - a queue that failed to receive: try again shortly
                if self.halt(exc):
                    return
                event(logging.WARNING, "receive-failed", error=repr(exc))
                self._stop.wait(1.0)

    # -- one message --------------------------------------------------------

    def handle(self, message: Message) -> bool:
        """Process one message to ack, nack or dead letter; never raises.

        If even that fails (the queue or store is down), the message comes
        back after its visibility timeout and is handled again. False if the
        request only waits (a version or code this worker does not hold).
        """
        holder = Holder(message)
        beat = threading.Event()
        heart = threading.Thread(target=self._heartbeat, args=(holder, beat), daemon=True)
        heart.start()
        fields: dict[str, Any] = {"queue_message": message.id, "attempt": message.deliveries}
        try:
            with telemetry.span(
                "idemflow.queue.receive", queue_message=message.id, attempt=message.deliveries
            ):
                return drive(self._settle(holder, fields), self.store, on_queue(self.queue))
        except Exception as exc:  # noqa: BLE001 - redelivered after the visibility timeout
            if not self.halt(exc):
                event(logging.WARNING, "handling-failed", error=repr(exc), **fields)
            return True
        finally:
            beat.set()
            heart.join()

    def _heartbeat(self, holder: Holder, done: threading.Event) -> None:
        period = max(self.queue.visibility_timeout / 3.0, 0.05)
        while not done.wait(period):
            with holder.lock:
                try:
                    holder.message = self.queue.extend(holder.message, self.queue.visibility_timeout)
                except MessageLostError:
                    holder.lost = True  # another worker has it now; the memos keep this safe
                    return
                except Exception as exc:  # noqa: BLE001 - a missed beat only risks a duplicate run
                    event(logging.WARNING, "extend-failed", error=repr(exc))
