"""The asyncio twins of :mod:`idemflow.running.runner`: ``arun``, ``arun_result``, ``arun_status``.

Same semantics, same errors, same engine: the step engine is one generator
computation (:mod:`idemflow.core.requests`), driven here by awaiting an
:class:`~idemflow.stores.base.AsyncStore` instead of calling a blocking one.
Nothing blocks the event loop: reads and commits are awaited, a step body's
reads are prefetched (the body runs again once they arrive), retry waits are
``asyncio.sleep``, and an effect that is a plain function runs on a thread.

>>> import asyncio
>>> from idemflow import atomic, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("greet")
... async def greet(name):                      # steps are awaited in an async def workflow
...     seen = await atomic("visits", name, lambda tx: tx.increment("n") or "hello")
...     return f"{seen}, {name}"
>>> store = MemoryStore()
>>> asyncio.run(arun(greet("ann"), request_id="g-1", store=store))
'hello, ann'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from returns.result import Failure, Result, Success

from idemflow import records
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.core.tags import check_tags
from idemflow.engine.drive_asyncio import adrive
from idemflow.engine.execution import Plan
from idemflow.engine.monad import Idem
from idemflow.errors import WorkflowAborted
from idemflow.keys import check_request_id
from idemflow.running.first_read import read_first, reads_first
from idemflow.running.request_spec import Request, describe_request
from idemflow.running.runner import execution_steps, result_of, status_steps, under_limits
from idemflow.running.workflows import Workflow
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Store

R = TypeVar("R")


async def aexecute(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    plan: Plan | None = None,
    versions: Iterable[Workflow[Any, Any]] = (),
    request: Request | None = None,
    tags: Mapping[str, str] | None = None,
) -> records.RunRecord:
    """:func:`idemflow.running.runner.execute` on the event loop."""
    check_request_id(request_id)
    request = request or describe_request(m)
    stored = check_tags(tags)
    target = to_async(store)
    steps = execution_steps(
        m, request, request_id, target, policy, clock, plan, versions, reader=sync_reader(target), tags=stored
    )
    if plan is None and request.call is not None and request.call.limits:  # arun(): under its limits
        steps = under_limits(steps, request, request_id, policy, clock)
    if plan is None and reads_first(target, request):  # inside the computation: no hop of its own
        steps = read_first(request, request_id, steps)
    return await adrive(steps, target)


async def arun(
    m: Idem[R],
    *,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    versions: Iterable[Workflow[Any, Any]] = (),
    tags: Mapping[str, str] | None = None,
) -> R:
    """:func:`idemflow.run`, awaitable: runs ``m`` under ``request_id`` to completion, exactly once.

    ``store`` is an :class:`~idemflow.stores.base.AsyncStore` (DynamoDB and
    Azure on their SDKs' asynchronous clients), or a blocking store, which
    is then used from threads of its own (:func:`idemflow.stores.async_adapters.to_async`).
    ``tags`` are stored with the request, as :func:`idemflow.run`'s.
    """
    record = await aexecute(
        m, request_id=request_id, store=store, policy=policy, clock=clock, versions=versions, tags=tags
    )
    return result_of(record, m, request_id)


async def arun_result(
    m: Idem[R],
    *,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    versions: Iterable[Workflow[Any, Any]] = (),
    tags: Mapping[str, str] | None = None,
) -> Result[R, WorkflowAborted]:
    """:func:`idemflow.run_result`, awaitable: an abort is ``Failure(WorkflowAborted)``."""
    try:
        return Success(
            await arun(
                m,
                request_id=request_id,
                store=store,
                policy=policy,
                clock=clock,
                versions=versions,
                tags=tags,
            )
        )
    except WorkflowAborted as aborted:
        return Failure(aborted)


async def arun_status(
    store: Store | AsyncStore, workflow: str, request_id: str, *, policy: RetryPolicy = DEFAULT_POLICY
) -> records.RunRecord | None:
    """:func:`idemflow.client.status`, awaitable."""
    target = to_async(store)
    return await adrive(status_steps(workflow, request_id, policy), target)
