"""An abort as the engine's computation: the steps that end an unfinished request ``aborted``.

Why in the worklist: a worker that gives a request up aborts it with these steps, as an operator's
:func:`~idemflow.admin.abort_request` does (its blocking and asyncio forms drive them); they need
the worklist's record of a failure for an undo that could not complete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from idemflow.async_worklist._runs import failed_steps
from idemflow.core.plan import Aborting, Plan
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, kept_for
from idemflow.core.requests import Steps
from idemflow.engine.tx import Reader
from idemflow.errors import CompensationError, InvalidInputError, VersionNotHeldError
from idemflow.records import RunRecord
from idemflow.running.request_spec import describe_request
from idemflow.running.runner import execution_steps, status_steps
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON
from idemflow.stores.base import AsyncStore, Store


def stored_arguments(record: RunRecord, request_id: str) -> tuple[list[Any], dict[str, Any]]:
    """The input an operator's retry or abort resumes from: ``submit`` stores it, ``run`` does not."""
    arguments = record.arguments()
    if arguments is None:
        raise InvalidInputError(
            f"request {request_id!r} was started by run(), which stores no input: run it again"
        )
    return arguments


def abort_steps(
    store: Store | AsyncStore,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    reason: JSON,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    *,
    reader: Reader | None,
    retry_in_place: bool = True,
    in_place_for: float | None = None,
) -> Steps[RunRecord]:
    """:func:`~idemflow.admin.abort_request` as the engine's computation (the blocking and the
    asyncio worker); ``store`` gives its capabilities, ``reader`` is the blocking store or None
    (see :class:`~idemflow.engine.execution.Execution`)."""
    record = yield from status_steps(workflow, request_id, policy or DEFAULT_POLICY)
    if record is None:
        raise InvalidInputError(f"no request {request_id!r} of workflow {workflow!r} is known to this store")
    if record.status.final:
        return record
    policy = kept_for(policy or DEFAULT_POLICY, record.retention)  # its rows keep its retention
    held = {flow.version: flow for flow in workflows if flow.name == workflow}
    flow = held.get(record.version)
    if flow is None:
        raise VersionNotHeldError(workflow, request_id, record.version, tuple(sorted(held)))
    args, kwargs = stored_arguments(record, request_id)
    m = flow(*args, **kwargs)
    plan = Plan(
        version=record.version,
        resume=True,
        abort=Aborting(reason),
        durable_outcome=True,
        parent=record.parent,  # a child's abort wakes the parent waiting for it
        started_at=record.started_at,  # kept in the completion record
        incarnation=record.incarnation,
        tags=record.tags,  # kept in the completion record
        retry_in_place=retry_in_place,
        in_place_for=in_place_for,
    )
    request = describe_request(m)
    try:
        return (
            yield from execution_steps(m, request, request_id, store, policy, clock, plan, (), reader=reader)
        )
    except CompensationError as undo:
        if retry_in_place:  # an operator's abort: say so in the record, never "running" with nobody on it
            reason = f"compensation of step {undo.step} ({undo.name}) failed: {undo.cause}"
            yield from failed_steps(workflow, request_id, reason, undo.step, 1, clock(), policy)
        raise
