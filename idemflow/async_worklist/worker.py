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

import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist import _runs
from idemflow.async_worklist.messages import MessageRejected, Pointer, decode_pointer
from idemflow.async_worklist.outbox import relay
from idemflow.async_worklist.queues.base import Message, MessageLostError, Queue, check_seconds
from idemflow.async_worklist.submit import resolve_signing_key
from idemflow.engine import Plan
from idemflow.errors import InvalidInputError, NonDeterminismError, StepFailedError
from idemflow.operations import abort
from idemflow.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.records import RunRecord, RunStatus
from idemflow.runner import Workflow, describe_request, execute, run_status
from idemflow.stores.base import Store

log = logging.getLogger("idemflow.worker")


def _event(level: int, event: str, **fields: Any) -> None:
    """One log event: JSON text for people and log shippers, the same fields as ``extra``."""
    log.log(level, json.dumps({"event": event, **fields}, default=str), extra=fields)


@dataclass
class WorkerStats:
    """Counts since the worker started (read them after ``run`` returns)."""

    completed: int = 0
    aborted: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    retried: int = 0
    failed: int = 0
    waiting: int = 0
    relayed: int = 0
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


class _Wait(Exception):
    """This worker cannot run the request now (version not held, code that differs)."""

    def __init__(self, why: str, *, bounded: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.bounded = bounded
        """Counts toward ``max_deliveries`` (a workflow nobody here holds), then fails."""


class Worker:
    """Drains ``queue``, finishing workflows found by name and version among ``workflows``.

    ``workflows`` may hold several versions of one workflow: each request
    finishes on the version it started with. ``concurrency`` threads take
    messages; ``signing_key`` (default: ``IDEMFLOW_SIGNING_KEY``) makes the
    worker refuse unsigned or tampered messages; a request whose step failed
    ``max_deliveries`` times ends ``failed`` (or compensated); ``policy`` is
    the runs' :class:`~idemflow.policy.RetryPolicy`; ``wait`` is the receive
    long-poll in seconds; ``version_wait`` (at most 900 s, SQS's longest
    delay) how long a request this worker cannot run waits before it is
    offered again, as a fresh message, so waiting never counts as an
    attempt; ``relay_every`` how
    often the outbox relay runs (``None``: never). ``clock`` is the wall clock
    of the runs (seconds since the epoch: ``now()`` values, retention expiry,
    ``finished_at``, outbox due times), ``time.time`` by default; the worker's
    own pacing and statistics use the monotonic clock.
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
    ) -> None:
        self.registry: dict[str, dict[int, Workflow[Any, Any]]] = {}
        for flow in workflows:
            if not isinstance(flow, Workflow):
                raise TypeError(f"Worker needs @workflow functions, got {flow!r}")
            self.registry.setdefault(flow.name, {})[flow.version] = flow
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = store
        self.queue = queue
        self.concurrency = concurrency
        self.key = resolve_signing_key(signing_key)
        self.max_deliveries = max_deliveries
        self.policy = policy
        self._retries = policy or DEFAULT_POLICY
        self.wait = wait
        self.version_wait = check_seconds(version_wait, "version_wait", high=900.0)  # SQS's longest delay
        self.relay_every = relay_every
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
        if self.relay_every is not None:
            threads.append(threading.Thread(target=self._relay_loop, name="idemflow-relay", daemon=True))
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

    def relay(self) -> int:
        """Send the continuations due in the outbox now (the relay thread calls this)."""
        sent = relay(self.store, self.queue, signing_key=self.key, clock=self.clock)
        if sent:
            with self._lock:
                self.stats.relayed += sent
                self._last_activity = time.monotonic()
        return sent

    def _relay_loop(self) -> None:
        assert self.relay_every is not None
        while True:
            try:
                self.relay()
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                _event(logging.WARNING, "relay-failed", error=repr(exc))
            if self._stop.wait(self.relay_every):
                return

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def graceful(signum: int, _frame: object) -> None:
            _event(logging.INFO, "stopping", signal=signal.Signals(signum).name)
            self.stop()

        for sig in previous:
            signal.signal(sig, graceful)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

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
                _event(logging.WARNING, "receive-failed", error=repr(exc))
                self._stop.wait(1.0)

    # -- one message --------------------------------------------------------

    def handle(self, message: Message) -> bool:
        """Process one message to ack, nack or dead letter; never raises.

        If even that fails (the queue or store is down), the message comes
        back after its visibility timeout and is handled again. False if the
        request only waits (a version or code this worker does not hold).
        """
        holder = _Holder(message)
        beat = threading.Event()
        heart = threading.Thread(target=self._heartbeat, args=(holder, beat), daemon=True)
        heart.start()
        fields: dict[str, Any] = {"queue_message": message.id, "attempt": message.deliveries}
        try:
            with telemetry.span(
                "idemflow.queue.receive", queue_message=message.id, attempt=message.deliveries
            ):
                return self._settle(holder, fields)
        except Exception as exc:  # noqa: BLE001 - redelivered after the visibility timeout
            _event(logging.WARNING, "handling-failed", error=repr(exc), **fields)
            return True
        finally:
            beat.set()
            heart.join()

    def _settle(self, holder: _Holder, fields: dict[str, Any]) -> bool:
        started = time.monotonic()
        try:
            outcome = self._finish(holder.message, fields)
        except InvalidInputError as invalid:  # MessageRejected too: the same on every delivery
            self._dead_letter(holder, f"rejected: {invalid}", fields)
            return True
        except _Wait as wait:
            self._wait(holder, wait, fields)
            return False
        except StepFailedError as failed:
            self._step_failed(holder, failed, fields)
            return True
        except Exception as exc:  # noqa: BLE001 - the store or queue: retried, never a failed request
            self._retry(holder, exc, fields)
            return True
        self._ack(holder)
        self._count(outcome)
        fields["seconds"] = round(time.monotonic() - started, 4)
        _event(logging.INFO, "finished", outcome=outcome, **fields)
        return True

    def _finish(self, message: Message, fields: dict[str, Any]) -> str:
        pointer = decode_pointer(message.body, self.key)
        fields.update(workflow=pointer.workflow, request_id=pointer.request_id, version=pointer.version)
        record = run_status(self.store, pointer.workflow, pointer.request_id, policy=self._retries)
        if record is None:
            raise MessageRejected(f"no request {pointer.request_id!r} of {pointer.workflow!r} was submitted")
        fields["version"] = record.version
        if record.started_at is not None and message.deliveries == 1:
            telemetry.lag(max(self.clock() - record.started_at, 0.0), pointer.workflow)
        if record.status.final or record.status is RunStatus.FAILED:
            return "duplicate"
        flow = self._flow(pointer.workflow, record.version)
        args, kwargs = _input_of(pointer, record)
        m = flow(*args, **kwargs)
        request = describe_request(m)
        if request.fingerprint != record.fingerprint:
            raise MessageRejected(f"input does not match the submitted request {pointer.request_id!r}")
        plan = Plan(
            version=record.version,
            resume=True,
            durable_outcome=True,
            step_errors=True,
            expected=pointer.steps,
        )
        try:
            done = execute(
                m,
                request_id=pointer.request_id,
                store=self.store,
                policy=self.policy,
                clock=self.clock,
                plan=plan,
                request=request,
            )
        except NonDeterminismError as exc:
            raise _Wait(
                f"the code of version {record.version} differs from what the request ran: {exc}"
            ) from exc
        return done.status.value  # its completion record is durable: the caller may ack

    def _flow(self, name: str, version: int) -> Workflow[Any, Any]:
        versions = self.registry.get(name)
        if not versions:
            raise _Wait(f"no worker here holds workflow {name!r}", bounded=True)
        flow = versions.get(version)
        if flow is None:
            held = ", ".join(str(v) for v in sorted(versions))
            raise _Wait(f"waiting for a worker holding version {version} of {name!r} (this one holds {held})")
        return flow

    # -- outcomes -------------------------------------------------------------

    def _count(self, outcome: str) -> None:
        with self._lock:
            if outcome == "duplicate":
                self.stats.duplicates += 1
            elif outcome == RunStatus.ABORTED.value:
                self.stats.aborted += 1
            else:
                self.stats.completed += 1

    def _ack(self, holder: _Holder) -> None:
        with holder.lock:
            if not holder.lost:
                self.queue.ack(holder.message)

    def _nack(self, holder: _Holder, delay: float) -> None:
        with holder.lock:
            if not holder.lost:
                self.queue.nack(holder.message, delay=delay)

    def _wait(self, holder: _Holder, wait: _Wait, fields: dict[str, Any]) -> None:
        if wait.bounded and holder.message.deliveries >= self.max_deliveries:
            self._fail(holder, wait.why, 0, fields)
            return
        _runs.note_waiting(self.store, fields["workflow"], fields["request_id"], wait.why, self._retries)
        _event(logging.WARNING, "waiting", why=wait.why, **fields)
        if wait.bounded:
            self._nack(holder, self.version_wait)
        elif not holder.lost:  # another worker holds it now
            # A fresh message, so waiting out a deploy never counts as a failed attempt (nor
            # against a queue's own redrive limit); a crash before the ack only duplicates it.
            self.queue.send(holder.message.body, delay=self.version_wait)
            self._ack(holder)
        with self._lock:
            self.stats.waiting += 1

    def _step_failed(self, holder: _Holder, failed: StepFailedError, fields: dict[str, Any]) -> None:
        fields["step"] = failed.step
        if holder.message.deliveries < self.max_deliveries:
            self._retry(holder, failed, fields)
            return
        flow = self._flow(failed.workflow, fields["version"])
        if flow.on_failure == "compensate":
            reason = f"step {failed.step} ({failed.identity}) failed: {failed.cause}"
            try:
                abort(
                    self.store,
                    [flow],
                    flow.name,
                    failed.request_id,
                    reason=reason,
                    policy=self.policy,
                    clock=self.clock,
                )
            except Exception as exc:  # noqa: BLE001 - a compensation that fails leaves it failed
                _event(logging.ERROR, "compensation-failed", error=repr(exc), **fields)
            else:
                _event(logging.WARNING, "compensated", reason=reason, **fields)
                self._ack(holder)
                with self._lock:
                    self.stats.aborted += 1
                return
        self._fail(holder, failed.cause, failed.step, fields)

    def _fail(self, holder: _Holder, reason: str, step: int, fields: dict[str, Any]) -> None:
        attempts = holder.message.deliveries
        _runs.mark_failed(
            self.store,
            fields["workflow"],
            fields["request_id"],
            reason,
            step,
            attempts,
            self.clock(),
            self._retries,
        )
        _event(logging.ERROR, "failed", reason=reason, **fields)
        self._ack(holder)
        with self._lock:
            self.stats.failed += 1

    def _retry(self, holder: _Holder, exc: Exception, fields: dict[str, Any]) -> None:
        _event(logging.WARNING, "retry", error=repr(exc), **fields)
        self._nack(holder, min(2.0**holder.message.deliveries * 0.1, 30.0))
        with self._lock:
            self.stats.retried += 1

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
                    _event(logging.WARNING, "extend-failed", error=repr(exc))

    def _dead_letter(self, holder: _Holder, reason: str, fields: dict[str, Any]) -> None:
        _event(logging.WARNING, "dead-letter", reason=reason, **fields)
        with holder.lock:
            if not holder.lost:
                self.queue.dead_letter(holder.message, reason)
        with self._lock:
            self.stats.dead_lettered += 1


def _input_of(pointer: Pointer, record: RunRecord) -> tuple[list[Any], dict[str, Any]]:
    """The request's input: stored with its claim, or carried by a format-1 message."""
    legacy = dataclasses.replace(record, input=pointer.legacy_input)
    arguments = record.arguments() or legacy.arguments()
    if arguments is None:
        raise MessageRejected(f"request {pointer.request_id!r} has no stored input to resume from")
    return arguments
