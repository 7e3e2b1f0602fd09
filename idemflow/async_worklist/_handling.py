"""What a worker does with one message, once for the thread worker and the asyncio worker.

Every decision of :mod:`idemflow.async_worklist.worker` about a received
message (reject, wait for a version, finish on the version it started with,
retry under the step's policy, then fail or compensate) is written here as the
engine's computation: it yields store requests and the queue requests
:class:`~idemflow.core.requests.Settle` (ack, nack, dead-letter the held message) and
:class:`~idemflow.core.requests.Send`. :class:`~idemflow.worker.Worker`
drives it with a blocking store and queue on threads,
:class:`~idemflow.async_worklist._asyncio_worker.AsyncWorker` awaits it on the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tenacity import wait_exponential

from idemflow import telemetry
from idemflow.async_worklist import _runs
from idemflow.async_worklist._scheduling import MAX_HOP, hop
from idemflow.async_worklist.aborts import abort_steps
from idemflow.async_worklist.messages import (
    Pointer,
    announcer,
    decode_pointer,
    encode_pointer,
    resolve_signing_key,
)
from idemflow.async_worklist.queues.base import Message, check_seconds
from idemflow.async_worklist.queues.lanes import lane_of
from idemflow.core.limit_spec import limit_whys
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, backoff, kept_for
from idemflow.core.requests import Send, Settle, Steps
from idemflow.core.step_retry import DEFAULT_STEP_RETRY, StepRetry
from idemflow.engine.execution import Plan, Suspended
from idemflow.engine.interpreter import ON_ABORT
from idemflow.engine.tx import Reader
from idemflow.errors import (
    CompensationError,
    ConfigurationError,
    InvalidInputError,
    LimitReachedError,
    MessageRejectedError,
    NonDeterminismError,
    StepFailedError,
)
from idemflow.limits.gate import gated
from idemflow.records import Attempts, Continuation, RunRecord, RunStatus, run_ref
from idemflow.running.request_spec import describe_request
from idemflow.running.runner import execution_steps, status_steps
from idemflow.running.workflows import Workflow
from idemflow.stores.base import AsyncStore, RowRef, Store
from idemflow.stores.expiry import KEEP_ALIVE, sweeps, watched

log = logging.getLogger("idemflow.worker")


def event(level: int, name: str, **fields: Any) -> None:
    """One worker log event (:func:`idemflow.telemetry.log_event` on ``idemflow.worker``)."""
    telemetry.log_event(log, level, name, **fields)


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
    cancelled: int = 0
    """Continuations of cancelled requests, dropped until an operator resumes them."""
    suspended: int = 0
    """Requests handed back to the queue at a sleep, a wait for a child or a receive."""
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return self.completed + self.aborted + self.duplicates


_REDELIVERY = wait_exponential(multiplier=0.1, max=30.0)
"""A failed attempt's message comes back after 0.2 s, 0.4 s, ... at most 30 s."""


def redelivery_delay(deliveries: int) -> float:
    """Seconds before a message delivered ``deliveries`` times is offered again (tenacity's wait:
    the queue, not a loop here, does the waiting)."""
    return backoff(_REDELIVERY, deliveries + 1)


class Holder:
    """The message being worked on; the heartbeat swaps in each extended receipt.

    ``lock`` (a thread's heartbeat) or ``alock`` (a task's) keeps an ack from racing an extension.
    """

    def __init__(self, message: Message) -> None:
        self.message = message
        self.lost = False
        self.seen: Attempts | None = None
        """The retry count the run record held when this delivery began (see ``_step_failed``)."""
        self.known: set[RowRef] = set()
        """The request's rows its execution met: what a long wait extends (:mod:`idemflow.stores.expiry`)."""
        self.lane = lane_of(message)
        """The lane its request's continuations go to: the message's, then its run record's."""
        self.lock = threading.Lock()
        self.alock = asyncio.Lock()


class Wait(Exception):
    """This worker cannot run the request now (version not held, code that differs)."""

    def __init__(
        self, why: str, *, bounded: bool = False, delay: float | None = None, recorded: bool = False
    ) -> None:
        super().__init__(why)
        self.why = why
        self.bounded = bounded
        """Counts toward ``max_deliveries`` (a workflow nobody here holds), then fails."""
        self.delay = delay
        """Seconds before it is offered again (None: ``version_wait``): a full limit's estimate."""
        self.recorded = recorded
        """The run record says ``why`` already: a request waiting again costs no write."""


class DeadlinePassed(Exception):
    """The request's deadline passed before it finished: end it as ``on_failure`` says."""

    def __init__(self, workflow: str, request_id: str, record: RunRecord) -> None:
        at = datetime.fromtimestamp(record.deadline or 0.0, UTC).isoformat(timespec="seconds")
        self.reason = f"deadline exceeded ({at})"
        super().__init__(self.reason)
        self.failure = StepFailedError(workflow, request_id, 0, "deadline", self.reason)


class Handling:
    """The per-message computation both workers share (see the module docstring).

    ``reader`` is where step bodies read: the blocking store, or None on an event loop.
    """

    def __init__(
        self,
        workflows: Iterable[Workflow[Any, Any]],
        *,
        store: Store | AsyncStore,
        reader: Reader | None,
        signing_key: bytes | str | None,
        max_deliveries: int,
        policy: RetryPolicy | None,
        version_wait: float,
        clock: Callable[[], float] | None,
        step_retry: StepRetry | None = None,
    ) -> None:
        self.registry: dict[str, dict[int, Workflow[Any, Any]]] = {}
        for flow in workflows:
            if not isinstance(flow, Workflow):
                raise TypeError(f"a worker needs @workflow functions, got {flow!r}")
            self.registry.setdefault(flow.name, {})[flow.version] = flow
        self.key = resolve_signing_key(signing_key)
        self.max_deliveries = max_deliveries
        self.step_retry = DEFAULT_STEP_RETRY if step_retry is None else step_retry
        """The retry policy of steps whose call and workflow name none."""
        self.halted: ConfigurationError | None = None
        """The first :class:`~idemflow.errors.ConfigurationError` met (refused credentials, a
        missing table or queue), from the store or the queue alike: retrying cannot help, so the
        worker stops taking messages and ``run`` raises it."""
        self.policy = policy
        self._retries = policy or DEFAULT_POLICY
        """Retries, and the retention of requests whose run record carries none of their own."""
        self.version_wait = check_seconds(version_wait, "version_wait", high=900.0)  # SQS's longest delay
        self.clock: Callable[[], float] = time.time if clock is None else clock
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._target = store
        self._reader = reader
        self._sweeps = sweeps(store)
        """The store keeps an unfinished request's rows by itself (its sweep): a wait with no
        known end needs no keep-alive wake-up."""

    def _settle(self, holder: Holder, fields: dict[str, Any]) -> Steps[bool]:
        """Process one message to ack, nack or dead letter. False if the request only waits."""
        started = time.monotonic()
        try:
            outcome = yield from self._finish(holder, fields)
        except InvalidInputError as invalid:  # MessageRejectedError too: the same on every delivery
            yield from self._dead_letter(holder, f"rejected: {invalid}", fields)
            return True
        except Wait as wait:
            yield from self._wait(holder, wait, fields)
            return False
        except StepFailedError as failed:
            yield from self._step_failed(holder, failed, fields)
            return True
        except DeadlinePassed as passed:
            yield from self._give_up(holder, passed.failure, 0, fields, passed.reason)
            return True
        except Exception as exc:  # noqa: BLE001 - the store or queue: retried, never a failed request
            self.halt(exc)  # first: the nack may meet the same refusal
            yield from self._retry(holder, exc, fields)
            return True
        yield Settle(holder, "ack")
        self._count(outcome)
        fields["seconds"] = round(time.monotonic() - started, 4)
        event(logging.INFO, "finished", outcome=outcome, **fields)
        return True

    def _finish(self, holder: Holder, fields: dict[str, Any]) -> Steps[str]:
        message = holder.message
        pointer = decode_pointer(message.body, self.key)
        fields.update(workflow=pointer.workflow, request_id=pointer.request_id, version=pointer.version)
        record = yield from status_steps(pointer.workflow, pointer.request_id, self._retries)
        if record is None:
            raise MessageRejectedError(
                f"no request {pointer.request_id!r} of {pointer.workflow!r} was submitted"
            )
        fields["version"] = record.version
        since = record.started_at if record.not_before is None else record.not_before
        if since is not None and message.deliveries == 1:
            telemetry.lag(max(self.clock() - since, 0.0), pointer.workflow)
        holder.lane = record.lane or holder.lane
        if record.status.final or record.status is RunStatus.FAILED:
            return "duplicate"
        if record.status is RunStatus.CANCELLED:
            return "cancelled"  # until an operator resumes it (which sends a fresh continuation)
        if pointer.continuation is not None and pointer.continuation.superseded_by(record.continuation):
            return "duplicate"  # a stray: the recorded continuation runs the request
        holder.seen = record.attempts
        now = self.clock()
        if record.deadline is not None and now >= record.deadline:
            raise DeadlinePassed(pointer.workflow, pointer.request_id, record)
        if record.attempts is not None and record.attempts.due > now:  # early: a long delay's hop
            yield Send(message.body, hop(record.attempts.due, now), holder.lane)
            fields["due"] = record.attempts.due
            return "suspended"
        if record.not_before is not None and record.not_before > now:  # a delayed request, early
            # (a queue's longest delay, a relay, a copy, a retry, clocks apart): queued again as a
            # fresh message, so waiting is never an attempt.
            yield Send(message.body, hop(record.not_before, now), holder.lane)
            fields["due"] = record.not_before
            return "suspended"
        flow = self._flow(pointer.workflow, record.version)
        policy = kept_for(self._retries, record.retention)  # the request's rows: its retention
        args, kwargs = _input_of(pointer, record)
        m = flow(*args, **kwargs)
        request = describe_request(m)
        if not request.matches(record.fingerprint):
            raise MessageRejectedError(f"input does not match the submitted request {pointer.request_id!r}")
        clearing = None if record.waiting is None else _clearing(pointer, record.waiting, policy)
        plan = Plan(
            version=record.version,
            resume=True,
            durable_outcome=True,
            step_errors=True,
            expected=pointer.steps,
            suspend=True,
            retry_in_place=False,
            announce=announcer(self.key),
            parent=record.parent,
            started_at=record.started_at,  # kept in the completion record
            incarnation=record.incarnation,
            lane=record.lane,
            no_longer_waiting=clearing,
            kept_until=record.kept_until,
        )
        try:
            steps = execution_steps(
                m,
                request,
                pointer.request_id,
                self._target,
                policy,
                self.clock,
                plan,
                (),
                reader=self._reader,
            )
            if flow.limits:
                steps = self._under_limits(steps, flow, pointer.request_id, clearing)
            done = yield from watched(steps, run_ref(pointer.workflow, pointer.request_id), holder.known)
        except LimitReachedError as full:  # a delayed continuation, never an attempt
            why = full.why
            raise Wait(why, delay=full.retry_after, recorded=record.waiting == why) from None
        except NonDeterminismError as exc:
            raise Wait(
                f"the code of version {record.version} differs from what the request ran: {exc}"
            ) from exc
        except Suspended as suspended:  # a timer, a child or a message: no worker waits for it
            suspended = suspended.capped(record.deadline)
            now = self.clock()
            due = suspended.due
            if due is None and self._sweeps:  # a child's outcome or a message wakes it
                fields["due"] = None
                yield from _runs.waiting_steps(pointer.workflow, pointer.request_id, suspended.why, policy)
                return "suspended"
            if due is None:  # rows expire by date alone: woken now and then to keep them
                due = now + policy.retention * KEEP_ALIVE
            fields["due"] = due
            continuation = Continuation.after(record.continuation, pointer.continuation)
            again = Pointer(pointer.workflow, record.version, pointer.request_id, continuation=continuation)
            yield Send(encode_pointer(again, self.key), hop(due, now), holder.lane)
            keep = self._keep(holder, due, now)
            yield from _runs.suspended_steps(
                pointer.workflow, pointer.request_id, suspended.why, continuation, policy, keep
            )
            return "suspended"
        return done.status.value  # its completion record is durable: the caller may ack

    def _keep(self, holder: Holder, until: float, now: float) -> _runs.Keep:
        """What a record write for a wait until ``until`` extends: the rows this delivery met."""
        return _runs.Keep(until, now, frozenset(holder.known), self._target.capabilities)

    def _under_limits(
        self,
        steps: Steps[RunRecord],
        flow: Workflow[Any, Any],
        request_id: str,
        clearing: Callable[[Collection[str]], Steps[None]] | None,
    ) -> Steps[RunRecord]:
        """``steps`` once ``flow``'s limits are held (a full one raises ``LimitReachedError``);
        the note saying the request waited for them goes then."""
        whys = limit_whys(flow.limits)
        held = None if clearing is None else (lambda: clearing(whys))
        return gated(steps, flow.limits, self.clock, workflow=flow.name, request_id=request_id, on_held=held)

    def _flow(self, name: str, version: int) -> Workflow[Any, Any]:
        versions = self.registry.get(name)
        if not versions:
            raise Wait(f"no worker here holds workflow {name!r}", bounded=True)
        flow = versions.get(version)
        if flow is None:
            held = ", ".join(str(v) for v in sorted(versions))
            raise Wait(f"waiting for a worker holding version {version} of {name!r} (this one holds {held})")
        return flow

    # -- outcomes -------------------------------------------------------------

    def _count(self, outcome: str) -> None:
        with self._lock:
            if outcome == "duplicate":
                self.stats.duplicates += 1
            elif outcome == "cancelled":
                self.stats.cancelled += 1
            elif outcome == "suspended":
                self.stats.suspended += 1
            elif outcome == RunStatus.ABORTED.value:
                self.stats.aborted += 1
            else:
                self.stats.completed += 1

    def _wait(self, holder: Holder, wait: Wait, fields: dict[str, Any]) -> Steps[None]:
        if wait.bounded and holder.message.deliveries >= self.max_deliveries:
            yield from self._fail(holder, wait.why, 0, fields)
            return
        if not wait.recorded:
            yield from _runs.waiting_steps(fields["workflow"], fields["request_id"], wait.why, self._retries)
        limited = wait.delay is not None  # a full limit: routine, not a warning
        event(logging.INFO if limited else logging.WARNING, "waiting", why=wait.why, **fields)
        if wait.bounded:
            yield Settle(holder, "nack", {"delay": self.version_wait})
        elif not holder.lost:  # another worker holds it now
            # A fresh message, so waiting out a deploy or a limit never counts as a failed attempt
            # (nor against a queue's own redrive limit); a crash before the ack only duplicates it.
            delay = self.version_wait if wait.delay is None else min(wait.delay, MAX_HOP)
            yield Send(holder.message.body, delay, holder.lane)
            yield Settle(holder, "ack")
        with self._lock:
            self.stats.waiting += 1

    def _step_failed(self, holder: Holder, failed: StepFailedError, fields: dict[str, Any]) -> Steps[None]:
        """A step raised: try it again later under its policy, as a delayed continuation whose
        count is in the run record; once the policy ends, fail or compensate the request."""
        fields["step"] = failed.step
        policy = failed.retry if failed.retry is not None else self.step_retry
        seen, now = holder.seen, self.clock()
        count = (0 if seen is None else seen.of(failed.step, failed.identity)) + 1
        first = seen.first if seen is not None and count > 1 else now
        error = failed.error if failed.error is not None else failed
        wait = policy.next_delay(count, error, elapsed=now - first)
        if wait is not None:
            attempts = Attempts(failed.step, failed.identity, count, first, now + wait, failed.cause[:500])
            counted = yield from _runs.attempt_steps(
                failed.workflow,
                failed.request_id,
                seen,
                attempts,
                self._retries,
                self._keep(holder, now + wait, now),
            )
            if counted:  # else another delivery of this request counted it: this one is a duplicate
                yield Send(holder.message.body, hop(attempts.due, now), holder.lane)
            event(
                logging.WARNING,
                "retry",
                error=failed.cause,
                failed_attempts=count,
                due=attempts.due,
                duplicate=not counted,
                **fields,
            )
            yield Settle(holder, "ack")
            with self._lock:
                self.stats.retried += 1
            return
        yield from self._give_up(holder, failed, count, fields)

    def _give_up(
        self, holder: Holder, failed: StepFailedError, count: int, fields: dict[str, Any], reason: str = ""
    ) -> Steps[None]:
        """End the request as its workflow's ``on_failure`` says: ``failed``, or compensated and
        ``aborted`` (a compensation that cannot complete ends it ``failed``, naming it)."""
        flow = self._flow(failed.workflow, fields["version"])
        notification = failed.identity.startswith(ON_ABORT + " ")  # its undo is done: aborted
        if failed.identity.startswith("compensate "):  # an undo that cannot complete: never dropped
            why = f"compensation of step {failed.step} ({failed.identity}) failed: {failed.cause}"
            yield from self._fail(holder, reason or why, failed.step, fields, count, failed.identity)
            return
        if flow.on_failure != "compensate" and not notification:
            yield from self._fail(holder, reason or failed.cause, failed.step, fields, count, failed.identity)
            return
        reason = reason or f"step {failed.step} ({failed.identity}) failed: {failed.cause}"
        try:
            yield from abort_steps(  # the abort memo decides: a notification's keeps its reason
                self._target,
                [flow],
                flow.name,
                failed.request_id,
                reason,
                self.policy,
                self.clock,
                reader=self._reader,
                retry_in_place=False,
            )
        except Suspended as suspended:  # an undo waits for its call to end: a durable timer
            now = self.clock()
            due = now if suspended.due is None else suspended.due
            yield Send(holder.message.body, hop(due, now), holder.lane)  # this delivery, again
            yield from _runs.waiting_steps(failed.workflow, failed.request_id, suspended.why, self._retries)
            event(logging.INFO, "suspended", due=due, waiting=suspended.why, **fields)
            yield Settle(holder, "ack")
            return
        except CompensationError as undo:  # tried again as a step of its own, from the abort memo
            cause = f"{type(undo.__cause__ or undo).__name__}: {undo.__cause__ or undo}"
            retry = failed.retry if failed.retry is not None else flow.retry
            name = undo.name if undo.name.startswith("compensate ") else "compensate " + undo.name
            again = StepFailedError(
                failed.workflow, failed.request_id, undo.step, name, cause, retry, undo.__cause__
            )
            event(logging.ERROR, "compensation-failed", error=cause, **fields)
            yield from self._step_failed(holder, again, fields)
            return
        except Exception as exc:  # noqa: BLE001 - the store: the delivery is tried again
            yield from self._retry(holder, exc, fields)
            return
        event(logging.WARNING, "compensated", reason=reason, **fields)
        yield Settle(holder, "ack")
        with self._lock:
            self.stats.aborted += 1

    def _fail(
        self,
        holder: Holder,
        reason: str,
        step: int,
        fields: dict[str, Any],
        attempts: int | None = None,
        identity: str | None = None,
    ) -> Steps[None]:
        if attempts is None:
            attempts = holder.message.deliveries
        yield from _runs.failed_steps(
            fields["workflow"],
            fields["request_id"],
            reason,
            step,
            attempts,
            self.clock(),
            self._retries,
            identity if step else None,  # step 0: no step ran (a deadline, a version nobody holds)
        )
        event(logging.ERROR, "failed", reason=reason, identity=identity, **fields)
        yield Settle(holder, "ack")
        with self._lock:
            self.stats.failed += 1

    def halt(self, exc: Exception) -> bool:
        """Whether ``exc`` stops the worker: a :class:`~idemflow.errors.ConfigurationError` does
        (every later message would meet it too); the first one is kept for ``run`` to raise."""
        if not isinstance(exc, ConfigurationError):
            return False
        with self._lock:
            first = self.halted is None
            if first:
                self.halted = exc
        if first:
            fields = {"code": str(exc.code), "backend": exc.backend, "service_code": exc.service_code}
            event(logging.ERROR, "stopping-on-configuration-error", error=str(exc), **fields)
        return True

    def _retry(self, holder: Holder, exc: Exception, fields: dict[str, Any]) -> Steps[None]:
        event(logging.WARNING, "retry", error=repr(exc), **fields)
        yield Settle(holder, "nack", {"delay": redelivery_delay(holder.message.deliveries)})
        with self._lock:
            self.stats.retried += 1

    def _dead_letter(self, holder: Holder, reason: str, fields: dict[str, Any]) -> Steps[None]:
        event(logging.WARNING, "dead-letter", reason=reason, **fields)
        yield Settle(holder, "dead_letter", {"reason": reason})
        with self._lock:
            self.stats.dead_lettered += 1

    def _relayed(self, sent: int) -> None:
        if sent:
            with self._lock:
                self.stats.relayed += sent


def _input_of(pointer: Pointer, record: RunRecord) -> tuple[list[Any], dict[str, Any]]:
    """The request's input: stored with its claim, or carried by a format-1 message."""
    legacy = dataclasses.replace(record, input=pointer.legacy_input)
    arguments = record.arguments() or legacy.arguments()
    if arguments is None:
        raise MessageRejectedError(f"request {pointer.request_id!r} has no stored input to resume from")
    return arguments


def _clearing(pointer: Pointer, why: str, policy: RetryPolicy) -> Callable[[Collection[str]], Steps[None]]:
    """What clears the run record's note ``why`` once the request no longer waits for it: told the
    notes of the limits just held, it writes only if ``why`` is one of them."""

    def no_longer_waiting(whys: Collection[str]) -> Steps[None]:
        if why in whys:
            yield from _runs.waited_steps(pointer.workflow, pointer.request_id, why, policy)

    return no_longer_waiting
