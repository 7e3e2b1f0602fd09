"""A request's steps as its memos tell them: what ``idemflow runs show`` prints.

The memos of a request live in the tables and partitions of its steps, so no
single read lists them. Replaying the workflow's code finds them all in
order, exactly as a resumed execution would: each memo is read, nothing is
executed, and the replay stops at the first step that has no memo yet (the
one the request is at), at a wait, or at the end. Whatever would write, call
out, queue or sleep stops the replay instead, so showing a request never
changes it.

>>> from idemflow import atomic, checkpoint, workflow
>>> from idemflow.client import submit
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("two")
... def two(n):
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="first")
...     yield checkpoint()
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="second")
>>> store = MemoryStore()
>>> _ = submit(two(1), request_id="r-1", store=store, queue=MemoryQueue())
>>> view = show(store, [two], "two", "r-1")
>>> [(step.number, step.kind, step.name, step.outcome) for step in view.steps], view.next_step
([(1, 'atomic', 'first', 'committed')], 'step 2 (atomic second)')
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from idemflow.async_worklist._resumption import known_steps
from idemflow.async_worklist.aborts import stored_arguments
from idemflow.core.plan import Checkpointed, Finished, Plan, Suspended
from idemflow.core.requests import (
    CallOut,
    Commit,
    CommitCache,
    Launch,
    Read,
    Scan,
    Send,
    Settle,
    Sleep,
    Steps,
    Turn,
)
from idemflow.engine.drive import STORE_REQUESTS, drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.engine.memo_reader import WAIT_ENDED
from idemflow.errors import InvalidInputError, VersionNotHeldError
from idemflow.keys import RUNS_TABLE, memo_prefix, parse_memo_key
from idemflow.operator.published import EventView, StreamView, published_views
from idemflow.records import Memo, RunRecord, of_earlier_run
from idemflow.running.request_spec import describe_request
from idemflow.running.runner import execution_steps
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Row, RowRef, Store

__all__ = ["RequestView", "StepView", "ashow", "show"]


@dataclass(frozen=True, slots=True)
class StepView:
    """One recorded step: its number, kind and name, where it ran, how it ended and when."""

    number: int
    kind: str
    """``atomic``, ``effect``, ``now``, ``abort``, ``start``, ``wait``, ``receive``, ``compensate`` ..."""
    name: str
    table: str
    partition: str
    outcome: str
    """``committed``, ``aborted`` (the step decided the abort) or ``compensated``."""
    value: JSON
    at: float | None
    """When it committed (epoch seconds), if its memo says (format 4 and later)."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "step": self.number,
            "kind": self.kind,
            "name": self.name,
            "table": self.table,
            "partition": self.partition,
            "outcome": self.outcome,
            "value": self.value,
            "at": self.at,
        }


@dataclass(frozen=True, slots=True)
class RequestView:
    """A request's run record and its recorded steps, with where it stands now."""

    workflow: str
    request_id: str
    record: RunRecord
    steps: list[StepView] = field(default_factory=list)
    next_step: str | None = None
    """The step the request is at (no memo yet), if the replay reached one."""
    waits_for: str | None = None
    """What it waits for (a timer, a child, a message, a retry's backoff), if it waits."""
    events: list[EventView] = field(default_factory=list)
    """The events it set (``set_event``), each with the value it holds now, by key."""
    streams: list[StreamView] = field(default_factory=list)
    """The streams it wrote (``write_stream``), each with its length and whether it is closed."""

    @property
    def tags(self) -> dict[str, str]:
        """What the request is about, as its run record keeps it (``submit(tags=)``; ``{}``: none)."""
        return dict(self.record.tags or {})

    def to_json(self) -> dict[str, JSON]:
        record = self.record
        attempts = record.attempts
        tags: dict[str, JSON] = dict(self.tags)
        shown: dict[str, JSON] = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "status": record.status.value,
            "version": record.version,
            "started_at": record.started_at,
            "finished_at": record.finished_at,
            "deadline": record.deadline,
            "tags": tags or None,
            "steps": [step.to_json() for step in self.steps],
            "events": [event.to_json() for event in self.events],
            "streams": [stream.to_json() for stream in self.streams],
            "next_step": self.next_step,
            "waits_for": self.waits_for or record.waiting,
            "retrying": None if attempts is None else attempts.to_json(),
            "failure": None if record.failure is None else record.failure.to_json(),
            "result": record.result,
            "reason": record.reason,
        }
        return {key: value for key, value in shown.items() if value is not None}

    def lines(self) -> list[str]:
        """The view as ``idemflow runs show`` prints it: one line per step, then where it is."""
        record = self.record
        shown = [f"{self.workflow} v{record.version} {self.request_id}: {record.status.value}"]
        if self.tags:
            shown.append("  tags: " + " ".join(f"{key}={value}" for key, value in self.tags.items()))
        for step in self.steps:
            when = "-" if step.at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(step.at))
            value = json.dumps(step.value)
            value = value if len(value) <= 60 else value[:57] + "..."
            shown.append(
                f"  {step.number:>3}  {step.kind:12} {step.name:24} {step.outcome:11} {when}  {value}"
            )
        for event in self.events:
            value = json.dumps(event.value)
            value = value if len(value) <= 60 else value[:57] + "..."
            shown.append(f"  event  {event.key} = {value} (step {event.step})")
        for stream in self.streams:
            closed = f"closed at step {stream.closed_at_step}" if stream.closed else "open"
            shown.append(f"  stream {stream.key}: {stream.length} value(s), {closed}")
        failure = record.failure
        for label, text in (("at", self.next_step), ("waits for", self.waits_for or record.waiting)):
            if text:
                shown.append(f"  {label}: {text}")
        if failure is not None:
            tried = f"after {failure.attempts} attempt(s)"
            shown.append(f"  failed at {failure.where()} {tried}: {failure.reason}")
        return shown


_WRITES = (Commit, CommitCache, CallOut, Launch, Send, Settle, Sleep, Turn)
"""Requests a replay that only reads must not carry out."""


def show(
    store: Store, workflows: Iterable[Workflow[Any, Any]], workflow: str, request_id: str
) -> RequestView:
    """The steps of a submitted request as its memos record them (reads only).

    ``workflows`` holds the workflow's code (all its versions, as for a worker): the
    replay needs it to know where each step keeps its memo. A request ``run`` started
    stores no input, so only its run record is shown.
    """
    return drive(_view_steps(store, store, workflows, workflow, request_id), store)


async def ashow(
    store: Store | AsyncStore, workflows: Iterable[Workflow[Any, Any]], workflow: str, request_id: str
) -> RequestView:
    """:func:`show`, awaitable: the same replay, its reads awaited.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(ashow(MemoryStore(), [], "two", "r-9"))
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: no request 'r-9' of workflow 'two' is known to this store
    """
    target = to_async(store)
    return await adrive(_view_steps(target, sync_reader(target), workflows, workflow, request_id), target)


def _view_steps(
    store: Store | AsyncStore,
    reader: Store | None,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
) -> Steps[RequestView]:
    """:func:`show` as a computation whose requests are reads only (both APIs answer them)."""
    record = yield from known_steps(workflow, request_id)
    beside: list[tuple[str, str, Row]] = yield Scan(RUNS_TABLE, request_id)
    events, streams = published_views(workflow, request_id, beside)
    if record.status.final:  # no input kept to replay from: the steps kept beside the record
        kept = _beside_record(workflow, request_id, record, beside)
        return RequestView(workflow, request_id, record, kept, events=events, streams=streams)
    held = {flow.version: flow for flow in workflows if flow.name == workflow}
    flow = held.get(record.version)
    if flow is None:
        raise VersionNotHeldError(workflow, request_id, record.version, tuple(sorted(held)))
    try:
        args, kwargs = stored_arguments(record, request_id)
    except InvalidInputError:
        return RequestView(
            workflow, request_id, record, waits_for=record.waiting, events=events, streams=streams
        )
    m = flow(*args, **kwargs)
    request = describe_request(m)
    plan = Plan(
        version=record.version,
        resume=True,
        suspend=True,
        retry_in_place=False,
        fold=False,
        incarnation=record.incarnation,
    )
    steps: list[StepView] = []
    computation = execution_steps(m, request, request_id, store, None, time.time, plan, (), reader=reader)
    waits_for: str | None = None
    execution_at: list[str] = []
    try:
        answer: Any = None
        while True:
            wanted = computation.send(answer)
            if isinstance(wanted, _WRITES):
                execution_at.append(_described(wanted, steps))
                break
            if type(wanted) not in STORE_REQUESTS:
                break
            answer = yield wanted
            if isinstance(wanted, Read):
                _noted(steps, wanted.ref, answer, record.incarnation)
    except Suspended as suspended:
        waits_for = suspended.why
    except (Checkpointed, Finished, StopIteration):
        pass
    except Exception as exc:  # noqa: BLE001 - a replay that raises is where the request stands
        if record.failure is None:  # a failed request's step raising again is its failure, shown
            waits_for = f"its next step raises {type(exc).__name__}: {exc}"
    finally:
        computation.close()
    next_step = execution_at[0] if execution_at else None
    attempts = record.attempts
    if attempts is not None:
        next_step = f"step {attempts.step} ({attempts.identity}), attempt {attempts.count + 1}"
    return RequestView(workflow, request_id, record, steps, next_step, waits_for, events, streams)


def _beside_record(
    workflow: str, request_id: str, record: RunRecord, rows: list[tuple[str, str, Row]]
) -> list[StepView]:
    """A finished request's steps that keep their memo beside its run record (``rows``): its
    outside calls, clock reads, aborts, events, streams and their undos (its record no longer
    holds the input a replay needs, and an atomic step's memo lives with its data, wherever
    that is)."""
    steps: list[StepView] = []
    prefix = memo_prefix(workflow, request_id)
    for partition, key, row in rows:
        if key.startswith(prefix):
            _noted(steps, RowRef(RUNS_TABLE, partition, key), row, record.incarnation)
    steps.sort(key=lambda step: (step.outcome == "compensated", step.number))
    return steps


def _noted(steps: list[StepView], ref: RowRef, row: Any, incarnation: str | None) -> None:
    """Add the memo at ``ref``, if ``row`` is one (and it is this run's: a
    memo an earlier request with this id left is not one of its steps)."""
    if row is None or of_earlier_run(row, incarnation):
        return
    parsed = parse_memo_key(ref.key)
    if parsed is None:
        return
    _, _, tag = parsed
    memo = Memo.from_json(row.value)
    if memo is None or not tag[1:].isdigit() or tag[0] not in "scu" or memo.identity == WAIT_ENDED:
        return  # not a step's (a completion's after a timer holds its place, no step of its own)
    kind, _, name = memo.identity.partition(" ")
    outcome = "aborted" if memo.aborted else ("compensated" if tag[0] in "cu" else "committed")
    steps.append(StepView(int(tag[1:]), kind, name, ref.table, ref.partition, outcome, memo.value, memo.at))


def _described(wanted: Any, steps: list[StepView]) -> str:
    """The step a replay stopped at, from what it was about to do."""
    number = (steps[-1].number + 1) if steps else 1
    if isinstance(wanted, Launch):  # a branch of all_of / any_of: its call or its wait
        wanted = wanted.request
    if isinstance(wanted, CallOut):
        return f"step {number} (effect {wanted.name})"
    if isinstance(wanted, Commit) and wanted.ops:
        first = wanted.ops[0]
        parsed = parse_memo_key(first.ref.key)
        memo = Memo.from_json(getattr(first, "value", None))
        if parsed is not None and memo is not None and parsed[2][1:].isdigit():
            return f"step {int(parsed[2][1:])} ({memo.identity})"
    return f"step {number}"
