"""What an execution is asked to do, fixed before it starts, and how it says it stopped.

Callers (``run``, ``submit``, a worker, an operator's abort, the testing kit)
describe an execution with one frozen :class:`Plan`; only the engine changes
an execution's state. The signals below unwind an execution to its caller.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from idemflow.core.row import Version
from idemflow.records import OutboxEntry, RunRecord
from idemflow.serialization import JSON

JournalEntry = tuple[str, str, str]
"""A forward step as ``(table, partition, identity)``; ``("", "", "uuid4")`` for derived values."""


class AtCheckpoint(enum.Enum):
    """What ``yield checkpoint()`` does in this execution."""

    CONTINUE = "continue"
    """``run`` and workers: a no-op."""
    STOP = "stop"
    """``submit``: stop at the first one; the rest is for workers."""


@dataclass(frozen=True, slots=True)
class Submission:
    """What ``submit`` commits with the request's claim: its input and the due continuation."""

    input: JSON
    outbox: OutboxEntry
    deadline: float | None = None
    """Epoch seconds by which the request must have finished, kept in its run record."""
    held: str | None = None
    """A delayed submission's note for its run record (``waiting until ...``): it is claimed
    before its first step, which a worker runs once it is due; nothing runs in the submitter."""


@dataclass(frozen=True, slots=True)
class Aborting:
    """Abort at the first step not yet committed (a failed request's compensation, an operator)."""

    reason: JSON


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything an execution is asked to do, fixed at construction."""

    version: int = 1
    """The workflow version this code is: a request started on another raises :class:`OtherVersion`."""
    resume: bool = False
    """The request is known to exist: replay memos first (workers, retry, abort)."""
    abort: Aborting | None = None
    at_checkpoint: AtCheckpoint = AtCheckpoint.CONTINUE
    submission: Submission | None = None
    durable_outcome: bool = False
    """Write the completion record with a durable commit, not ``commit_cache``: for callers
    that report the outcome elsewhere (a worker's ack, ``submit``'s handle) right after."""
    step_errors: bool = False
    """Raise :class:`StepFailedError` (step, identity, cause) for an error a step raised."""
    observe_checkpoint: Callable[[int], None] | None = None
    """Told the step number at every checkpoint (the testing kit)."""
    observe_replay: Callable[[], None] | None = None
    """Told, once the outcome is known, if no step of this execution committed: the answer is an
    earlier execution's (``@idempotent(on_replay=)``)."""
    expected: tuple[JournalEntry, ...] = ()
    """The steps a resumed request committed before its checkpoint: each is checked against
    the code as it is reached, so a step moved to another table or partition never runs."""
    suspend: bool = False
    """A step that must wait (``sleep``, ``wait``, ``receive``) raises :class:`Suspended` instead
    of waiting in the process: ``submit`` and workers, which hand the rest to the queue."""
    announce: Callable[[OutboxEntry], str] | None = None
    """The queue message body that resumes a request: given, a step that starts a child or sends a
    message, and a child's outcome, also send it at once (else a worker's relay does)."""
    parent: OutboxEntry | None = None
    """The request to wake when this one finishes (it was started as a child)."""
    retry_in_place: bool = True
    """A step or effect with a retry policy (its own or its workflow's) that raises is tried
    again here, after the policy's wait: ``run``, ``submit``, an operator's abort. Workers set
    False: their next attempt is a delayed continuation (:mod:`idemflow.core.step_retry`)."""
    fold: bool = True
    """A step the workflow yields may commit with its next move, the last one with the outcome
    (one call fewer); off where a caller must see each commit as the step makes it (``runs
    show`` stops at the first)."""
    lease_until: float | None = None
    """Epoch seconds no effect lease this execution takes reaches past: a Lambda invocation's end
    (the sandbox is gone after it), so a racing retry is not kept waiting on a dead holder."""
    in_place_for: float | None = None
    """Seconds a step may be retried here in all, whatever its policy allows: an operator waits
    at a prompt, not for a day (its abort then ends the request ``failed`` naming the undo, and
    a retry resumes it under workers)."""
    longest_wait_here: float | None = None
    """Seconds a wait may last in this process (``run`` on a store whose rows expire by date
    alone, DynamoDB's TTL: half the retention, past which nothing would keep the request's rows
    while it waits here); None: no bound (a sweep keeps an unfinished request's rows)."""
    started_at: float | None = None
    """When the request was claimed (epoch seconds), as the run record a resuming caller read says
    (workers, an operator's abort): a resumed execution claims nothing and reads no record, yet
    its completion record must keep that time, or ``idemflow runs list`` loses it."""
    incarnation: str | None = None
    """The run's incarnation, as the run record a resuming caller read says: the memos it replays
    must carry it (a memo of an earlier request with this id is not this run's)."""
    no_longer_waiting: Callable[[Collection[str]], Generator[Any, Any, object]] | None = None
    """Told what the request no longer waits for (the notes of limits it now holds), it clears the
    run record's note if the record began this execution with one of them (a worker's)."""
    kept_until: float | None = None
    """Epoch seconds the request's rows were kept until for a long wait (its run record's ``ku``,
    read by a worker): every row this execution writes expires no earlier, so the bound stays true."""
    lane: str | None = None
    """The request's queue lane (``submit(priority=)``; None: normal): the children it starts
    inherit it, and the continuations it sends to wake another request go to it."""
    tags: Mapping[str, str] | None = None
    """The request's tags, checked (:func:`idemflow.core.tags.check_tags`): those its claim stores
    (``submit(tags=)``, ``run(tags=)``), or, resuming, those its run record holds, as a resuming
    caller read them: the completion record is written blind, and must keep them. An execution
    that meets a record claimed first keeps that record's instead (the first claim's win)."""
    stop_if_cancelled: bool = False
    """Read the run record before each outside call this execution makes anew, and stop there
    (:class:`Cancelled`) if an operator cancelled the request; its completion is then written
    only over the record's version last read, so a cancel that lands first is never overwritten
    (workers, and a child ``run`` runs in the process)."""
    record_version: Version | None = None
    """The version of the run record the caller read just before this execution (a worker's
    delivery): the first step run anew needs no read of its own, and the completion is written
    over it if no later read came."""


DEFAULT_PLAN = Plan()


class Finished(BaseException):
    """The run record says the request already finished: unwind and return it."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(record.status.value)
        self.record = record


class Cancelled(BaseException):
    """The run record says an operator cancelled the request: unwind, running nothing more (every
    step committed so far stands)."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(record.reason)
        self.record = record


class OtherVersion(BaseException):
    """The request started on another version of the workflow: unwind, nothing ran."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(record.version)
        self.record = record


class Checkpointed(BaseException):
    """Reached the first checkpoint under :attr:`AtCheckpoint.STOP`: the rest is for workers.

    ``journal`` lists the steps before it, for the continuation to carry."""

    def __init__(
        self,
        journal: tuple[JournalEntry, ...],
        *,
        duplicate: bool = False,
        claimed_at: float | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(len(journal))
        self.journal = journal
        self.version = version
        """The workflow version the request runs on, where it is not this code's (a copy of a
        request submitted on another version: its continuation names that one)."""
        self.duplicate = duplicate
        """Another ``submit`` of this request claimed it first: its continuation is that one's
        to send (or its outbox entry's, which a relay sends if it died)."""
        self.claimed_at = claimed_at
        """When that claim was made (epoch seconds), for a copy to tell a live first submit from
        a dead one."""


class Suspended(Checkpointed):
    """A step must wait (a timer, a child, a message) and this execution may not: the rest is
    for a worker, from a continuation due at ``due`` (epoch seconds), or, if None, when a
    wake-up (the child finishing, a message arriving) sends one."""

    def __init__(
        self,
        journal: tuple[JournalEntry, ...],
        due: float | None,
        why: str,
        *,
        duplicate: bool = False,
        claimed_at: float | None = None,
    ) -> None:
        super().__init__(journal, duplicate=duplicate, claimed_at=claimed_at)
        self.due = due
        self.why = why
        """What it waits for, for the run record's note (``status(...).waiting``)."""

    def capped(self, deadline: float | None) -> Suspended:
        """This suspension with its continuation due no later than ``deadline`` (the request's),
        whatever it waits for: so a request waiting for something that never comes is woken by
        its own continuation when its deadline passes."""
        if deadline is None:
            return self
        due = deadline if self.due is None else min(self.due, deadline)
        return Suspended(self.journal, due, self.why, duplicate=self.duplicate, claimed_at=self.claimed_at)


class Renewed(Checkpointed):
    """The request continued as new (``continue_as_new``): ``record`` is its run record with the
    next incarnation's input and number. This execution ran (or, ``duplicate``, met) the switch;
    the caller runs the next incarnation from the record (``run``), or hands it to a worker as a
    continuation with no steps to check (``submit`` takes it as its checkpoint; a worker sends it)."""

    def __init__(self, record: RunRecord, *, duplicate: bool = False) -> None:
        super().__init__((), duplicate=duplicate, claimed_at=record.started_at)
        self.record = record
