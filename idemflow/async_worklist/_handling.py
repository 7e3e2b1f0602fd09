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

import dataclasses
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist import _runs
from idemflow.async_worklist._delivery import DeadlinePassed, Holder, Wait, event
from idemflow.async_worklist._outcomes import Outcomes
from idemflow.async_worklist._scheduling import hop
from idemflow.async_worklist.messages import Pointer, announcer, decode_pointer, encode_pointer
from idemflow.core.limit_spec import limit_whys
from idemflow.core.memos import incarnation_number
from idemflow.core.policy import RetryPolicy, kept_for
from idemflow.core.requests import Send, Settle, Steps
from idemflow.engine.execution import Cancelled, Plan, Renewed, Suspended
from idemflow.errors import (
    InvalidInputError,
    LimitReachedError,
    MessageRejectedError,
    NonDeterminismError,
    StepFailedError,
)
from idemflow.limits.gate import gated
from idemflow.records import Continuation, RunRecord, RunStatus, run_ref
from idemflow.running.request_spec import describe_request
from idemflow.running.runner import execution_steps
from idemflow.running.workflows import Workflow
from idemflow.stores.long_waits import KEEP_ALIVE, watched


class Handling(Outcomes):
    """The per-message computation both workers share (see the module docstring): the request a
    message points to, run to its outcome, or ended as :class:`Outcomes` decides."""

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
        found = yield from _runs.read_steps(pointer.workflow, pointer.request_id, self._retries)
        if found is None:
            raise MessageRejectedError(
                f"no request {pointer.request_id!r} of {pointer.workflow!r} was submitted"
            )
        record, row = found
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
        renewed = incarnation_number(record.incarnation) > 1  # its input is a later incarnation's
        if renewed:  # which the first's fingerprint does not match: the record names the request
            request = dataclasses.replace(request, fingerprint=record.fingerprint, aliases=())
        elif not request.matches(record.fingerprint):
            raise MessageRejectedError(f"input does not match the submitted request {pointer.request_id!r}")
        clearing = None if record.waiting is None else _clearing(pointer, record.waiting, policy)
        plan = Plan(
            version=record.version,
            resume=True,
            durable_outcome=True,
            step_errors=True,
            expected=() if renewed else pointer.steps,  # a journal is the first incarnation's
            suspend=True,
            retry_in_place=False,
            announce=announcer(self.key),
            parent=record.parent,
            started_at=record.started_at,  # kept in the completion record
            incarnation=record.incarnation,
            lane=record.lane,
            no_longer_waiting=clearing,
            kept_until=record.kept_until,
            tags=record.tags,  # kept in the completion record
            stop_if_cancelled=True,
            record_version=row.version,
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
        except (
            Cancelled
        ):  # an operator's cancel landed while it ran: it stopped before an outside call or at its completion
            return "cancelled"
        except LimitReachedError as full:  # a delayed continuation, never an attempt
            why = full.why
            raise Wait(why, delay=full.retry_after, recorded=record.waiting == why) from None
        except NonDeterminismError as exc:
            raise Wait(
                f"the code of version {record.version} differs from what the request ran: {exc}"
            ) from exc
        except Renewed as renewal:  # continued as new: the next incarnation is a continuation of its own
            if renewal.duplicate:  # another delivery switched: it sends (or its message comes back)
                return "duplicate"
            again = Pointer(pointer.workflow, record.version, pointer.request_id)
            yield Send(encode_pointer(again, self.key), 0.0, holder.lane)
            return "renewed"
        except Suspended as suspended:  # a timer, a child or a message: no worker waits for it
            suspended = suspended.capped(record.deadline)
            now = self.clock()
            due = suspended.due
            seen = self._seen(holder, pointer.workflow, pointer.request_id)
            if due is None and self._sweeps:  # a child's outcome or a message wakes it
                fields["due"] = None
                yield from _runs.waiting_steps(
                    pointer.workflow, pointer.request_id, suspended.why, policy, seen
                )
                return "suspended"
            if due is None:  # rows expire by date alone: woken now and then to keep them
                due = now + policy.retention * KEEP_ALIVE
            fields["due"] = due
            continuation = Continuation.after(record.continuation, pointer.continuation)
            again = Pointer(pointer.workflow, record.version, pointer.request_id, continuation=continuation)
            yield Send(encode_pointer(again, self.key), hop(due, now), holder.lane)
            keep = self._keep(holder, due, now)
            yield from _runs.suspended_steps(
                pointer.workflow, pointer.request_id, suspended.why, continuation, policy, keep, seen
            )
            return "suspended"
        return done.status.value  # its completion record is durable: the caller may ack

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
