"""A request's steps as its memos tell them: what ``idemflow runs show`` prints.

Without the workflow's code (``runs show`` without ``--workflows``, ``admin.show(store, [],
...)``, the console) and for every finished request, the steps are read from the store alone
(:mod:`idemflow.operator.stored_steps`): the memos beside the run record, and the atomic steps'
memos at the places the record names. With the code of the version an unfinished request runs
on, the code is replayed, exactly as a resumed execution would: each memo is read, nothing is
executed, and the replay stops at the first step that has no memo yet (the one the request is
at), at a wait, or at the end. Whatever would write, call out, queue or sleep stops the replay
instead, so showing a request never changes it.

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
>>> [(step.number, step.name, step.table) for step in show(store, [], "two", "r-1").steps]
[(1, 'first', 'tablea')]
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from idemflow.core.memos import incarnation_number
from idemflow.core.requests import Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.operator.published import EventView, StreamView, published_views
from idemflow.operator.replay import replay
from idemflow.operator.stored_steps import StepView, listed_steps, partition_of, record_in
from idemflow.records import RunRecord
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Store

__all__ = ["RequestView", "StepView", "ashow", "show"]


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
    notes: tuple[str, ...] = ()
    """What the listing could not show (steps whose place is not recorded, ...), in words."""

    @property
    def tags(self) -> dict[str, str]:
        """What the request is about, as its run record keeps it (``submit(tags=)``; ``{}``: none)."""
        return dict(self.record.tags or {})

    @property
    def incarnation(self) -> int:
        """Which incarnation of the request the record is (1, then one more per ``continue_as_new``):
        its steps are that incarnation's."""
        return incarnation_number(self.record.incarnation)

    def to_json(self) -> dict[str, JSON]:
        record = self.record
        attempts = record.attempts
        tags: dict[str, JSON] = dict(self.tags)
        shown: dict[str, JSON] = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "status": record.status.value,
            "version": record.version,
            "incarnation": self.incarnation if self.incarnation > 1 else None,
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
            "notes": list(self.notes) or None,
        }
        return {key: value for key, value in shown.items() if value is not None}

    def lines(self) -> list[str]:
        """The view as ``idemflow runs show`` prints it: one line per step (number, kind, name,
        table/partition, outcome, when, value), then where it is and the notes."""
        record = self.record
        shown = [f"{self.workflow} v{record.version} {self.request_id}: {record.status.value}"]
        if self.incarnation > 1:  # it continued as new: the steps below are this incarnation's
            shown[0] += f", incarnation {self.incarnation}"
        if self.tags:
            shown.append("  tags: " + " ".join(f"{key}={value}" for key, value in self.tags.items()))
        for step in self.steps:
            when = "-" if step.at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(step.at))
            value = json.dumps(step.value)
            value = value if len(value) <= 60 else value[:57] + "..."
            where = f"{step.table}/{step.partition}"
            named = f"{step.number:>3}  {step.kind:12} {step.name:24} {where:32}"
            shown.append(f"  {named} {step.outcome:11} {when}  {value}")
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
        shown.extend(f"  note: {note}" for note in self.notes)
        return shown


def show(
    store: Store, workflows: Iterable[Workflow[Any, Any]] | None, workflow: str, request_id: str
) -> RequestView:
    """The steps a request committed, as its memos record them (reads only).

    Every step is listed, atomic steps too, with its number, kind, name, table, partition,
    time and outcome, from the store alone (``workflows`` empty or None), and always for a
    finished request. ``workflows`` holding the code of the version an unfinished request runs
    on (all versions, as for a worker) replays it instead, which also says the step it is at
    (:attr:`RequestView.next_step`). What the store cannot say (a step in a place not recorded
    yet, a record of an earlier release) is in :attr:`RequestView.notes`.
    """
    return drive(_view_steps(store, store, workflows or (), workflow, request_id), store)


async def ashow(
    store: Store | AsyncStore, workflows: Iterable[Workflow[Any, Any]] | None, workflow: str, request_id: str
) -> RequestView:
    """:func:`show`, awaitable: the same reads, awaited.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(ashow(MemoryStore(), [], "two", "r-9"))
    Traceback (most recent call last):
    ...
    idemflow.errors.RequestNotFoundError: no request 'r-9' of workflow 'two' is known to this store
    """
    target = to_async(store)
    steps = _view_steps(target, sync_reader(target), workflows or (), workflow, request_id)
    return await adrive(steps, target)


def _view_steps(
    store: Store | AsyncStore,
    reader: Store | None,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
) -> Steps[RequestView]:
    """:func:`show` as a computation whose requests are reads only (both APIs answer them)."""
    scanned = yield from partition_of(workflow, request_id)
    record = record_in(scanned, workflow, request_id)
    events, streams = published_views(workflow, request_id, scanned)
    held = {flow.version: flow for flow in workflows if flow.name == workflow}
    flow = held.get(record.version)
    arguments = None if record.status.final or flow is None else record.arguments()
    if flow is None or arguments is None:  # from the store alone
        listed = yield from listed_steps(workflow, request_id, scanned)
        notes = listed.notes
        if held and flow is None and not record.status.final:
            given = ", ".join(str(version) for version in sorted(held))
            notes = (
                f"version {record.version} of its code was not given (only {given}): read from the store",
                *notes,
            )
        found, retrying, waiting = list(listed.steps), _retrying(record), record.waiting
        return RequestView(workflow, request_id, record, found, retrying, waiting, events, streams, notes)
    replayed = yield from replay(store, reader, flow, record, request_id, arguments)
    waits_for = replayed.waits_for
    error = replayed.error
    if error is not None and record.failure is None:  # a failed request's step raising again is its failure
        waits_for = f"its next step raises {type(error).__name__}: {error}"
    next_step = _retrying(record) or replayed.stopped_at
    return RequestView(workflow, request_id, record, replayed.steps, next_step, waits_for, events, streams)


def _retrying(record: RunRecord) -> str | None:
    """The step a worker tries again, as the record counts its attempts."""
    attempts = record.attempts
    if attempts is None:
        return None
    return f"step {attempts.step} ({attempts.identity}), attempt {attempts.count + 1}"
