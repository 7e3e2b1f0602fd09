"""Running a workflow in the caller: ``run``, ``run_result``, ``execute`` and a request's status.

These are thin: they name and fingerprint the request (:mod:`idemflow.running.request_spec`),
then hand the description to one :class:`~idemflow.engine.execution.Execution`, which does the
work. What a workflow is (``@workflow``) is :mod:`idemflow.running.workflows`; ``@idempotent``
is :mod:`idemflow.running.handlers`.

>>> from idemflow import atomic, run, workflow
>>> from idemflow.stores import MemoryStore
>>> def deposit(amount):
...     def body(tx):
...         tx.increment("balance", amount)
...         return amount
...     return body
>>> @workflow("deposit-twice")
... def twice(req):
...     a = yield atomic("accounts", req["who"], deposit(req["amount"]))
...     b = yield atomic("accounts", req["who"], deposit(req["amount"]))
...     return a + b
>>> store = MemoryStore()
>>> run(twice({"who": "bob", "amount": 5}), request_id="req-1", store=store)
10
>>> run(twice({"who": "bob", "amount": 5}), request_id="req-1", store=store)  # a duplicate
10
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from returns.result import Failure, Result, Success

from idemflow import records
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, resent
from idemflow.core.requests import Read, Steps
from idemflow.core.tags import check_tags
from idemflow.engine.drive import drive
from idemflow.engine.execution import Execution, OtherVersion, Plan, Renewed
from idemflow.engine.monad import Idem, Node
from idemflow.engine.renewal import next_call, next_plan
from idemflow.engine.tx import Reader
from idemflow.errors import (
    IdempotencyKeyReuseError,
    LimitReachedError,
    RequestCancelledError,
    VersionNotHeldError,
    WorkflowAborted,
)
from idemflow.keys import check_request_id, check_workflow_name
from idemflow.limits.gate import gated
from idemflow.running.first_read import finished_record
from idemflow.running.request_spec import Request, describe, describe_request
from idemflow.running.workflows import Workflow
from idemflow.stores import long_waits
from idemflow.stores.base import AsyncStore, RowRef, Store

R = TypeVar("R")


def execute(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    plan: Plan | None = None,
    versions: Iterable[Workflow[Any, Any]] = (),
    request: Request | None = None,
    tags: Mapping[str, str] | None = None,
) -> records.RunRecord:
    """Run ``m`` to its end (completed, or aborted and compensated) and return the record.

    A request that started on another version of the workflow finishes on
    that version if ``versions`` holds it, else :class:`VersionNotHeldError`.
    ``request`` is ``describe_request(m)`` when the caller has it already; ``tags`` are stored
    with the request's claim when no ``plan`` is given (a ``plan`` carries its own).
    """
    check_request_id(request_id)
    request = request or describe_request(m)
    stored = check_tags(tags)
    found = finished_record(store, request, request_id) if plan is None else None
    if found is not None:
        return found
    steps = execution_steps(
        m, request, request_id, store, policy, clock, plan, versions, reader=store, tags=stored
    )
    if plan is None and request.call is not None and request.call.limits:  # run(): under its limits
        steps = under_limits(steps, request, request_id, policy, clock)
    return drive(steps, store)


def under_limits(
    steps: Steps[records.RunRecord],
    request: Request,
    request_id: str,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
) -> Steps[records.RunRecord]:
    """``steps`` once the workflow's limits are held. A full limit raises
    :class:`~idemflow.errors.LimitReachedError`, except to a duplicate of a finished request,
    which gets its answer: the record is read only then, so a request that runs pays nothing."""
    limits = () if request.call is None else request.call.limits
    if not limits:
        return (yield from steps)
    try:
        return (yield from gated(steps, limits, clock, workflow=request.workflow, request_id=request_id))
    except LimitReachedError:
        record = yield from status_steps(request.workflow, request_id, policy or DEFAULT_POLICY)
        if record is not None and record.status.final and request.matches(record.fingerprint):
            return record
        raise


def execution_steps(
    m: Idem[Any],
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    plan: Plan | None,
    versions: Iterable[Workflow[Any, Any]],
    *,
    reader: Reader | None,
    tags: Mapping[str, str] | None = None,
) -> Steps[records.RunRecord]:
    """The engine's computation for :func:`execute` and :func:`aexecute` (one algorithm).

    Under ``run`` (no ``plan``), a step's error, or the store's, leaves the request unfinished
    for the caller to retry: its run record then says why, and its rows are kept a retention
    from this attempt (:func:`idemflow.stores.long_waits.left_over`). ``tags`` (checked) are
    ``run``'s, stored with its claim."""
    if plan is None:  # run: a wait here keeps no row alive where rows expire by date alone
        retention = (policy or DEFAULT_POLICY).retention
        longest = None if long_waits.sweeps(store) else retention * long_waits.SLACK
        base = Plan(version=request.version, longest_wait_here=longest, tags=tags)
    else:
        base = plan
    execution = _execution(request, request_id, store, policy, clock, base, reader)
    if plan is not None:
        return (
            yield from _versioned(m, execution, request, request_id, store, policy, clock, versions, reader)
        )
    known: set[RowRef] = set()
    ran = _versioned(m, execution, request, request_id, store, policy, clock, versions, reader)
    try:
        return (yield from long_waits.watched(ran, execution.record_ref, known))
    except IdempotencyKeyReuseError:
        raise  # the record is another input's: nothing of this one's was written
    except (WorkflowAborted, RequestCancelledError):
        raise  # an outcome, not a left-over: its record says so
    except Exception as exc:
        why = f"left unfinished by run at step {execution.step}"
        if execution.step_name:
            why += f" ({execution.step_name})"
        why += f": {type(exc).__name__}: {exc}"
        retention = (policy or DEFAULT_POLICY).retention
        now = max(time.time(), clock())
        with contextlib.suppress(Exception):  # the note is for operators: the caller gets its error
            yield from long_waits.left_over(
                execution.record_ref,
                request.workflow,
                request_id,
                why,
                retention,
                now,
                known,
                execution.capabilities,
            )
        raise


def _versioned(
    m: Idem[Any],
    execution: Execution,
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    versions: Iterable[Workflow[Any, Any]],
    reader: Reader | None,
) -> Steps[records.RunRecord]:
    """``execution`` run; a request that started on another version finishes on that one if
    ``versions`` holds it."""
    base = execution.plan
    try:
        return (yield from _incarnations(execution, m.node, request, store, policy, clock, reader))
    except OtherVersion as other:
        started = other.record.version
        held = {flow.version: flow for flow in versions if flow.name == request.workflow}
        flow = held.get(started)
        if flow is None or request.call is None:
            raise VersionNotHeldError(
                request.workflow, request_id, started, tuple(sorted({request.version, *held}))
            ) from None
        again = flow(*request.call.args, **request.call.kwargs)
        plan = Plan(
            version=started,
            durable_outcome=base.durable_outcome,
            step_errors=base.step_errors,
            tags=base.tags,
            stop_if_cancelled=base.stop_if_cancelled,
        )
        other_version = _execution(request, request_id, store, policy, clock, plan, reader)
        return (yield from _incarnations(other_version, again.node, request, store, policy, clock, reader))


def _incarnations(
    execution: Execution,
    node: Node,
    request: Request,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    reader: Reader | None,
) -> Steps[records.RunRecord]:
    """``execution`` run, then, each time the request continues as new, its next incarnation from
    the run record the switch wrote (or met), until one ends: ``run`` loops here, in the caller.
    Under ``submit`` and workers (``Plan.suspend``) the next incarnation is a continuation instead,
    and :class:`~idemflow.core.plan.Renewed` goes to the caller."""
    call = request.call
    while True:
        try:
            return (yield from execution.run(node))
        except Renewed as renewed:
            if execution.plan.suspend or call is None:
                raise
            record = renewed.record
            call = next_call(call, record)
            node = call
            execution = Execution(
                execution.capabilities,
                execution.workflow,
                execution.request_id,
                record.fingerprint,
                policy or DEFAULT_POLICY,
                clock,
                next_plan(execution.plan, record),
                reader,
            )


def _execution(
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    plan: Plan,
    reader: Reader | None,
) -> Execution:
    return Execution(
        store.capabilities,
        request.workflow,
        request_id,
        request.fingerprint,
        policy or DEFAULT_POLICY,
        clock,
        plan,
        reader,
        aliases=request.aliases,
    )


def run(
    m: Idem[R],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    versions: Iterable[Workflow[Any, Any]] = (),
    tags: Mapping[str, str] | None = None,
) -> R:
    """Run ``m`` under ``request_id`` to completion in the caller; exactly once.

    Duplicates, retries after crashes and racing callers all return the same
    result. Raises :class:`~idemflow.errors.WorkflowAborted` if it aborted.
    ``versions`` are other versions of the workflow, to finish a request that
    started on one of them (a retry across a deploy). ``tags`` (``{"customer": "c-1"}``)
    say what the request is about: its run record keeps them, and ``idemflow runs list
    --tag customer=c-1`` finds it (a duplicate's own tags are not stored: the first's stay).
    """
    record = execute(
        m, request_id=request_id, store=store, policy=policy, clock=clock, versions=versions, tags=tags
    )
    return result_of(record, m, request_id)


def result_of(record: records.RunRecord, m: Idem[R], request_id: str) -> R:
    """The result a finished run answers: its value, or :class:`WorkflowAborted` raised."""
    if record.status is records.RunStatus.ABORTED:
        raise WorkflowAborted(record.reason, describe(m)[0], request_id)
    result: R = record.result  # type: ignore[assignment]
    return result


def run_result(
    m: Idem[R],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    versions: Iterable[Workflow[Any, Any]] = (),
    tags: Mapping[str, str] | None = None,
) -> Result[R, WorkflowAborted]:
    """Like :func:`run`, with an abort as ``Failure(WorkflowAborted)`` instead of raised.

    >>> from idemflow import pure
    >>> from idemflow.stores import MemoryStore
    >>> run_result(pure(1), request_id="r", store=MemoryStore())
    <Success: 1>
    """
    try:
        return Success(
            run(
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


def run_status(
    store: Store, workflow: str, request_id: str, *, policy: RetryPolicy = DEFAULT_POLICY
) -> records.RunRecord | None:
    """The run record of a request, or None if no step of it ever committed."""
    return drive(status_steps(workflow, request_id, policy), store)


def status_steps(workflow: str, request_id: str, policy: RetryPolicy) -> Steps[records.RunRecord | None]:
    """Read a request's run record, resent on transient errors (for both APIs)."""
    ref = records.run_ref(check_workflow_name(workflow), check_request_id(request_id))
    row = yield from resent(policy.resending(policy.until()), Read(ref))
    return None if row is None else records.RunRecord.from_json(row.value)
