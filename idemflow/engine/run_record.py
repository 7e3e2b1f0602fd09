"""The run record's part of an execution: claim the request id, adopt one, meet another's.

The first commit of a request claims its id, inside a step's commit where
one commit spans partitions, or alone before it where it cannot (Azure); a
later execution meets the record and replays. This part owns what the
execution learnt from the record it claimed or met (the run's incarnation,
which its memos carry; when the request was claimed; whether this execution
is a copy of another ``submit``; whether it adopted a request ``run``
claimed), because only it reads and writes that record.
"""

from __future__ import annotations

import dataclasses

from idemflow.core.memos import incarnation_number
from idemflow.core.plan import (
    Cancelled,
    Checkpointed,
    Finished,
    JournalEntry,
    OtherVersion,
    Renewed,
    Suspended,
)
from idemflow.core.requests import Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.store_calls import StoreCalls
from idemflow.errors import IdempotencyKeyReuseError, InvalidValueError, LimitExceededError
from idemflow.records import OutboxEntry, RunRecord, RunStatus, new_incarnation, outbox_ref
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Delete, Insert, Op, Put, Row, RowRef, Version


class RunRecorder:
    """Claims, adoption and the record met: what the execution knows of its run record."""

    __slots__ = (
        "_calls",
        "_cursor",
        "_given",
        "_outbox_written",
        "_read_before",
        "adopted",
        "copy",
        "incarnation",
        "seen",
        "started_at",
        "tags",
    )

    def __init__(self, given: Given, cursor: Cursor, calls: StoreCalls) -> None:
        self._given = given
        self._cursor = cursor
        self._calls = calls
        self.started_at: float | None = None
        """When the request was claimed, as this execution knows it: by its own claim or from the
        record it met. Its completion record keeps it (see :meth:`claimed_at`)."""
        self.incarnation = given.plan.incarnation
        """The run's incarnation as this execution knows it: drawn by its claim, or read from the
        record it met (None for a record older than format 5: then every memo is trusted)."""
        self.copy = False
        """A submission met a request another submit claimed: it sends no continuation."""
        self.adopted = False
        """This submission stored its input in a record ``run`` claimed: it sends the continuation."""
        self._outbox_written: float | None = None
        """When this submission inserted its outbox entry before its claim (Azure), if it did."""
        self.tags = given.plan.tags
        """The request's tags as this execution knows them: its caller's (stored by its claim, or
        read by a resuming caller), or those of the record it met, which was claimed first."""
        self.seen: Version | None = given.plan.record_version
        """The run record's version as :meth:`look` last read it (or the caller, before this
        execution): the completion of an execution that stops when cancelled is written only
        over it (a cancel since then is not undone)."""
        self._read_before = given.plan.record_version is not None
        """The caller read the record just before this execution: the first look is that read."""

    def claimed_at(self) -> float | None:
        """The claim time the completion record carries: the caller's (a resumed request's, read
        from its record) or this execution's; None if neither knows (no claim, nothing met)."""
        plan = self._given.plan
        return plan.started_at if plan.started_at is not None else self.started_at

    def claim_ops(self, expires: float, *, with_outbox: bool) -> list[Op]:
        """The claim's insert (and a submission's outbox entry), to commit alone or with a step."""
        given = self._given
        submission = given.plan.submission
        self.started_at = given.clock()  # each attempt's own: the one that commits is kept
        self.incarnation = new_incarnation()  # likewise: the claim that commits is the run's
        record = RunRecord(
            given.fingerprint,
            RunStatus.RUNNING,
            version=given.plan.version,
            input=None if submission is None else submission.input,
            deadline=None if submission is None else submission.deadline,
            waiting=None if submission is None else submission.held,
            started_at=self.started_at,
            incarnation=self.incarnation,
            tags=self.tags,
        )
        value: JSON = record.to_json()
        try:
            text = encode(value, "", envelope=3)
        except InvalidValueError as bad:  # the place is named only when needed: it costs a format
            raise InvalidValueError(self._input_place(), bad.problem) from None
        if submission is not None:  # the input is stored: name it, not the step, when it is too big
            size, allowed = len(text.encode("utf-8")), given.capabilities.max_value_bytes
            if size > allowed:
                raise LimitExceededError(
                    self._input_place(), f"{size} bytes stored with the request; the backend allows {allowed}"
                )
        ops: list[Op] = [Insert(given.run_ref, value, text, expires)]
        if submission is not None and with_outbox:
            ops.append(self._outbox_put(submission.outbox, expires))
        return ops

    def _input_place(self) -> str:
        return f"input of workflow {self._given.workflow!r} request {self._given.request_id!r}"

    def outbox_ref(self) -> RowRef:
        """Where a submission's outbox entry lives (computed when needed: most requests have none)."""
        return outbox_ref(self._given.workflow, self._given.request_id)

    def _outbox_put(self, entry: OutboxEntry, expires: float) -> Put:
        value: JSON = entry.to_json()
        return Put(self.outbox_ref(), value, encode(value), expires_at=expires)

    def claim(self) -> Steps[None]:
        """Claim the request id (fingerprint, version, a submission's input) with its own commit.

        Where one commit cannot span partitions, a submission's outbox entry
        is committed first: a crash before the claim leaves only an entry
        the relay drops (no run record: nothing to finish).
        """
        given, calls = self._given, self._calls
        expires = given.expiry()
        cross = given.capabilities.cross_partition_commit
        claim = self.claim_ops(expires, with_outbox=cross)
        submission = given.plan.submission
        if submission is not None and not cross:
            # If absent: an entry there is another submit's, which a copy must not take over.
            put = self._outbox_put(submission.outbox, expires)
            inserted = yield from calls.commit([Insert(put.ref, put.value, put.text, expires)], given.run_ref)
            if isinstance(inserted, Committed):
                self._outbox_written = given.clock()
        outcome = yield from calls.commit(claim, given.run_ref)
        if not isinstance(outcome, Committed):
            yield from self.meet(outcome.failures[0].existing)
            return
        self._cursor.known()

    def hand_over(self, entries: tuple[JournalEntry, ...], due: float | None, why: str) -> Steps[None]:
        """Hand the rest of the request to a worker, from a continuation due at ``due`` (or a
        wake-up's): claimed first, since a worker accepts only requests that were submitted."""
        if not self._cursor.run_known:
            yield from self.claim()
        raise Suspended(entries, due, why, duplicate=self.copy, claimed_at=self.started_at)

    def look(self, *, reading: bool = True) -> Steps[None]:
        """Read the run record before a step runs anew (``Plan.stop_if_cancelled``): raises
        :class:`~idemflow.core.plan.Cancelled` if an operator cancelled the request (nothing more
        of it runs); else keeps the version read (:attr:`seen`). A record that ended meanwhile
        stops nothing here: the memos decide (an abort's, met by a call that answered late, is
        undone by this execution too), and the outcome's write then meets that record.

        Only an outside call's step reads (``reading``): an atomic step is one local commit whose
        cost the hand-written minimum sets, and a cancel landing before it is still kept, by the
        completion written over the version last read."""
        if self._read_before:  # a worker read it as it took the message: the first step's look
            self._read_before = False
            return
        if not reading:
            return
        row = yield from self._calls.read(self._given.run_ref)
        if row is None:
            return
        self.seen = row.version
        record = RunRecord.from_json(row.value)
        if record.status is RunStatus.CANCELLED:
            raise Cancelled(record)

    def meet(self, existing: Row | None) -> Steps[None]:
        """Another execution of this request id came first: check, then replay or return.

        Raises :class:`~idemflow.core.plan.Finished` (the request is over),
        :class:`~idemflow.core.plan.Cancelled` (an operator stopped it; not to an abort or a
        submission), :class:`~idemflow.core.plan.OtherVersion`, or
        :class:`~idemflow.errors.IdempotencyKeyReuseError` (another input).
        """
        if existing is None:
            return
        given = self._given
        plan = given.plan
        record = RunRecord.from_json(existing.value)
        self.started_at = record.started_at  # the claim that won, not this execution's attempt
        self.incarnation = record.incarnation
        self.tags = record.tags  # the first claim's: a copy's own tags are not stored
        if record.fingerprint != given.fingerprint and record.fingerprint not in given.aliases:
            raise IdempotencyKeyReuseError(
                given.workflow, given.request_id, record.fingerprint, given.fingerprint
            )
        if record.status.final:
            raise Finished(record)
        if record.status is RunStatus.CANCELLED and plan.abort is None and plan.submission is None:
            raise Cancelled(record)  # ``run`` of a cancelled request id runs nothing of it
        if plan.submission is not None and record.input is None:
            yield from self._adopt(existing, record)
            return
        if plan.submission is not None and record.input is not None and not self.adopted:
            # A copy of a request another submit claimed: it replays to the checkpoint (so it
            # answers as the first did, aborted or not) but the continuation is the first's to
            # send, or its outbox entry's: copies cost the workers nothing.
            self.copy = True
            written = self._outbox_written
            if written is not None and record.started_at is not None and record.started_at <= written:
                # The entry this copy wrote (before its claim, where a commit is one partition)
                # was absent though the first had claimed: the first had sent already. Drop it,
                # or a relay would send a stray continuation.
                self._outbox_written = None
                yield from self._calls.commit([Delete(self.outbox_ref())], given.run_ref)
            if record.version != plan.version:  # this code cannot replay it: answer as a copy
                raise Checkpointed((), duplicate=True, claimed_at=record.started_at, version=record.version)
            if record.not_before is not None:  # a delayed request runs nothing in a submitter
                raise Checkpointed((), duplicate=True, claimed_at=record.started_at)
        if incarnation_number(record.incarnation) > incarnation_number(plan.incarnation):
            raise Renewed(record, duplicate=True)  # it continued as new: its latest incarnation runs
        if record.version != plan.version:
            raise OtherVersion(record)
        self._cursor.met()

    def _adopt(self, existing: Row, record: RunRecord) -> Steps[None]:
        """A submission meets a request that ``run`` claimed: store its input and outbox entry
        in that record, so workers can finish it (conditional: a racing outcome wins)."""
        given, calls = self._given, self._calls
        submission = given.plan.submission
        assert submission is not None
        expires = given.expiry()
        value: JSON = dataclasses.replace(record, input=submission.input).to_json()
        ops: list[Op] = [Put(given.run_ref, value, encode(value, envelope=3), existing.version, expires)]
        outbox = self._outbox_put(submission.outbox, expires)
        if given.capabilities.cross_partition_commit:
            ops.append(outbox)
        else:  # first, as in a claim
            yield from calls.commit([outbox], given.run_ref)
        if isinstance((yield from calls.commit(ops, given.run_ref)), Committed):
            self.adopted = True  # this submission owns the continuation now
        # adopted, or what came first: check again
        yield from self.meet((yield from calls.read(given.run_ref)))
