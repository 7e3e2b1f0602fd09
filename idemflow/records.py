"""The on-disk format of bookkeeping rows: step memos, run records, outbox entries.

Requests in flight outlive a release, so this module is the single owner of what those rows
hold: every reader and writer goes through its classes (the memo's, the run record's fields, a
request's inbox message, its events and stream values and its places live in
:mod:`idemflow.core` and are re-exported here, so every name keeps this path), and
``tests/golden/`` pins rows written by earlier releases, which every later version must still
read; :mod:`idemflow.core.row_format` tells what each revision of :data:`FORMAT` added.

A memo is ``{"id": identity, "v": result}`` for a committed step, or
``{"id": identity, "abort": reason}`` for a step that aborted the workflow.
``identity`` names the step (``atomic debit``, ``now``, ``effect charge``), so
a replay that meets another step's memo is caught as non-determinism.

A run record lives at ``(RUNS_TABLE, request id, run_key(workflow))``:
``{"fp": input fingerprint, "status": ..., "wv": workflow version}`` plus, for
a submitted request, ``"in"`` (the input, so a worker resumes from a small
queue pointer, and ``rn``, the retention every row of the request is written
with), and the outcome once finished: ``result``, ``reason`` or ``fail`` (a
failed request: reason, step, attempts). ``wait`` notes why no worker could
run it yet. Rows written before versions existed lack ``wv``:
they are version 1.

An outbox entry says a submitted request's continuation is due: it lives in
one of :data:`~idemflow.keys.OUTBOX_SHARDS` partitions of ``RUNS_TABLE`` so a
relay finds every due entry in a few partition reads.

>>> RunRecord.from_json({"fp": "ab", "status": "running"}).version
1
>>> Memo.from_json({"id": "atomic debit", "v": 5})
Memo(identity='atomic debit', value=5, aborted=False, at=None, run=None)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from idemflow.core.inbox import Message
from idemflow.core.memos import (
    MEMO_AT,
    RUN_AT,
    Memo,
    memo_row,
    memo_run,
    memo_text,
    new_incarnation,
    of_earlier_run,
)
from idemflow.core.places import Places
from idemflow.core.published import Event, StreamEnd, StreamItem
from idemflow.core.row import RowRef
from idemflow.core.row_format import FORMAT
from idemflow.core.run_fields import Attempts, Continuation, Failure
from idemflow.core.tags import stored_tags
from idemflow.keys import RUN, RUNS_TABLE, outbox_key, outbox_partition, run_key
from idemflow.serialization import JSON

__all__ = [
    "CANCELLED_NOTE",
    "FORMAT",
    "MEMO_AT",
    "OPEN_STATUSES",
    "RUN_AT",
    "STORED_LANES",
    "Attempts",
    "Continuation",
    "Event",
    "Failure",
    "Memo",
    "Message",
    "OutboxEntry",
    "Places",
    "RunRecord",
    "RunStatus",
    "StreamEnd",
    "StreamItem",
    "child_outcome",
    "memo_row",
    "memo_run",
    "memo_text",
    "new_incarnation",
    "of_earlier_run",
    "open_workflow",
    "outbox_ref",
    "run_ref",
    "submitted_input",
]

CANCELLED_NOTE = "cancelled: "
"""How a cancelled request's ``wait`` note begins (the operator's reason follows)."""

STORED_LANES = ("high", "low")
"""The lanes a run record names (``in.ln``); the normal lane is stored as no ``ln``."""


class RunStatus(enum.StrEnum):
    """Where a request stands, as the run record tells."""

    UNKNOWN = "unknown"
    """No run record: never submitted or run, garbage-collected, or a mistyped name or id."""
    PENDING = "pending"
    """Kept for readers of 0.1 answers: ``submit`` now claims every request it accepts."""
    RUNNING = "running"
    """Started; not known to be finished."""
    COMPLETED = "completed"
    ABORTED = "aborted"
    FAILED = "failed"
    """A step kept raising (or no worker held its workflow) until the retry policy was spent;
    its committed steps stay. ``idemflow retry`` resumes it, ``idemflow abort`` compensates it."""
    CANCELLED = "cancelled"
    """An operator stopped it (``idemflow cancel``): workers run none of its steps until it is
    resumed (``idemflow resume``), and its handle's ``result()`` raises
    :class:`~idemflow.errors.RequestCancelledError`; nothing was undone (``idemflow abort`` undoes)."""

    @property
    def final(self) -> bool:
        """Completed and aborted never change again (failed may be retried or aborted)."""
        return self in (RunStatus.COMPLETED, RunStatus.ABORTED)


def run_ref(workflow: str, request_id: str) -> RowRef:
    """Where a request's run record lives."""
    return RowRef(RUNS_TABLE, request_id, run_key(workflow))


OPEN_STATUSES = (
    RunStatus.RUNNING.value,
    RunStatus.FAILED.value,
    RunStatus.PENDING.value,
    RunStatus.CANCELLED.value,
)
"""Statuses of a request an operator may still have to act on: what a store's open-run index holds."""


def open_workflow(ref: RowRef, value: Any) -> str | None:
    """The workflow of ``ref`` if it is the run record of a request not finished, else None.

    Stores that keep an index of open runs (DynamoDB's sparse index, SQLite's query) ask this
    when they write a row, so ``idemflow runs list --status running`` reads only those.
    """
    if ref.table != RUNS_TABLE or not ref.key.startswith(RUN) or not isinstance(value, dict):
        return None
    return ref.key[len(RUN) :] if value.get("status") in OPEN_STATUSES else None


def outbox_ref(workflow: str, request_id: str) -> RowRef:
    """Where a submitted request's outbox entry lives."""
    return RowRef(RUNS_TABLE, outbox_partition(request_id), outbox_key(workflow, request_id))


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number_or_none(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A decoded run record."""

    fingerprint: str
    status: RunStatus
    result: JSON = None
    reason: JSON = None
    finished_at: float | None = None
    """Epoch seconds the outcome was recorded (garbage collection ages by it)."""
    version: int = 1
    """The workflow version the request started on: it finishes on that version."""
    input: JSON = None
    """``{"args": [...], "kwargs": {...}}`` of a submitted request, until it finishes."""
    failure: Failure | None = None
    waiting: str | None = None
    """Why no worker could run it yet (a version no worker holds, code that differs), or what it
    waits for (a timer, a child, a message: see :mod:`idemflow.running.coordination`)."""
    started_at: float | None = None
    """Epoch seconds of the claim (absent from records written by 0.1)."""
    parent: OutboxEntry | None = None
    """The request that started this one as a child (``start``): woken when this one finishes."""
    attempts: Attempts | None = None
    """The step a worker tries again, with its count (cleared once the request finishes)."""
    deadline: float | None = None
    """Epoch seconds by which a submitted request must have finished (``@workflow(timeout=)``,
    ``submit(deadline=)``): a worker then ends it as ``on_failure`` says."""
    continuation: Continuation | None = None
    """The queued continuation of a request waiting on a timer (the others are stray)."""
    incarnation: str | None = None
    """This run of the request id (:func:`new_incarnation`); its memos carry it (absent before
    format 5: such a run trusts every memo it meets)."""
    kept_until: float | None = None
    """Epoch seconds no row of this unfinished request expires before (``ku``): set when its
    rows were last given a later expiry for a long wait (:func:`idemflow.stores.long_waits.extend`), and
    every row written for it since expires no earlier. None: its claim's time plus retention."""
    tags: Mapping[str, str] | None = None
    """What the request is about (``tg``: ``submit(tags=)``, ``run(tags=)``), as its first claim
    stored them, sorted by key; kept by every rewrite of the record, its outcome's too. None: no tags."""
    places: Places | None = None
    """Where its atomic steps keep their memos, as the record's writer knew (``pl``, ``sn``);
    None: no atomic step, none written since the claim, or an earlier release's record."""

    def to_json(self) -> dict[str, JSON]:
        # ``_value_``: what ``.value`` reads through the enum's descriptor, every record written
        record: dict[str, JSON] = {"fp": self.fingerprint, "status": self.status._value_}
        if self.incarnation is not None:
            record["i"] = self.incarnation
        if self.version != 1:
            record["wv"] = self.version
        if self.started_at is not None:
            record["st"] = self.started_at
        if self.finished_at is not None:
            record["at"] = self.finished_at
        if self.parent is not None:
            record["par"] = [self.parent.workflow, self.parent.version, self.parent.request_id]
        if self.tags:
            record["tg"] = dict(self.tags)
        if self.places is not None:
            record.update(self.places.to_fields())
        if self.status is RunStatus.COMPLETED:
            record["result"] = self.result
        elif self.status is RunStatus.ABORTED:
            record["reason"] = self.reason
        else:
            if self.input is not None:
                record["in"] = self.input
            if self.failure is not None and self.status is RunStatus.FAILED:
                record["fail"] = self.failure.to_json()
            if self.reason is not None and self.status is RunStatus.CANCELLED:
                record["reason"] = self.reason
            if self.waiting is not None:
                record["wait"] = self.waiting
            if self.attempts is not None:
                record["rt"] = self.attempts.to_json()
            if self.deadline is not None:
                record["dl"] = self.deadline
            if self.continuation is not None:
                record["ct"] = self.continuation.to_json()
            if self.kept_until is not None:
                record["ku"] = self.kept_until
        return record

    @classmethod
    def from_json(cls, value: Any) -> RunRecord:
        get = value.get  # read with every duplicate's answer: no generator, one lookup
        failure, parent, attempts, continuation = get("fail"), get("par"), get("rt"), get("ct")
        return cls(
            fingerprint=str(value["fp"]),
            status=RunStatus(value["status"]),
            result=get("result"),
            reason=get("reason"),
            finished_at=get("at"),
            version=int(get("wv", 1)),
            input=get("in"),
            failure=None if failure is None else Failure.from_json(failure),
            waiting=get("wait"),
            started_at=get("st"),
            parent=None
            if parent is None
            else OutboxEntry(str(parent[0]), int(parent[1]), str(parent[2]), 0.0),
            attempts=None if attempts is None else Attempts.from_json(attempts),
            deadline=get("dl"),
            continuation=None if continuation is None else Continuation.from_json(continuation),
            incarnation=_text_or_none(get("i")),
            kept_until=_number_or_none(get("ku")),
            tags=stored_tags(get("tg")),
            places=None if "pl" not in value else Places.from_fields(value),
        )

    @property
    def retention(self) -> float | None:
        """Seconds the request's rows are kept, as its submitter's policy said (``in.rn``); None
        for a request ``run`` started, a child, or a record written before format 5: a worker then
        writes with its own ``RetryPolicy.retention``.

        It lives in the stored submission, not beside it, because that is what the claim writes
        unchanged (and ``submit`` adopting a record ``run`` claimed): the one place a request's
        own settings reach its record, and it stays exactly as long as the input does, until
        the request finishes and nobody writes for it again.
        """
        given = self.input
        kept = given.get("rn") if isinstance(given, dict) else None
        if isinstance(kept, bool) or not isinstance(kept, (int, float)) or not kept > 0:
            return None
        return float(kept)

    @property
    def cancel_reason(self) -> JSON:
        """Why an operator cancelled the request (None if it is not ``cancelled``): its ``reason``,
        or, in a record an earlier release cancelled, the note that release wrote.

        >>> RunRecord("fp", RunStatus.CANCELLED, waiting="cancelled: checking").cancel_reason
        'checking'
        """
        if self.status is not RunStatus.CANCELLED:
            return None
        note = self.waiting or ""
        if self.reason is None and note.startswith(CANCELLED_NOTE):
            return note[len(CANCELLED_NOTE) :]
        return self.reason

    @property
    def not_before(self) -> float | None:
        """Epoch seconds before which no worker may start the request (``submit(delay=)``,
        ``submit(not_before=)``), stored with its input (``in.nb``); None if it was not delayed."""
        given = self.input
        at = given.get("nb") if isinstance(given, dict) else None
        if isinstance(at, bool) or not isinstance(at, (int, float)):
            return None
        return float(at)

    @property
    def lane(self) -> str | None:
        """The queue lane of the request's continuations (``submit(priority=)``), stored with its
        input (``in.ln``); None for the normal lane.

        A lane this release does not know (one a later release added, before a rollback) reads
        as the normal lane: the request still runs, where a lane lookup that failed would stop
        the relay pass at its entry and retry its early pointers as errors.

        >>> RunRecord("fp", RunStatus.RUNNING, input={"ln": "critical"}).lane is None
        True
        """
        given = self.input
        lane = given.get("ln") if isinstance(given, dict) else None
        return lane if lane in STORED_LANES else None

    def arguments(self) -> tuple[list[Any], dict[str, Any]] | None:
        """The stored input as call arguments, or None (a request ``run`` started stores none)."""
        given = self.input
        args = given.get("args") if isinstance(given, dict) else None
        kwargs = given.get("kwargs") if isinstance(given, dict) else None
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return None
        return list(args), dict(kwargs)

    def finished(self, status: RunStatus, at: float, result: JSON = None, reason: JSON = None) -> RunRecord:
        """This request's record once it ended: the input is no longer needed."""
        return replace(
            self,
            status=status,
            result=result,
            reason=reason,
            finished_at=at,
            input=None,
            waiting=None,
            attempts=None,
            deadline=None,
            kept_until=None,
        )


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A submitted request whose continuation must be sent once ``due`` (epoch seconds) passes."""

    workflow: str
    version: int
    request_id: str
    due: float

    def to_json(self) -> dict[str, JSON]:
        return {"wf": self.workflow, "wv": self.version, "id": self.request_id, "due": self.due}

    @classmethod
    def from_json(cls, raw: Any) -> OutboxEntry:
        return cls(str(raw["wf"]), int(raw["wv"]), str(raw["id"]), float(raw["due"]))


def submitted_input(
    given: JSON, retention: float, *, not_before: float | None = None, lane: str | None = None
) -> JSON:
    """What a submission stores as ``in``: its input, its retention (``rn``, format 5), and where
    given when it may start (``nb``) and its queue lane (``ln``).

    >>> RunRecord("fp", RunStatus.RUNNING, input=submitted_input({"args": [], "kwargs": {}}, 60.0)).retention
    60.0
    >>> RunRecord("fp", RunStatus.RUNNING, input=submitted_input({}, 60.0, not_before=5.0)).not_before
    5.0
    """
    if not isinstance(given, dict):
        return given
    stored: dict[str, JSON] = {**given, "rn": retention}
    if not_before is not None:
        stored["nb"] = not_before
    if lane is not None:
        stored["ln"] = lane
    return stored


def child_outcome(record: RunRecord) -> dict[str, JSON]:
    """What ``wait(child)`` memoizes of a finished (or cancelled) child: its status and result or
    reason."""
    if record.status is RunStatus.COMPLETED:
        return {"status": record.status.value, "result": record.result}
    if record.status is RunStatus.CANCELLED:
        return {"status": record.status.value, "reason": record.cancel_reason}
    return {"status": record.status.value, "reason": record.reason}
