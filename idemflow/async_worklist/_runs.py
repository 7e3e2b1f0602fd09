"""Changes a worker or an operator makes to a run record outside the step engine: a waiting
note, ``failed``, ``cancelled`` and back.

Each is a conditional write on the version just read, so it never
overwrites an outcome another execution recorded meanwhile (a completion
always wins over a note or a failure), and each keeps the request's own
retention (:attr:`~idemflow.records.RunRecord.retention`), whatever process
writes it. A write for an execution that waits or fails also names the places of the steps it
met (``met``, :mod:`idemflow.core.places`), joined with those the record named, so the
request's steps are listed without its code.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from idemflow.core.places import Places, join
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, each_resent, kept_for, resent
from idemflow.core.requests import Commit, Read, Steps
from idemflow.engine.drive import drive
from idemflow.keys import RUNS_TABLE, check_request_id, check_workflow_name, outbox_partition, wake_key
from idemflow.records import CANCELLED_NOTE, Attempts, Continuation, Failure, RunRecord, RunStatus, run_ref
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Capabilities, Committed, Op, Put, Row, RowRef, Store
from idemflow.stores.long_waits import extend, extension_due


@dataclass(frozen=True, slots=True)
class Keep:
    """A record write for a request that waits until ``until`` (epoch seconds; ``now`` is its
    clock's time): the record, and first every row in ``known`` if their bound is too near
    (:func:`idemflow.stores.long_waits.extension_due`), expire a retention after the wait ends,
    not after now."""

    until: float
    now: float
    known: frozenset[RowRef]
    capabilities: Capabilities


def read(
    store: Store, workflow: str, request_id: str, policy: RetryPolicy = DEFAULT_POLICY
) -> tuple[RunRecord, Row] | None:
    """The run record and the row it came from (for a conditional write), or None."""
    return drive(_read(workflow, request_id, policy), store)


def read_steps(workflow: str, request_id: str, policy: RetryPolicy) -> Steps[tuple[RunRecord, Row] | None]:
    """:func:`read` as the engine's computation, for both APIs (a worker's delivery)."""
    return _read(check_workflow_name(workflow), check_request_id(request_id), policy)


def _read(workflow: str, request_id: str, policy: RetryPolicy) -> Steps[tuple[RunRecord, Row] | None]:
    row = yield from resent(policy.resending(policy.until()), Read(run_ref(workflow, request_id)))
    return None if row is None else (RunRecord.from_json(row.value), row)


def _replace_running(
    workflow: str,
    request_id: str,
    change: Mapping[str, object] | Callable[[RunRecord], Mapping[str, object]],
    policy: RetryPolicy,
    keep: Keep | None = None,
    met: Places | None = None,
    *,
    cancelled_too: bool = False,
) -> Steps[bool]:
    """Rewrite an unfinished record with ``change`` (or what it says for the record read), naming
    the places ``met`` too; False if it finished meanwhile or was gone, or, unless
    ``cancelled_too``, was cancelled (a worker's note or failure never replaces an operator's
    cancel)."""
    for _ in range(3):  # only another note or failure can move it: a few tries settle it
        found = yield from _read(workflow, request_id, policy)
        if found is None or found[0].status.final:
            return False
        if found[0].status is RunStatus.CANCELLED and not cancelled_too:
            return False
        record, row = found
        fields = change(record) if callable(change) else change
        updated = dataclasses.replace(record, **fields)  # type: ignore[arg-type]
        if met is not None:
            updated = dataclasses.replace(updated, places=join(record.places, met))
        if keep is None and updated == record:
            return True
        if (yield from _rewrite(workflow, request_id, updated, row, policy, keep)):
            return True
    return False


def _rewrite(
    workflow: str,
    request_id: str,
    updated: RunRecord,
    row: Row,
    policy: RetryPolicy,
    keep: Keep | None = None,
    beside: Sequence[Op] = (),
) -> Steps[bool]:
    """Write ``updated`` over the record read as ``row``, if it is still that version (with the
    operations ``beside`` it, in the same commit); it expires
    by the request's own retention where the record carries one, else by ``policy``'s, from
    the end of the wait ``keep`` names (its rows extended first where their bound is too near),
    and never before the bound its rows are kept until."""
    retention = kept_for(policy, updated.retention).retention
    ref = run_ref(workflow, request_id)
    ends = time.time() if keep is None else max(time.time(), keep.now, keep.until)
    expires = ends + retention
    if keep is not None and extension_due(updated, retention, ends):
        # Each read and write-back resent in place on a transient error (DynamoDB's transaction
        # conflict): a keep-alive bounced to the queue instead comes back later, nearer the bound.
        incarnation = updated.incarnation
        extending = extend(keep.known, ref, workflow, request_id, expires, keep.capabilities, incarnation)
        yield from each_resent(extending, policy)
        updated = dataclasses.replace(updated, kept_until=expires)
    if updated.kept_until is not None and updated.kept_until > expires:
        expires = updated.kept_until
    value: JSON = updated.to_json()
    text = encode(value, "run record", envelope=3)
    put = Put(ref, value, text, expect=row.version, expires_at=expires)
    written = yield from resent(policy.resending(policy.until()), Commit([put, *beside]))
    return isinstance(written, Committed)


def waiting_steps(
    workflow: str,
    request_id: str,
    why: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    met: Places | None = None,
) -> Steps[bool]:
    """Say in the run record why no worker could run the request yet (or what it waits for)."""
    return _replace_running(workflow, request_id, {"waiting": why[:500]}, policy, met=met)


def waited_steps(
    workflow: str, request_id: str, why: str, policy: RetryPolicy = DEFAULT_POLICY
) -> Steps[bool]:
    """Clear the waiting note ``why`` once the request no longer waits for it (a limit had room)."""
    return _replace_running(
        workflow, request_id, lambda record: {"waiting": None} if record.waiting == why else {}, policy
    )


def suspended_steps(
    workflow: str,
    request_id: str,
    why: str,
    continuation: Continuation,
    policy: RetryPolicy = DEFAULT_POLICY,
    keep: Keep | None = None,
    met: Places | None = None,
) -> Steps[bool]:
    """Record what a request waits for and the continuation just queued for it (after the send:
    a continuation in a record was always sent). A later generation recorded meanwhile stays."""

    def change(record: RunRecord) -> Mapping[str, object]:
        recorded = record.continuation
        if recorded is not None and recorded.generation >= continuation.generation:
            return {"waiting": why[:500]}
        return {"waiting": why[:500], "continuation": continuation}

    return _replace_running(workflow, request_id, change, policy, keep, met)


def failed_steps(
    workflow: str,
    request_id: str,
    reason: str,
    step: int,
    attempts: int,
    at: float,
    policy: RetryPolicy = DEFAULT_POLICY,
    identity: str | None = None,
    met: Places | None = None,
) -> Steps[bool]:
    """End an unfinished request ``failed`` at ``step`` (named ``identity``, as its memo would be);
    its input and memos stay for a retry or an abort."""
    failure = Failure(reason[:1000], step, attempts, identity)
    change = {
        "status": RunStatus.FAILED,
        "failure": failure,
        "finished_at": at,
        "waiting": None,
        "attempts": None,
    }
    return _replace_running(workflow, request_id, change, policy, met=met)


def attempt_steps(
    workflow: str,
    request_id: str,
    seen: Attempts | None,
    failed: Attempts,
    policy: RetryPolicy = DEFAULT_POLICY,
    keep: Keep | None = None,
    met: Places | None = None,
) -> Steps[bool]:
    """Count a failed attempt of a step and when the next may start; False if the record no
    longer holds ``seen`` (what the execution read before it ran): another delivery of the same
    request counted this attempt already (or it finished), so this one must not schedule another.
    """
    while True:
        found = yield from _read(workflow, request_id, policy)
        if found is not None and found[0].attempts == failed:
            return True  # our own write, applied though its answer was lost
        if found is None or found[0].status.final or found[0].attempts != seen:
            return False
        if found[0].status is RunStatus.CANCELLED:  # no next attempt: nothing more of it runs
            return False
        record, row = found
        note = (
            f"retrying step {failed.step} ({failed.identity}) after {failed.count} failed "
            f"attempt(s): {failed.error}"
        )
        places = record.places if met is None else join(record.places, met)
        updated = dataclasses.replace(record, attempts=failed, waiting=note[:500], places=places)
        if (yield from _rewrite(workflow, request_id, updated, row, policy, keep)):
            return True


def cancel_steps(
    workflow: str,
    request_id: str,
    reason: str,
    capabilities: Capabilities,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> Steps[RunStatus]:
    """Mark an unfinished request ``cancelled`` with ``reason``, and wake the parent that started
    it (its ``wait`` then raises :class:`~idemflow.errors.ChildCancelledError`): one conditional
    write of the record, with the parent's wake-up where one commit spans partitions (else the
    wake-up first: a crash between them only wakes the parent for nothing).

    The status the request had when the cancel was decided: ``running`` or ``failed`` (it is
    cancelled now), ``cancelled`` (nothing to do), the outcome a racing worker recorded first
    (``completed``, ``aborted``: left as it is), or ``unknown``."""
    while True:  # each pass meets a record another writer moved: a few settle it
        found = yield from _read(workflow, request_id, policy)
        if found is None:
            return RunStatus.UNKNOWN
        record, row = found
        if record.status.final or record.status is RunStatus.CANCELLED:
            return record.status
        note = (CANCELLED_NOTE + reason)[:500]
        updated = dataclasses.replace(
            record, status=RunStatus.CANCELLED, reason=reason, waiting=note, attempts=None
        )
        beside: list[Op] = []
        if record.parent is not None:
            wake = _parent_wake(workflow, request_id, record, policy)
            if capabilities.cross_partition_commit:
                beside.append(wake)
            else:
                yield from resent(policy.resending(policy.until()), Commit([wake]))
        if (yield from _rewrite(workflow, request_id, updated, row, policy, beside=beside)):
            return record.status


def _parent_wake(workflow: str, request_id: str, record: RunRecord, policy: RetryPolicy) -> Put:
    """The wake-up of the parent ``record`` names, under the key its completion would write
    (so a child retried and completed later writes the same row again)."""
    assert record.parent is not None
    parent = dataclasses.replace(record.parent, due=time.time())
    cause = f"child {workflow}|{request_id}"
    ref = RowRef(
        RUNS_TABLE, outbox_partition(parent.request_id), wake_key(parent.workflow, parent.request_id, cause)
    )
    value: JSON = parent.to_json()
    expires = time.time() + kept_for(policy, record.retention).retention
    return Put(ref, value, encode(value), expires_at=expires)


def reopen_steps(workflow: str, request_id: str, policy: RetryPolicy = DEFAULT_POLICY) -> Steps[bool]:
    """Put a ``failed`` or ``cancelled`` request back to ``running`` (its memos are kept: a retry
    resumes it)."""
    change = {
        "status": RunStatus.RUNNING,
        "failure": None,
        "finished_at": None,
        "waiting": None,
        "attempts": None,
        "reason": None,
    }
    return (yield from _replace_running(workflow, request_id, change, policy, cancelled_too=True))


def start_now_steps(workflow: str, request_id: str, policy: RetryPolicy = DEFAULT_POLICY) -> Steps[bool]:
    """Clear a delayed request's start time (``in.nb``) and its ``waiting until`` note: an
    operator's resume runs it at once (False if it finished meanwhile)."""

    def change(record: RunRecord) -> Mapping[str, object]:
        given = record.input
        stored = {k: v for k, v in given.items() if k != "nb"} if isinstance(given, dict) else given
        waiting = record.waiting
        return {
            "input": stored,
            "waiting": None if waiting and waiting.startswith("waiting until") else waiting,
        }

    return (yield from _replace_running(workflow, request_id, change, policy))
