"""The client side of the asynchronous variant: ``checkpoint``, ``submit``, ``status``.

``submit`` runs a workflow in the caller up to its first ``checkpoint()``,
durably enqueues the rest as a continuation message and returns at once;
background :class:`~idemflow.async_worklist.worker.Worker` processes finish
it. The same workflow code runs under :func:`idemflow.run`, where the
checkpoint is a no-op. Submitting the same request again is harmless: the
steps replay from their memos and the continuation is enqueued again, which
workers treat as a duplicate.

>>> from idemflow import MemoryStore, atomic, workflow
>>> from idemflow.async_worklist import MemoryQueue, checkpoint, submit
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
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.async_worklist.outbox import DEFAULT_GRACE
from idemflow.async_worklist.queues.base import Queue
from idemflow.engine import AtCheckpoint, Checkpointed, Plan, Submission
from idemflow.errors import InvalidInputError, RequestFailed, StoreError, VersionNotHeldError, WorkflowAborted
from idemflow.keys import check_request_id
from idemflow.monad import Call, Checkpoint, Idem
from idemflow.policy import RetryPolicy
from idemflow.records import Failure, OutboxEntry, RunRecord, RunStatus, outbox_ref
from idemflow.runner import describe_request, execute, run_status
from idemflow.serialization import JSON
from idemflow.stores.base import Delete, Store

SIGNING_KEY_ENV = "IDEMFLOW_SIGNING_KEY"

log = logging.getLogger("idemflow.submit")


def checkpoint() -> Idem[None]:
    """Where a client may be answered early: ``yield checkpoint()``."""
    return Idem(Checkpoint())


def resolve_signing_key(explicit: bytes | str | None) -> bytes | None:
    """The HMAC key: the one given, else ``IDEMFLOW_SIGNING_KEY``, else None (unsigned)."""
    key = explicit if explicit is not None else os.environ.get(SIGNING_KEY_ENV)
    if key is None or key == "":
        return None
    return key.encode("utf-8") if isinstance(key, str) else key


@dataclass(frozen=True, slots=True)
class RequestStatus:
    """Where a request stands and its outcome.

    ``status`` is ``unknown | running | completed | aborted | failed``;
    ``version`` the workflow version it runs on; ``failure`` why it failed;
    ``waiting`` why no worker could run it yet (e.g. no worker holds its version).
    """

    status: RunStatus
    result: JSON = None
    reason: JSON = None
    version: int = 1
    failure: Failure | None = None
    waiting: str | None = None

    @classmethod
    def of(cls, record: RunRecord) -> RequestStatus:
        return cls(
            record.status, record.result, record.reason, record.version, record.failure, record.waiting
        )


def status(store: Store, workflow: str, request_id: str) -> RequestStatus:
    """The status of a request as its run record tells (``unknown`` if it has none)."""
    record = run_status(store, workflow, request_id)
    if record is None:
        return RequestStatus(RunStatus.UNKNOWN)
    return RequestStatus.of(record)


class Pending:
    """A handle on a submitted request.

    ``outcome`` is the final :class:`RequestStatus` when it is known without
    asking the store: ``submit`` saw the request finish (it completed or
    aborted before any checkpoint, or was a duplicate of a finished request),
    or this handle already read a final status. ``sleep`` and ``clock``
    (monotonic seconds) pace :meth:`result`'s polling.
    """

    def __init__(
        self,
        store: Store,
        workflow: str,
        request_id: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        outcome: RequestStatus | None = None,
    ) -> None:
        self.store = store
        self.workflow = workflow
        self.request_id = request_id
        self.outcome = outcome
        self._sleep = sleep
        self._clock = clock

    def _current(self) -> RequestStatus:
        if self.outcome is None:
            current = status(self.store, self.workflow, self.request_id)
            if not current.status.final:
                return current
            self.outcome = current  # final: it never changes again
        return self.outcome

    def status(self) -> RunStatus:
        """``unknown | running | completed | aborted | failed``."""
        return self._current().status

    def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the workers to finish; the result, or :class:`WorkflowAborted`.

        Raises :class:`~idemflow.errors.RequestFailed` for a request that
        ended ``failed`` and :class:`TimeoutError` if not finished within
        ``timeout`` seconds.
        """
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            current = self._current()
            if current.status is RunStatus.COMPLETED:
                return current.result
            if current.status is RunStatus.ABORTED:
                raise WorkflowAborted(current.reason, self.workflow, self.request_id)
            if current.status is RunStatus.FAILED and current.failure is not None:
                failure = current.failure
                raise RequestFailed(
                    self.workflow, self.request_id, failure.step, failure.reason, failure.attempts
                )
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"request {self.request_id!r} of {self.workflow!r} not finished")
            self._sleep(poll)

    def __repr__(self) -> str:
        return f"<Pending {self.workflow}/{self.request_id}>"


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
    ``now()`` values, retention expiry, the outbox due time), ``time.time``
    by default, as in :func:`idemflow.run`.
    """
    call = m.node if isinstance(m, Idem) else None
    if not isinstance(call, Call):
        raise InvalidInputError("submit() needs a @workflow call, e.g. submit(my_workflow(input), ...)")
    check_request_id(request_id)
    request = describe_request(m)
    wall = time.time if clock is None else clock
    entry = OutboxEntry(request.workflow, request.version, request_id, wall() + grace)
    plan = Plan(
        version=request.version,
        at_checkpoint=AtCheckpoint.STOP,
        submission=Submission(request.input(), entry),
        durable_outcome=True,  # the handle returned says final: so must the store
    )
    key = resolve_signing_key(signing_key)
    try:
        record = execute(
            m, request_id=request_id, store=store, policy=policy, clock=wall, plan=plan, request=request
        )
    except Checkpointed as reached:
        _send(store, queue, Pointer(request.workflow, request.version, request_id, reached.journal), key)
        return Pending(store, request.workflow, request_id)
    except VersionNotHeldError as other:  # a duplicate after a deploy: its own version finishes it
        _send(store, queue, Pointer(request.workflow, other.version, request_id), key)
        return Pending(store, request.workflow, request_id)
    return Pending(store, request.workflow, request_id, outcome=RequestStatus.of(record))


def _send(store: Store, queue: Queue, pointer: Pointer, key: bytes | None) -> None:
    """Send the pointer and clear the outbox entry; a queue that fails leaves it to the relay."""
    body = encode_pointer(pointer, key)
    if len(body.encode("utf-8")) > queue.max_body_bytes:  # hundreds of long-named steps
        body = encode_pointer(dataclasses.replace(pointer, steps=()), key)
    try:
        with telemetry.span("idemflow.queue.send", workflow=pointer.workflow, request_id=pointer.request_id):
            queue.send(body)
    except StoreError as exc:  # QueueError, TransientStoreError, StoreConfigError
        log.warning(
            "queue send failed; a worker's relay will send the continuation: %s",
            exc,
            extra={
                "workflow": pointer.workflow,
                "version": pointer.version,
                "request_id": pointer.request_id,
            },
        )
        return
    store.commit_cache([Delete(outbox_ref(pointer.workflow, pointer.request_id))])
