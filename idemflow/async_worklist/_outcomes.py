"""How a delivery ends, once its request ran or could not: acked with its outcome counted,
waiting for a version or a limit, tried again under the step's retry policy, failed, compensated
and aborted as ``on_failure`` says, or dead-lettered; and the worker's settings and counters
those decisions read.

:class:`~idemflow.async_worklist._handling.Handling` runs the request a message points to and
hands its end to these methods; they never call back into it, so what a worker decides about a
failure can be read apart from how it runs a request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from idemflow.async_worklist import _runs
from idemflow.async_worklist._delivery import Holder, Wait, WorkerStats, event, redelivery_delay
from idemflow.async_worklist._scheduling import MAX_HOP, hop
from idemflow.async_worklist.aborts import abort_steps
from idemflow.async_worklist.messages import resolve_signing_key
from idemflow.async_worklist.queues.base import check_seconds
from idemflow.core.places import Places, from_rows
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.core.requests import Send, Settle, Steps
from idemflow.core.step_retry import DEFAULT_STEP_RETRY, StepRetry
from idemflow.engine.execution import Suspended
from idemflow.engine.interpreter import ON_ABORT
from idemflow.engine.tx import Reader
from idemflow.errors import CompensationError, ConfigurationError, StepFailedError
from idemflow.records import Attempts, RunStatus
from idemflow.running.workflows import Workflow
from idemflow.stores.base import AsyncStore, Store
from idemflow.stores.long_waits import sweeps


class Outcomes:
    """The worker's settings and counters, and the computations that end a delivery.

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

    def _flow(self, name: str, version: int) -> Workflow[Any, Any]:
        versions = self.registry.get(name)
        if not versions:
            raise Wait(f"no worker here holds workflow {name!r}", bounded=True)
        flow = versions.get(version)
        if flow is None:
            held = ", ".join(str(v) for v in sorted(versions))
            raise Wait(f"waiting for a worker holding version {version} of {name!r} (this one holds {held})")
        return flow

    def _keep(self, holder: Holder, until: float, now: float) -> _runs.Keep:
        """What a record write for a wait until ``until`` extends: the rows this delivery met."""
        return _runs.Keep(until, now, frozenset(holder.known), self._target.capabilities)

    @staticmethod
    def _seen(holder: Holder, workflow: str, request_id: str) -> Places | None:
        """The places of the steps this delivery met, for the record write that ends it."""
        return from_rows(holder.known, workflow, request_id)

    def _count(self, outcome: str) -> None:
        with self._lock:
            if outcome == "duplicate":
                self.stats.duplicates += 1
            elif outcome == "cancelled":
                self.stats.cancelled += 1
            elif outcome in ("suspended", "renewed"):  # renewed: its next incarnation is queued
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
        policy = _retry_of(failed) or self.step_retry
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
                self._seen(holder, failed.workflow, failed.request_id),
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
            seen = self._seen(holder, failed.workflow, failed.request_id)
            yield from _runs.waiting_steps(
                failed.workflow, failed.request_id, suspended.why, self._retries, seen
            )
            event(logging.INFO, "suspended", due=due, waiting=suspended.why, **fields)
            yield Settle(holder, "ack")
            return
        except CompensationError as undo:  # tried again as a step of its own, from the abort memo
            cause = f"{type(undo.__cause__ or undo).__name__}: {undo.__cause__ or undo}"
            retry = _retry_of(failed) or flow.retry
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
            self._seen(holder, fields["workflow"], fields["request_id"]),
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


def _retry_of(failed: StepFailedError) -> StepRetry | None:
    """The retry policy the engine attached to a step's failure (None: the default applies)."""
    retry = failed.retry
    return retry if isinstance(retry, StepRetry) else None
