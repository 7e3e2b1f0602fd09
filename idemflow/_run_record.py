"""Claiming a request id: the run record's insert, a submission's input and outbox entry.

The second layer of :class:`~idemflow.engine.Execution` (see
:mod:`idemflow._execution`). The first commit of a request claims its id,
inside a step's commit where one commit spans partitions, or alone before
it where it cannot (Azure); a later execution meets the record and replays.
"""

from __future__ import annotations

import dataclasses

from idemflow._execution import ExecutionBase
from idemflow._io import Steps
from idemflow.errors import IdempotencyKeyReuseError, LimitExceededError
from idemflow.plan import Checkpointed, Finished, OtherVersion
from idemflow.records import OutboxEntry, RunRecord, RunStatus, new_incarnation, outbox_ref
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Delete, Insert, Op, Put, Row, RowRef


class RunRecording(ExecutionBase):
    """The run record's part of an execution: claim, adopt, meet another execution's."""

    _started_at: float | None = None
    """When the request was claimed, as this execution knows it: by its own claim or from the
    record it met. Its completion record keeps it (see :meth:`_claimed_at`)."""

    def _claimed_at(self) -> float | None:
        """The claim time the completion record carries: the caller's (a resumed request's, read
        from its record) or this execution's; None if neither knows (no claim, nothing met)."""
        return self.plan.started_at if self.plan.started_at is not None else self._started_at

    def _claim_ops(self, expires: float, *, with_outbox: bool) -> list[Op]:
        submission = self.plan.submission
        self._started_at = self.clock()  # each attempt's own: the one that commits is kept
        self._incarnation = new_incarnation()  # likewise: the claim that commits is the run's
        record = RunRecord(
            self.fingerprint,
            RunStatus.RUNNING,
            version=self.plan.version,
            input=None if submission is None else submission.input,
            deadline=None if submission is None else submission.deadline,
            started_at=self._started_at,
            incarnation=self._incarnation,
        )
        value: JSON = record.to_json()
        where = f"input of workflow {self.workflow!r} request {self.request_id!r}"
        text = encode(value, where, envelope=3)
        if submission is not None:  # the input is stored: name it, not the step, when it is too big
            size, allowed = len(text.encode("utf-8")), self.capabilities.max_value_bytes
            if size > allowed:
                raise LimitExceededError(
                    where, f"{size} bytes stored with the request; the backend allows {allowed}"
                )
        ops: list[Op] = [Insert(self._run_ref, value, text, expires)]
        if submission is not None and with_outbox:
            ops.append(self._outbox_put(submission.outbox, expires))
        return ops

    def _outbox_ref(self) -> RowRef:
        return outbox_ref(self.workflow, self.request_id)

    def _outbox_put(self, entry: OutboxEntry, expires: float) -> Put:
        value: JSON = entry.to_json()
        return Put(self._outbox_ref(), value, encode(value), expires_at=expires)

    def _claim(self) -> Steps[None]:
        """Claim the request id (fingerprint, version, a submission's input) with its own commit.

        Where one commit cannot span partitions, a submission's outbox entry
        is committed first: a crash before the claim leaves only an entry
        the relay drops (no run record: nothing to finish).
        """
        expires = self._expiry()
        cross = self.capabilities.cross_partition_commit
        claim = self._claim_ops(expires, with_outbox=cross)
        if self.plan.submission is not None and not cross:
            # If absent: an entry there is another submit's, which a copy must not take over.
            put = self._outbox_put(self.plan.submission.outbox, expires)
            inserted = yield from self._commit([Insert(put.ref, put.value, put.text, expires)], self._run_ref)
            if isinstance(inserted, Committed):
                self._outbox_written = self.clock()
        outcome = yield from self._commit(claim, self._run_ref)
        if not isinstance(outcome, Committed):
            yield from self._on_run_record(outcome.failures[0].existing)
            return
        self._run_known = True

    def _on_run_record(self, existing: Row | None) -> Steps[None]:
        """Another execution of this request id came first: check, then replay or return."""
        if existing is None:
            return
        record = RunRecord.from_json(existing.value)
        self._started_at = record.started_at  # the claim that won, not this execution's attempt
        self._incarnation = record.incarnation
        if record.fingerprint != self.fingerprint and record.fingerprint not in self.aliases:
            raise IdempotencyKeyReuseError(
                self.workflow, self.request_id, record.fingerprint, self.fingerprint
            )
        if record.status.final:
            raise Finished(record)
        if self.plan.submission is not None and record.input is None:
            yield from self._adopt(existing, record)
            return
        if self.plan.submission is not None and record.input is not None and not self._adopted:
            # A copy of a request another submit claimed: it replays to the checkpoint (so it
            # answers as the first did, aborted or not) but the continuation is the first's to
            # send, or its outbox entry's: copies cost the workers nothing.
            self._copy = True
            written = self._outbox_written
            if written is not None and record.started_at is not None and record.started_at <= written:
                # The entry this copy wrote (before its claim, where a commit is one partition)
                # was absent though the first had claimed: the first had sent already. Drop it,
                # or a relay would send a stray continuation.
                self._outbox_written = None
                yield from self._commit([Delete(self._outbox_ref())], self._run_ref)
            if record.version != self.plan.version:  # this code cannot replay it: answer as a copy
                raise Checkpointed((), duplicate=True, claimed_at=record.started_at, version=record.version)
        if record.version != self.plan.version:
            raise OtherVersion(record)
        self._run_known = True
        self._replaying = True

    def _adopt(self, existing: Row, record: RunRecord) -> Steps[None]:
        """A submission meets a request that ``run`` claimed: store its input and outbox entry
        in that record, so workers can finish it (conditional: a racing outcome wins)."""
        assert self.plan.submission is not None
        expires = self._expiry()
        value: JSON = dataclasses.replace(record, input=self.plan.submission.input).to_json()
        ops: list[Op] = [Put(self._run_ref, value, encode(value, envelope=3), existing.version, expires)]
        cross = self.capabilities.cross_partition_commit
        outbox = self._outbox_put(self.plan.submission.outbox, expires)
        if cross:
            ops.append(outbox)
        else:  # first, as in a claim
            yield from self._commit([outbox], self._run_ref)
        if isinstance((yield from self._commit(ops, self._run_ref)), Committed):
            self._adopted = True  # this submission owns the continuation now
        # adopted, or what came first: check again
        yield from self._on_run_record((yield from self._read(self._run_ref)))
