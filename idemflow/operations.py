"""What an operator needs: list requests by workflow, status and age; abort one.

``runs`` reads every run record (one scan of the run-record table: on
DynamoDB and Azure a full scan of that table, paged; the cost grows with the
number of requests kept, which retention bounds), except for the statuses an
operator acts on (running, failed): those a store with an index of open runs
(DynamoDB's sparse index, SQLite's query) finds without reading the rest.
``abort`` ends a request that has not finished: every step not yet
committed aborts (an abort memo, so a worker racing it agrees), the
compensations of the committed steps run once in reverse order, and the
request ends ``aborted``. It needs the request's input, which ``submit``
stores; a request started by :func:`idemflow.run` is resumed by running it
again instead.

>>> from idemflow import MemoryStore, run, atomic
>>> store = MemoryStore()
>>> run(atomic("items", "p", lambda tx: "ok"), request_id="r-1", store=store)
'ok'
>>> [(found.request_id, found.status.value) for found in runs(store)]
[('r-1', 'completed')]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from idemflow._drive import drive
from idemflow._io import Steps
from idemflow.errors import CompensationFailed, InvalidInputError, VersionNotHeldError
from idemflow.keys import RUN, RUNS_TABLE, check_duration
from idemflow.plan import Aborting, Plan
from idemflow.policy import DEFAULT_POLICY, RetryPolicy, kept_for
from idemflow.records import OPEN_STATUSES, RunRecord, RunStatus
from idemflow.runner import Workflow, describe_request, execution_steps, run_status, status_steps
from idemflow.serialization import JSON
from idemflow.stores.base import AsyncStore, OpenRuns, Row, Store
from idemflow.tx import Reader

ABORT_WAIT = 30.0
"""Seconds an operator's :func:`abort` retries a failing compensation before it hands it back."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One request as ``idemflow runs list`` shows it."""

    workflow: str
    request_id: str
    record: RunRecord

    @property
    def status(self) -> RunStatus:
        return self.record.status

    def age_from(self) -> float | None:
        """When it started (or, for records written by 0.1, when it finished)."""
        return self.record.started_at if self.record.started_at is not None else self.record.finished_at

    def to_json(self) -> dict[str, JSON]:
        shown: dict[str, JSON] = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "status": self.status.value,
            "version": self.record.version,
            "started_at": self.record.started_at,
            "finished_at": self.record.finished_at,
            "failure": None if self.record.failure is None else self.record.failure.to_json(),
            "waiting": self.record.waiting,
        }
        return {key: value for key, value in shown.items() if value is not None}


def runs(
    store: Store,
    *,
    workflow: str | None = None,
    status: RunStatus | None = None,
    older_than: float | None = None,
    limit: int | None = None,
    now: Callable[[], float] = time.time,
) -> list[RunSummary]:
    """Requests with a run record, oldest first, filtered by workflow, status and age (seconds)."""
    cutoff = None if older_than is None else now() - older_than
    found: list[RunSummary] = []
    rows: Iterable[tuple[str, str, Row]]
    if status is not None and status.value in OPEN_STATUSES and isinstance(store, OpenRuns):
        rows = store.open_runs(workflow)
    else:
        rows = store.scan(RUNS_TABLE)
    for partition, key, row in rows:
        if not key.startswith(RUN) or (workflow is not None and key[1:] != workflow):
            continue
        try:
            summary = RunSummary(key[1:], partition, RunRecord.from_json(row.value))
        except (KeyError, TypeError, ValueError):
            continue  # not a run record this version can read: left to the tools of its version
        if status is not None and summary.status is not status:
            continue
        started = summary.age_from()
        if cutoff is not None and (started is None or started > cutoff):
            continue
        found.append(summary)
    found.sort(key=lambda summary: (summary.age_from() or 0.0, summary.workflow, summary.request_id))
    return found[:limit] if limit is not None else found


def known_run(store: Store, workflow: str, request_id: str) -> RunRecord:
    """The run record of a request, or :class:`InvalidInputError` if this store has none."""
    record = run_status(store, workflow, request_id)
    if record is None:
        raise InvalidInputError(f"no request {request_id!r} of workflow {workflow!r} is known to this store")
    return record


def stored_arguments(record: RunRecord, request_id: str) -> tuple[list[Any], dict[str, Any]]:
    """The input an operator's retry or abort resumes from: ``submit`` stores it, ``run`` does not."""
    arguments = record.arguments()
    if arguments is None:
        raise InvalidInputError(
            f"request {request_id!r} was started by run(), which stores no input: run it again"
        )
    return arguments


def abort(
    store: Store,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    *,
    reason: JSON,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    wait: float = ABORT_WAIT,
) -> RunRecord:
    """Compensate an unfinished request and end it ``aborted``; its record if it already finished.

    Safe to run twice and while workers run it: memos decide every step, so
    if a worker commits the last step first, the request ends ``completed``
    and that record is returned.

    A compensation that fails is retried here under its policy for at most
    ``wait`` seconds in all; then the request ends ``failed`` naming it and
    :class:`~idemflow.errors.CompensationFailed` is raised: ``retry`` hands
    the rest of the undo to workers, who retry it under the full policy.
    """
    budget = check_duration(wait, "abort wait", zero=True)
    steps = abort_steps(
        store, workflows, workflow, request_id, reason, policy, clock, reader=store, in_place_for=budget
    )
    return drive(steps, store)


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
    """:func:`abort` as the engine's computation (the blocking and the asyncio worker); ``store``
    gives its capabilities, ``reader`` is the blocking store or None (see :class:`Execution`)."""
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
        retry_in_place=retry_in_place,
        in_place_for=in_place_for,
    )
    request = describe_request(m)
    try:
        return (
            yield from execution_steps(m, request, request_id, store, policy, clock, plan, (), reader=reader)
        )
    except CompensationFailed as undo:
        if retry_in_place:  # an operator's abort: say so in the record, never "running" with nobody on it
            from idemflow.async_worklist._runs import failed_steps  # the package imports this module

            reason = f"compensation of step {undo.step} ({undo.name}) failed: {undo.cause}"
            yield from failed_steps(workflow, request_id, reason, undo.step, 1, clock(), policy)
        raise
