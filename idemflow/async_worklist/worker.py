"""Background workers: finish checkpointed workflows from a reliable queue.

A worker receives a continuation with a visibility timeout, checks it (JSON
shape, signature, registered workflow, a run record with the same input
fingerprint — so a forged message for a request nobody submitted never
runs), resumes the workflow through the same step engine as ``run`` (steps
carried by a signed message replay without store reads), and deletes the
message only after the workflow completed or aborted and its completion
record was written durably, so ``status()`` is final once the message is
gone. While it works it keeps extending the message's visibility. A worker
killed at any point loses nothing: the message comes back and the memos make
the rerun exact.

Messages that can never succeed go to the queue's dead-letter place at their
first delivery, with a reason starting ``rejected:`` (malformed, tampered,
unknown workflow, input the library refuses: any
:class:`~idemflow.errors.InvalidInputError`) or ``non-deterministic resume:``.
Other failures (a store that is down, a bug in a step) are retried with
backoff and dead-lettered after ``max_deliveries`` attempts. Every dead
letter is logged.

>>> from idemflow import MemoryStore, atomic, workflow
>>> from idemflow.async_worklist import MemoryQueue, Worker, checkpoint, submit
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

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from idemflow.async_worklist.messages import Continuation, MessageRejected, decode_continuation
from idemflow.async_worklist.queues.base import Message, MessageLostError, Queue
from idemflow.async_worklist.submit import resolve_signing_key
from idemflow.engine import Execution, RetryPolicy
from idemflow.errors import InvalidInputError, NonDeterminismError
from idemflow.records import RunStatus
from idemflow.runner import Workflow, describe, execute, run_status
from idemflow.stores.base import Store

log = logging.getLogger("idemflow.worker")


@dataclass
class WorkerStats:
    """Counts since the worker started (read them after ``run`` returns)."""

    completed: int = 0
    aborted: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    retried: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return self.completed + self.aborted + self.duplicates


class _Holder:
    """The message being worked on; the heartbeat swaps in each extended receipt."""

    def __init__(self, message: Message) -> None:
        self.message = message
        self.lost = False
        self.lock = threading.Lock()


class Worker:
    """Drains ``queue``, finishing workflows found by name among ``workflows``.

    ``concurrency`` threads take messages; ``signing_key`` (default:
    ``IDEMFLOW_SIGNING_KEY``) makes the worker refuse unsigned or tampered
    messages; a message failing ``max_deliveries`` times is dead-lettered;
    ``policy`` is the runs' :class:`~idemflow.engine.RetryPolicy`; ``wait``
    is the receive long-poll in seconds. ``clock`` is the wall clock of the
    runs (seconds since the epoch: ``now()`` values, retention expiry,
    ``finished_at``), ``time.time`` by default, as in :func:`idemflow.run`;
    the worker's own pacing and statistics use the monotonic clock.
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
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.registry: dict[str, Workflow[Any, Any]] = {}
        for flow in workflows:
            if not isinstance(flow, Workflow):
                raise TypeError(f"Worker needs @workflow functions, got {flow!r}")
            self.registry[flow.name] = flow
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = store
        self.queue = queue
        self.concurrency = concurrency
        self.key = resolve_signing_key(signing_key)
        self.max_deliveries = max_deliveries
        self.policy = policy
        self.wait = wait
        self.clock: Callable[[], float] = time.time if clock is None else clock
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._busy = 0
        self._last_activity = time.monotonic()

    def stop(self) -> None:
        """Stop taking messages; what is held is finished (or released by its timeout)."""
        self._stop.set()

    def run(
        self,
        idle_timeout: float | None = None,
        *,
        on_progress: Callable[[WorkerStats], None] | None = None,
        progress_every: float = 5.0,
    ) -> WorkerStats:
        """Work until stopped (SIGTERM/SIGINT in the main thread) or idle ``idle_timeout`` seconds."""
        restore = self._install_signal_handlers()
        threads = [
            threading.Thread(target=self._consume, name=f"idemflow-worker-{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        next_progress = time.monotonic() + progress_every
        try:
            while not self._stop.wait(0.05):
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
            for thread in threads:
                thread.join()
            restore()
        return self.stats

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def graceful(signum: int, _frame: object) -> None:
            log.info(json.dumps({"event": "stopping", "signal": signal.Signals(signum).name}))
            self.stop()

        for sig in previous:
            signal.signal(sig, graceful)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _consume(self) -> None:
        for message in self.queue.consume(wait=self.wait, stop=self._stop):
            with self._lock:
                self._busy += 1
            try:
                self.handle(message)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._last_activity = time.monotonic()

    # -- one message --------------------------------------------------------

    def handle(self, message: Message) -> None:
        """Process one message to ack, nack or dead letter (never raises for bad input)."""
        holder = _Holder(message)
        beat = threading.Event()
        heart = threading.Thread(target=self._heartbeat, args=(holder, beat), daemon=True)
        heart.start()
        started = time.monotonic()
        try:
            outcome = self._finish(message)
        except InvalidInputError as invalid:  # MessageRejected too: the same on every delivery
            self._dead_letter(holder, f"rejected: {invalid}")
            return
        except NonDeterminismError as exc:
            self._dead_letter(holder, f"non-deterministic resume: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - a failed attempt: retried, then dead-lettered
            self._retry_or_dead_letter(holder, exc)
            return
        finally:
            beat.set()
            heart.join()
        with holder.lock:
            if not holder.lost:
                self.queue.ack(holder.message)
        with self._lock:
            if outcome == "duplicate":
                self.stats.duplicates += 1
            elif outcome == RunStatus.ABORTED.value:
                self.stats.aborted += 1
            else:
                self.stats.completed += 1
        log.info(
            json.dumps(
                {
                    "event": "finished",
                    "outcome": outcome,
                    "seconds": round(time.monotonic() - started, 4),
                    "message": message.id,
                    "deliveries": message.deliveries,
                }
            )
        )

    def _finish(self, message: Message) -> str:
        continuation = decode_continuation(message.body, self.key)
        flow = self.registry.get(continuation.workflow)
        if flow is None:
            raise MessageRejected(f"unknown workflow {continuation.workflow!r}")
        m = flow(*continuation.args, **continuation.kwargs)
        name, fingerprint = describe(m)  # an input that is not JSON: InvalidInputError, dead-lettered
        record = run_status(self.store, name, continuation.request_id)  # so is an invalid request id
        if record is None:
            raise MessageRejected(f"no request {continuation.request_id!r} of {name!r} was submitted")
        if record.fingerprint != fingerprint:
            raise MessageRejected(f"input does not match the submitted request {continuation.request_id!r}")
        if record.status in (RunStatus.COMPLETED, RunStatus.ABORTED):
            return "duplicate"
        done = execute(
            m,
            request_id=continuation.request_id,
            store=self.store,
            policy=self.policy,
            clock=self.clock,
            prepare=lambda execution: _resume(execution, continuation),
        )
        return done.status.value  # its completion record is durable: the caller may ack

    def _heartbeat(self, holder: _Holder, done: threading.Event) -> None:
        period = max(self.queue.visibility_timeout / 3.0, 0.05)
        while not done.wait(period):
            with holder.lock:
                try:
                    holder.message = self.queue.extend(holder.message, self.queue.visibility_timeout)
                except MessageLostError:
                    holder.lost = True  # another worker has it now; the memos keep this safe
                    return
                except Exception as exc:  # noqa: BLE001 - a missed beat only risks a duplicate run
                    log.warning(json.dumps({"event": "extend-failed", "error": repr(exc)}))

    def _dead_letter(self, holder: _Holder, reason: str) -> None:
        log.warning(json.dumps({"event": "dead-letter", "message": holder.message.id, "reason": reason}))
        with holder.lock:
            if not holder.lost:
                self.queue.dead_letter(holder.message, reason)
        with self._lock:
            self.stats.dead_lettered += 1

    def _retry_or_dead_letter(self, holder: _Holder, exc: Exception) -> None:
        if holder.message.deliveries >= self.max_deliveries:
            self._dead_letter(holder, f"failed {holder.message.deliveries} times, last: {exc!r}")
            return
        log.warning(json.dumps({"event": "retry", "message": holder.message.id, "error": repr(exc)}))
        with holder.lock:
            if not holder.lost:
                self.queue.nack(holder.message, delay=min(2.0**holder.message.deliveries * 0.1, 30.0))
        with self._lock:
            self.stats.retried += 1


def _resume(execution: Execution, continuation: Continuation) -> None:
    """Resume: carried steps replay without reads (signed) or from their memos (unsigned)."""
    execution.run_known = True
    execution.durable_outcome = True  # written before the ack, never left to a background thread
    if continuation.signed:
        execution.recorded = {step.tag: (step.identity, step.value) for step in continuation.recorded}
    else:
        execution.replaying = True

    def at_checkpoint(execution: Execution) -> None:
        if execution.recorded:  # carried steps the code no longer reaches before its checkpoint
            tag = next(iter(execution.recorded))
            identity, _ = execution.recorded[tag]
            raise NonDeterminismError(
                execution.workflow, execution.request_id, int(tag[1:]), repr(identity), "no such step"
            )

    execution.on_checkpoint = at_checkpoint
