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
from idemflow.plan import Finished, OtherVersion
from idemflow.records import OutboxEntry, RunRecord, RunStatus, outbox_ref
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Insert, Op, Put, Row, RowRef


class RunRecording(ExecutionBase):
    """The run record's part of an execution: claim, adopt, meet another execution's."""

    def _claim_ops(self, expires: float, *, with_outbox: bool) -> list[Op]:
        submission = self.plan.submission
        record = RunRecord(
            self.fingerprint,
            RunStatus.RUNNING,
            version=self.plan.version,
            input=None if submission is None else submission.input,
            started_at=self.clock(),
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
            yield from self._commit([self._outbox_put(self.plan.submission.outbox, expires)], self._run_ref)
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
        if record.fingerprint != self.fingerprint and record.fingerprint not in self.aliases:
            raise IdempotencyKeyReuseError(
                self.workflow, self.request_id, record.fingerprint, self.fingerprint
            )
        if record.status.final:
            raise Finished(record)
        if self.plan.submission is not None and record.input is None:
            yield from self._adopt(existing, record)
            return
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
        yield from self._commit(ops, self._run_ref)
        # adopted, or what came first: check again
        yield from self._on_run_record((yield from self._read(self._run_ref)))
