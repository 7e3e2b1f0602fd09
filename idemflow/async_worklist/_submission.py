"""The client side of the asynchronous variant: ``checkpoint``, ``submit``, ``asubmit``.

``submit`` runs a workflow in the caller up to its first ``checkpoint()``,
durably enqueues the rest as a continuation message and returns at once;
background :class:`~idemflow.worker.Worker` processes finish
it. The same workflow code runs under :func:`idemflow.run`, where the
checkpoint is a no-op. Submitting the same request again is harmless and
cheap: a copy of a request already submitted answers from its run record and
enqueues nothing, so the workers run it once however many copies arrive.
The handle it returns and the status it reads are :mod:`idemflow.async_worklist._handles`';
the pointer it sends and its signing key :mod:`idemflow.async_worklist.messages`'.

>>> from idemflow import atomic, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow import checkpoint
>>> from idemflow.client import submit
>>> from idemflow.worker import MemoryQueue
>>> @workflow("vote")
... def vote(ballot):
...     yield atomic("tablea", ballot["poll"], lambda tx: tx.put(ballot["voter"], ballot["choice"]))
...     yield checkpoint()
...     yield atomic("tableb", ballot["poll"], lambda tx: tx.increment(ballot["choice"]))
>>> store, queue = MemoryStore(), MemoryQueue()
>>> ballot = {"poll": "p", "voter": "v", "choice": "yes"}
>>> pending = submit(vote(ballot), request_id="b-1", store=store, queue=queue)
>>> pending.status().value, queue.approximate_size()
('running', 1)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist import _runs
from idemflow.async_worklist._handles import AsyncPending, Pending, RequestStatus
from idemflow.async_worklist._queue_answers import on_async_queue, on_queue
from idemflow.async_worklist._scheduling import TAKEOVER, Priority, check_lanes, hop, schedule, waiting_until
from idemflow.async_worklist.messages import Pointer, announcer, encode_pointer, resolve_signing_key
from idemflow.async_worklist.outbox import DEFAULT_GRACE
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.queues.lanes import has_lanes
from idemflow.core.places import from_journal, places_row
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.core.requests import CommitCache, Read, Send, Sleep, Steps
from idemflow.core.tags import check_tags
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.engine.execution import AtCheckpoint, Checkpointed, Plan, Submission, Suspended
from idemflow.engine.monad import Bind, Call, Checkpoint, Idem
from idemflow.engine.tx import Reader
from idemflow.errors import BackendError, InvalidInputError, VersionNotHeldError
from idemflow.keys import check_duration, check_request_id
from idemflow.records import Continuation, OutboxEntry, RunRecord, outbox_ref, run_ref, submitted_input
from idemflow.running.request_spec import Request, describe_request
from idemflow.running.runner import execution_steps
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Delete, Op, Put, Store

log = logging.getLogger("idemflow.submit")


def checkpoint() -> Idem[None]:
    """Where a client may be answered early: ``yield checkpoint()``."""
    return Idem(Checkpoint())


def submit(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store,
    queue: Queue,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] | None = None,
    grace: float = DEFAULT_GRACE,
    deadline: float | None = None,
    delay: float | timedelta | None = None,
    not_before: float | datetime | None = None,
    priority: Priority = "normal",
    tags: Mapping[str, str] | None = None,
) -> Pending:
    """Run ``m`` up to its first checkpoint, hand the rest to workers, return a :class:`Pending`.

    ``m`` must be a ``@workflow`` call (workers find workflows by name and
    version). The input is stored with the request's first commit, together
    with an outbox entry saying its continuation is due; at the checkpoint a
    small pointer is sent to ``queue``. If the process dies or the queue is
    down before that, a worker's relay sends it ``grace`` seconds after the
    claim: a submitted request always has a durable way to finish.

    If the workflow finishes or aborts before any checkpoint (or the request
    already finished), its completion record is written durably before
    ``submit`` returns and the handle carries the outcome. A request that
    started on another version of the workflow is left to the workers that
    hold it. ``signing_key`` (default: ``IDEMFLOW_SIGNING_KEY``) signs the
    pointer. ``clock`` is the wall clock of the run (seconds since the epoch:
    ``now()`` values, the claim's time, the outbox due time, when a ``delay``
    or a ``@workflow(timeout=)`` counts from), ``time.time`` by default, as in
    :func:`idemflow.run`. Rows expire a retention after the later of
    it and the machine's ``time.time()``, so a test's clock in the past writes
    no row that is already expired, and one moved ahead (simulated weeks)
    writes rows that live a retention from its time.

    ``deadline`` (epoch seconds) is when the request must have finished; the
    workflow's ``@workflow(timeout=)`` gives one too, counted from now (the
    earlier wins). Past it a worker ends the request as the workflow's
    ``on_failure`` says: ``failed``, or compensated and ``aborted``. A copy of
    a request already submitted keeps the first one's deadline.

    ``policy.retention`` is stored with the request: every row written for it
    afterwards, by workers and operators too, expires by it (a copy keeps
    the first one's).

    ``delay`` (seconds or a ``timedelta``) or ``not_before`` (epoch seconds or an aware
    ``datetime``), one of them, delays the request: it is
    recorded durably at once, but no step of it runs before that time, not even those before its
    first checkpoint (a worker runs them all); ``status`` says ``waiting until <time>``. A
    ``@workflow(timeout=)`` then counts from that time. ``priority`` (``"high"``, ``"normal"``,
    ``"low"``) picks the lane of a queue opened with lanes (``?lanes=true``), which workers drain
    highest first. A copy of a request already submitted keeps the first one's time and lane.

    ``tags`` (``{"customer": "c-1"}``: at most 16, keys of letters, digits and ``_ - . :``,
    values up to 256 characters) say what the request is about: its run record keeps them to
    the end, and ``idemflow runs list --tag customer=c-1`` (``admin.runs(tags=)``) finds it. They
    are not part of the input: a copy with other tags is a copy, and the first one's stay.
    """
    request = _submission(m, request_id)
    check_lanes(priority, has_lanes(queue))
    stored = check_tags(tags)
    steps = submission_steps(
        m,
        request,
        request_id,
        store,
        queue.max_body_bytes,
        signing_key,
        policy,
        clock,
        grace,
        reader=store,
        deadline=deadline,
        timing=(delay, not_before, priority),
        tags=stored,
    )
    outcome = drive(steps, store, on_queue(queue))
    return Pending(store, request.workflow, request_id, outcome=outcome)


async def asubmit(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store | AsyncStore,
    queue: Queue | AsyncQueue,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] | None = None,
    grace: float = DEFAULT_GRACE,
    deadline: float | None = None,
    delay: float | timedelta | None = None,
    not_before: float | datetime | None = None,
    priority: Priority = "normal",
    tags: Mapping[str, str] | None = None,
) -> AsyncPending:
    """:func:`submit`, awaitable: the same steps, claim, outbox and pointer, on the event loop.

    ``store`` and ``queue`` are asynchronous (``AsyncDynamoDBStore``,
    ``AsyncSqsQueue``, ...) or blocking ones, then used from threads of their own.
    The :class:`AsyncPending` returned is awaited: ``await pending.result()``.
    """
    request = _submission(m, request_id)
    check_lanes(priority, has_lanes(queue))
    stored = check_tags(tags)
    target, sink = to_async(store), to_async_queue(queue)
    steps = submission_steps(
        m,
        request,
        request_id,
        target,
        sink.max_body_bytes,
        signing_key,
        policy,
        clock,
        grace,
        reader=sync_reader(target),
        deadline=deadline,
        timing=(delay, not_before, priority),
        tags=stored,
    )
    outcome = await adrive(steps, target, on_async_queue(sink))
    return AsyncPending(target, request.workflow, request_id, outcome=outcome)


def _submission(m: Idem[Any], request_id: str) -> Request:
    call = m.node if isinstance(m, Idem) else None
    if not isinstance(call, Call):
        raise InvalidInputError("submit() needs a @workflow call, e.g. submit(my_workflow(input), ...)")
    check_request_id(request_id)
    return describe_request(m)


def submission_steps(
    m: Idem[Any],
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    max_body_bytes: int,
    signing_key: bytes | str | None,
    policy: RetryPolicy | None,
    clock: Callable[[], float] | None,
    grace: float,
    *,
    reader: Reader | None,
    deadline: float | None = None,
    timing: tuple[object, object, object] = (None, None, "normal"),
    tags: Mapping[str, str] | None = None,
) -> Steps[RequestStatus | None]:
    """What ``submit`` and ``asubmit`` do (one computation): the outcome, if known already.

    ``timing`` is ``submit``'s ``(delay, not_before, priority)``, checked here before any write;
    ``tags`` its tags, checked by the caller (:func:`~idemflow.core.tags.check_tags`).
    """
    wall = time.time if clock is None else clock
    started = wall()
    retention = check_duration((policy or DEFAULT_POLICY).retention, "retention")
    when = schedule(*timing, now=started, retention=retention)
    start = started if when.not_before is None else when.not_before
    # A relay sends a delayed request's pointer once it is due, never sooner than the grace.
    entry = OutboxEntry(request.workflow, request.version, request_id, max(start, started + grace))
    due_by = _deadline(request, deadline, start)
    if when.not_before is not None and due_by is not None and due_by <= when.not_before:
        raise InvalidInputError(f"submit deadline {due_by!r} is not after the request's start {start!r}")
    stored = submitted_input(request.input(), retention, not_before=when.not_before, lane=when.lane)
    held = None if when.not_before is None else waiting_until(when.not_before)
    key = resolve_signing_key(signing_key)
    plan = Plan(
        version=request.version,
        at_checkpoint=AtCheckpoint.STOP,
        submission=Submission(stored, entry, due_by, held),
        durable_outcome=True,  # the handle returned says final: so must the store
        suspend=True,
        announce=announcer(key),
        lane=when.lane,
        tags=tags,
    )
    if request.call is not None and request.call.limits:
        # Under limits nothing runs in the caller: the request is claimed and queued at once, as if
        # it began with a checkpoint, and a worker runs it when its limits have room.
        m = _queued_first(m)
    try:
        record = yield from execution_steps(
            m, request, request_id, store, policy, wall, plan, (), reader=reader
        )
    except Checkpointed as reached:
        pointer = Pointer(request.workflow, reached.version or request.version, request_id, reached.journal)
        seen = from_journal(reached.journal)
        # Where the steps before the checkpoint keep their memos, so they are listed without the
        # code: written with the outbox entry's delete, in its commit where that costs nothing.
        expires = max(time.time(), wall()) + retention
        capabilities = store.capabilities
        together = capabilities.cross_partition_commit and not capabilities.transaction_surcharge
        placed = None if seen is None else (places_row(seen, request.workflow, request_id, expires), together)
        if reached.duplicate:  # the first submit sends it, or the relay for its outbox entry
            claimed = reached.claimed_at
            if reached.version is not None:  # this code cannot replay the first's steps
                answered, first = yield from _first_submit(request.workflow, request_id, claimed, wall)
                if answered:
                    return first
            if claimed is not None and wall() - claimed < TAKEOVER:
                return None  # the first submit is most likely alive and sending: enqueue nothing
            if (yield Read(outbox_ref(request.workflow, request_id))) is None:
                return None  # sent already
            # A retry after the first submit died before its send: send now rather than wait for
            # the relay (a relay racing this sends a second pointer, which the memos make harmless),
            # when and where the first asked.
            found = yield Read(run_ref(request.workflow, request_id))
            first_run = None if found is None else RunRecord.from_json(found.value)
            due = None if first_run is None else first_run.not_before
            lane = None if first_run is None else first_run.lane
            yield from _send(
                pointer, key, max_body_bytes, 0.0 if due is None else hop(due, wall()), lane, placed
            )
            return None
        if isinstance(reached, Suspended):
            reached = reached.capped(due_by)
            if reached.due is None:  # a child's outcome or a message wakes it: no continuation yet
                yield from _runs.waiting_steps(request.workflow, request_id, reached.why, met=seen)
                yield CommitCache([Delete(outbox_ref(request.workflow, request_id))])
                return None
            continuation = Continuation.after()
            pointer = dataclasses.replace(pointer, continuation=continuation)
            if (yield from _send(pointer, key, max_body_bytes, hop(reached.due, wall()), when.lane)):
                yield from _runs.suspended_steps(
                    request.workflow, request_id, reached.why, continuation, met=seen
                )
            else:  # the relay's pointer, which carries none, resumes it
                yield from _runs.waiting_steps(request.workflow, request_id, reached.why, met=seen)
            return None
        wait = 0.0 if when.not_before is None else hop(when.not_before, wall())
        yield from _send(pointer, key, max_body_bytes, wait, when.lane, placed)
        return None
    except VersionNotHeldError as other:  # a duplicate after a deploy: its own version finishes it
        yield from _send(Pointer(request.workflow, other.version, request_id), key, max_body_bytes)
        return None
    return RequestStatus.of(record)


def _queued_first(m: Idem[Any]) -> Idem[Any]:
    """``m`` behind a checkpoint: ``submit`` stops there, and a checkpoint is no step, so the
    workers run ``m`` itself with nothing journaled before it."""
    return Idem(Bind(Checkpoint(), lambda _: m))


def _first_submit(
    workflow: str, request_id: str, claimed: float | None, wall: Callable[[], float]
) -> Steps[tuple[bool, RequestStatus | None]]:
    """What the first ``submit`` of a request running on another version answered, for a copy.

    The copy cannot replay that version's steps, and those before the checkpoint may still
    refuse the request: answering "accepted" at once could contradict the first's answer. So it
    watches the outbox entry, which goes with the checkpoint's send or after a final outcome
    (committed first): gone, the run record says which. Answers (True, the first's final
    status or None once its continuation is out), or (False, None) past :data:`TAKEOVER`: the
    first is presumed dead, and the caller sends the continuation itself.
    """
    looks = 0
    while claimed is None or wall() - claimed < TAKEOVER:
        if (yield Read(outbox_ref(workflow, request_id))) is None:
            row = yield Read(run_ref(workflow, request_id))
            record = None if row is None else RunRecord.from_json(row.value)
            if record is not None and record.status.final:
                return True, RequestStatus.of(record)
            return True, None  # sent: the request is the workers' now
        looks += 1
        yield Sleep(min(0.01 * 2**looks, 0.5), time.sleep)
    return False, None


def _deadline(request: Request, deadline: object, now: float) -> float | None:
    """The request's deadline: ``submit(deadline=)`` or ``now`` (when it may start) plus
    ``@workflow(timeout=)``, the earlier."""
    if deadline is not None and (
        isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not math.isfinite(deadline)
    ):
        raise InvalidInputError(f"submit deadline must be epoch seconds, not {deadline!r}")
    timeout = request.call.timeout if request.call is not None else None
    candidates = [
        float(at) for at in (deadline, None if timeout is None else now + timeout) if at is not None
    ]
    return min(candidates) if candidates else None


def _send(
    pointer: Pointer,
    key: bytes | None,
    max_body_bytes: int,
    delay: float = 0.0,
    lane: str | None = None,
    placed: tuple[Put, bool] | None = None,
) -> Steps[bool]:
    """Send the pointer and clear the outbox entry (and, at a checkpoint, write the places row
    ``placed`` holds, in the same commit if its flag says one may span partitions); a queue that
    fails leaves it to the relay (False)."""
    body = encode_pointer(pointer, key)
    if len(body.encode("utf-8")) > max_body_bytes:  # hundreds of long-named steps
        body = encode_pointer(dataclasses.replace(pointer, steps=()), key)
    try:
        with telemetry.span("idemflow.queue.send", workflow=pointer.workflow, request_id=pointer.request_id):
            yield Send(body, delay, lane)
    except BackendError as exc:  # QueueError, TransientError, ConfigurationError
        fields = {"workflow": pointer.workflow, "version": pointer.version, "request_id": pointer.request_id}
        telemetry.log_event(log, logging.WARNING, "send-failed-left-to-the-relay", **fields, error=str(exc))
        return False
    cleared: list[Op] = [Delete(outbox_ref(pointer.workflow, pointer.request_id))]
    if placed is not None and placed[1]:
        cleared.append(placed[0])
    yield CommitCache(cleared)
    if placed is not None and not placed[1]:
        yield CommitCache([placed[0]])
    return True
