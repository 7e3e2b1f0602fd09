"""Messages sent from outside any workflow: an HTTP handler, a script, a webhook.

``send_message(store, workflow, request_id, topic, value, key=...)`` is the
``send`` step of :mod:`idemflow.running.coordination` run as a request of its own,
under the idempotency ``key``: sent twice with one key, the message arrives
once. With ``queue=`` a receiver waiting for it is woken at once; without,
a worker's relay wakes it (within its ``relay_every``).

A message to a request that has not started yet waits for it (as below). One
to a request that already completed or aborted could never be taken, so it is
refused with :class:`~idemflow.errors.MessageNotDeliveredError` before anything is
written; so is one to a request never started, when the sender says it must
have started (``require_started=True``: a mistyped id fails at once). A resend
under a key already used replays the first send, whatever the receiver did
since.

>>> from idemflow import receive, run, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("mailbox")
... def mailbox():
...     return (yield receive("greeting", timeout=1))
>>> store = MemoryStore()
>>> send_message(store, "mailbox", "box-1", "greeting", "hello", key="hello-1")
>>> run(mailbox(), request_id="box-1", store=store)
'hello'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

from idemflow.async_worklist._queue_answers import on_async_queue, on_queue
from idemflow.async_worklist.messages import announcer, resolve_signing_key
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, kept_for
from idemflow.core.requests import ReadMany, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.engine.execution import Plan
from idemflow.engine.monad import Idem
from idemflow.engine.tx import Reader
from idemflow.errors import MessageNotDeliveredError
from idemflow.keys import check_request_id
from idemflow.records import RunRecord, run_ref
from idemflow.running.coordination import send
from idemflow.running.request_spec import describe_request
from idemflow.running.runner import execution_steps, result_of, under_limits
from idemflow.running.workflows import Workflow, workflow
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Store

__all__ = ["arun_announcing", "asend_message", "send_message"]


@workflow("idemflow.message")
def _message(workflow: str, request_id: str, topic: str, value: Any) -> Generator[Any, Any, None]:
    yield send(workflow, request_id, topic, value)


def _steps(
    store: Store | AsyncStore,
    workflow: Workflow[Any, Any] | str,
    request_id: str,
    topic: str,
    value: Any,
    key: str,
    queue: object,
    signing_key: bytes | str | None,
    reader: Reader | None,
    require_started: bool,
) -> Steps[RunRecord]:
    """The one computation both APIs drive: the ``send`` step run under the request id ``key``,
    once :func:`_deliverable` found a receiver that may still take the message. Names, topic and
    value are checked here, when called, before any read."""
    check_request_id(key)
    name = workflow.name if isinstance(workflow, Workflow) else workflow
    send(name, request_id, topic, value)  # the checks only: the step itself runs in _message
    m = _message(name, request_id, topic, value)
    announce = None if queue is None else announcer(resolve_signing_key(signing_key))
    plan = Plan(announce=announce)
    return _sending(m, store, name, request_id, topic, key, plan, reader, require_started)


def _sending(
    m: Idem[Any],
    store: Store | AsyncStore,
    workflow: str,
    request_id: str,
    topic: str,
    key: str,
    plan: Plan,
    reader: Reader | None,
    require_started: bool,
) -> Steps[RunRecord]:
    """The send, once the receiver may take it; its rows are the receiver's, kept for the
    receiver's own retention where it stores one."""
    retention = yield from _deliverable(workflow, request_id, topic, key, require_started)
    policy = kept_for(DEFAULT_POLICY, retention)
    return (
        yield from execution_steps(
            m, describe_request(m), key, store, policy, time.time, plan, (), reader=reader
        )
    )


def _deliverable(
    workflow: str, request_id: str, topic: str, key: str, require_started: bool
) -> Steps[float | None]:
    """Refuse a message no ``receive`` could take, before anything is written; the receiver's
    own retention, which the message's rows are kept for, if it has one.

    Both run records come in one round trip. Only a first send under ``key`` is judged: a resend
    replays it (its answer may have been lost after the receiver finished), so a client retrying
    a message that was delivered is never told it was not.
    """
    sent, found = yield ReadMany([run_ref(_message.name, key), run_ref(workflow, request_id)])
    if sent is not None:
        return None
    if found is None:
        if require_started:
            raise MessageNotDeliveredError(workflow, request_id, topic, "unknown request")
        return None
    receiver = RunRecord.from_json(found.value)
    if receiver.status.final:  # completed or aborted: a failed one may be retried and receive it
        raise MessageNotDeliveredError(
            workflow, request_id, topic, f"request already finished: {receiver.status.value}"
        )
    return receiver.retention


def send_message(
    store: Store,
    workflow: Workflow[Any, Any] | str,
    request_id: str,
    topic: str,
    value: Any,
    *,
    key: str,
    queue: Queue | None = None,
    signing_key: bytes | str | None = None,
    require_started: bool = False,
) -> None:
    """Send ``value`` on ``topic`` to the request ``request_id`` of ``workflow``, once per ``key``.

    Raises :class:`~idemflow.errors.MessageNotDeliveredError` if that request already completed or
    aborted (or, with ``require_started``, was never started), before anything is written.
    """
    steps = _steps(store, workflow, request_id, topic, value, key, queue, signing_key, store, require_started)
    drive(steps, store, on_queue(queue))


async def asend_message(
    store: Store | AsyncStore,
    workflow: Workflow[Any, Any] | str,
    request_id: str,
    topic: str,
    value: Any,
    *,
    key: str,
    queue: Queue | AsyncQueue | None = None,
    signing_key: bytes | str | None = None,
    require_started: bool = False,
) -> None:
    """:func:`send_message`, awaitable (the same checks, the same ``MessageNotDeliveredError``)."""
    target = to_async(store)
    sink = None if queue is None else to_async_queue(queue)
    reader = sync_reader(target)
    steps = _steps(
        target, workflow, request_id, topic, value, key, sink, signing_key, reader, require_started
    )
    await adrive(steps, target, on_async_queue(sink))


async def arun_announcing(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store | AsyncStore,
    queue: Queue | AsyncQueue,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
) -> Any:
    """:func:`~idemflow.arun` by a caller that holds the workers' ``queue`` (``idemflow.asgi``'s
    helper): what the workflow's ``send`` and ``start`` steps (and its outcome, to a parent) wake
    is sent to the queue at once, as ``submit`` and workers send it, instead of waiting for a
    worker's relay (10 s by default). A queue that fails leaves it to the relay, as there."""
    check_request_id(request_id)
    request = describe_request(m)
    target, sink = to_async(store), to_async_queue(queue)
    plan = Plan(version=request.version, announce=announcer(resolve_signing_key(signing_key)))
    reader = sync_reader(target)
    steps = execution_steps(m, request, request_id, target, policy, clock, plan, (), reader=reader)
    steps = under_limits(steps, request, request_id, policy, clock)  # as arun: under its limits
    record = await adrive(steps, target, on_async_queue(sink))
    return result_of(record, m, request_id)
