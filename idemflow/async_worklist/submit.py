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

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemflow.async_worklist.messages import Continuation, RecordedStep, encode_continuation
from idemflow.async_worklist.queues.base import Queue
from idemflow.engine import Execution, RetryPolicy
from idemflow.errors import InvalidInputError, WorkflowAborted
from idemflow.monad import Call, Idem, special
from idemflow.records import RunStatus
from idemflow.runner import execute, run_status
from idemflow.serialization import JSON
from idemflow.stores.base import Store

SIGNING_KEY_ENV = "IDEMFLOW_SIGNING_KEY"


def checkpoint() -> Idem[None]:
    """Where a client may be answered early: ``yield checkpoint()``."""
    return special("checkpoint")


def resolve_signing_key(explicit: bytes | str | None) -> bytes | None:
    """The HMAC key: the one given, else ``IDEMFLOW_SIGNING_KEY``, else None (unsigned)."""
    key = explicit if explicit is not None else os.environ.get(SIGNING_KEY_ENV)
    if key is None or key == "":
        return None
    return key.encode("utf-8") if isinstance(key, str) else key


@dataclass(frozen=True, slots=True)
class RequestStatus:
    """Where a request stands: ``pending | running | completed | aborted`` and its outcome."""

    status: RunStatus
    result: JSON = None
    reason: JSON = None


def status(store: Store, workflow: str, request_id: str) -> RequestStatus:
    """The status of a request as its run record tells (``pending`` if none yet)."""
    record = run_status(store, workflow, request_id)
    if record is None:
        return RequestStatus(RunStatus.PENDING)
    return RequestStatus(record.status, record.result, record.reason)


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
            if current.status not in (RunStatus.COMPLETED, RunStatus.ABORTED):
                return current
            self.outcome = current  # final: it never changes again
        return self.outcome

    def status(self) -> RunStatus:
        """``pending | running | completed | aborted``."""
        return self._current().status

    def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the workers to finish; the result, or :class:`WorkflowAborted`.

        Raises :class:`TimeoutError` if not finished within ``timeout`` seconds.
        """
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            current = self._current()
            if current.status is RunStatus.COMPLETED:
                return current.result
            if current.status is RunStatus.ABORTED:
                raise WorkflowAborted(current.reason, self.workflow, self.request_id)
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"request {self.request_id!r} of {self.workflow!r} not finished")
            self._sleep(poll)

    def __repr__(self) -> str:
        return f"<Pending {self.workflow}/{self.request_id}>"


class _Checkpointed(BaseException):
    """Reached the first checkpoint in ``submit``: stop here, enqueue the rest."""


def submit(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store,
    queue: Queue,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] | None = None,
) -> Pending:
    """Run ``m`` up to its first checkpoint, enqueue the rest, return a :class:`Pending`.

    ``m`` must be a ``@workflow`` call (workers find workflows by name). If
    the workflow finishes or aborts before any checkpoint (or the request
    already finished), its completion record is written durably before
    ``submit`` returns and the handle carries the outcome: final at once,
    for this caller and for :func:`status`. ``signing_key`` (default:
    ``IDEMFLOW_SIGNING_KEY``) signs the message so workers can trust the
    step values it carries. ``clock`` is the wall clock of the run (seconds
    since the epoch: ``now()`` values, retention expiry, ``finished_at``),
    ``time.time`` by default, as in :func:`idemflow.run`.
    """
    call = m.node if isinstance(m, Idem) else None
    if not isinstance(call, Call):
        raise InvalidInputError("submit() needs a @workflow call, e.g. submit(my_workflow(input), ...)")
    key = resolve_signing_key(signing_key)
    captured: list[Execution] = []

    def prepare(execution: Execution) -> None:
        execution.journal = []
        execution.on_checkpoint = at_checkpoint
        execution.durable_outcome = True  # the handle returned says final: so must the store
        captured.append(execution)

    def at_checkpoint(execution: Execution) -> None:
        if not execution.run_known:
            execution.ensure_run_record()  # a worker accepts only requests that were submitted
        raise _Checkpointed

    try:
        record = execute(
            m,
            request_id=request_id,
            store=store,
            policy=policy,
            clock=time.time if clock is None else clock,
            prepare=prepare,
        )
    except _Checkpointed:
        journal = captured[0].journal or []
        continuation = Continuation(
            call.name,
            request_id,
            list(call.args),
            dict(call.kwargs),
            tuple(RecordedStep(tag, identity, value) for tag, identity, value in journal),
        )
        queue.send(encode_continuation(continuation, key))
        return Pending(store, call.name, request_id)
    outcome = RequestStatus(record.status, record.result, record.reason)
    return Pending(store, call.name, request_id, outcome=outcome)
