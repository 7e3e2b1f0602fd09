"""Messages sent from outside any workflow: an HTTP handler, a script, a webhook.

``send_message(store, workflow, request_id, topic, value, key=...)`` is the
``send`` step of :mod:`idemflow.coordination` run as a request of its own,
under the idempotency ``key``: sent twice with one key, the message arrives
once. With ``queue=`` a receiver waiting for it is woken at once; without,
a worker's relay wakes it (within its ``relay_every``).

>>> from idemflow import MemoryStore, receive, run, workflow
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
from collections.abc import Generator
from typing import Any

from idemflow._adrive import adrive
from idemflow._drive import drive
from idemflow._io import Steps
from idemflow.async_worklist.queues.aio import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.submit import announcer, resolve_signing_key
from idemflow.coordination import send
from idemflow.engine import Plan
from idemflow.keys import check_request_id
from idemflow.records import RunRecord
from idemflow.runner import Workflow, describe_request, execution_steps, workflow
from idemflow.stores.aio import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Store
from idemflow.tx import Reader

__all__ = ["asend_message", "send_message"]


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
) -> Steps[RunRecord]:
    """The one computation both APIs drive: the ``send`` step run under the request id ``key``."""
    check_request_id(key)
    name = workflow.name if isinstance(workflow, Workflow) else workflow
    m = _message(name, request_id, topic, value)
    announce = None if queue is None else announcer(resolve_signing_key(signing_key))
    plan = Plan(announce=announce)
    return execution_steps(m, describe_request(m), key, store, None, time.time, plan, (), reader=reader)


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
) -> None:
    """Send ``value`` on ``topic`` to the request ``request_id`` of ``workflow``, once per ``key``."""
    steps = _steps(store, workflow, request_id, topic, value, key, queue, signing_key, store)
    drive(steps, store, queue)


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
) -> None:
    """:func:`send_message`, awaitable."""
    target = to_async(store)
    sink = None if queue is None else to_async_queue(queue)
    steps = _steps(target, workflow, request_id, topic, value, key, sink, signing_key, sync_reader(target))
    await adrive(steps, target, sink)
