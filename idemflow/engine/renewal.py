"""``continue_as_new``: the switch from one incarnation of a request to the next.

A request that renews every period (a subscription: charge, sleep a month, charge again) would
grow its memos without bound as one loop. ``yield continue_as_new(input)`` ends the incarnation
instead: one conditional write of the run record, under the same request id, gives it the next
incarnation (:func:`~idemflow.core.memos.renewed_incarnation`, numbered), the new input (``in``)
and no places, waits or attempts. Nothing else is written or deleted at the switch:

- the next incarnation's steps start again at 1 and meet the memos the earlier one left at the
  same numbers, which carry the earlier incarnation: each is replaced in place by a commit
  conditional on the version met (:meth:`~idemflow.engine.memo_reader.MemoReader.replaced`), never
  deleted first, so an execution still running the earlier incarnation finds either its own memo
  or a later one, never a gap it would run a step anew into;
- an execution behind the request (it met a memo of a later incarnation, or the record of one)
  stops and follows the record (:class:`~idemflow.core.plan.Renewed`);
- a memo no later incarnation reaches expires with its retention: it is never kept for a long
  wait, and a sweep deletes it rather than keep it for the unfinished request
  (:mod:`idemflow.stores.expiry`).

So a request holds the rows of at most one period's steps however many periods it lives, on every
store. The node itself is here, apart from the switch's function, so :mod:`idemflow.engine.monad`
names it without importing the engine's parts.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import NoReturn

from idemflow.core.memos import incarnation_number, renewed_incarnation
from idemflow.core.plan import Aborting, Cancelled, Finished, Plan, Renewed
from idemflow.core.requests import Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.memo_reader import WAIT_ABORTED, WAIT_ENDED, AbortWorkflow
from idemflow.engine.monad import Call, ContinueAsNew
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.store_calls import StoreCalls
from idemflow.errors import ContinueAsNewError, LimitExceededError
from idemflow.keys import RUNS_TABLE, step_tag
from idemflow.records import Memo, RunRecord, RunStatus, memo_row, memo_run, memo_text
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Insert, Op, Put, Row, RowRef, Version

KEPT_FIELDS = ("rn", "ln")
"""What the next incarnation's stored input keeps of the earlier one's: the request's retention and
its queue lane (not a delayed start, which was the first incarnation's)."""


class Renewal(BaseException):
    """The interpreter met ``continue_as_new``: unwind to the execution, which writes the switch."""

    def __init__(self, node: ContinueAsNew) -> None:
        super().__init__()
        self.node = node


def renewing(node: ContinueAsNew, cleaning: bool, workflow: object, abort: Aborting | None) -> BaseException:
    """What the interpreter raises at ``continue_as_new``: :class:`Renewal`, or the error of a
    place where it cannot mean anything, or, for an operator's abort (which aborts at the first
    step not yet committed), the abort itself: the switch is that step."""
    if cleaning:
        return ContinueAsNewError("in on_abort steps: an undone request has no next incarnation")
    if workflow is None:
        return ContinueAsNewError("outside a @workflow: there is no workflow to call with the next input")
    if abort is not None:
        return AbortWorkflow(abort.reason)
    function = getattr(workflow, "function", None)
    try:
        signature = inspect.signature(function) if callable(function) else None
    except (TypeError, ValueError):  # a callable without one: its calls are taken as written
        signature = None
    if signature is not None:
        try:
            signature.bind(*node.args, **node.kwargs)
        except TypeError as refused:
            name = getattr(workflow, "name", "?")
            return ContinueAsNewError(f"with an input workflow {name!r} does not take: {refused}")
    return Renewal(node)


def next_call(call: Call, record: RunRecord) -> Call:
    """The workflow ``call`` on the input of the incarnation ``record`` holds (compared whole: the
    request's fingerprint stays the first incarnation's, which no later input is compared with)."""
    arguments = record.arguments()
    assert arguments is not None, "a renewed record stores its incarnation's input"
    args, kwargs = arguments
    return call._replace(args=tuple(args), kwargs=kwargs, compared=None)


def next_plan(plan: Plan, record: RunRecord) -> Plan:
    """``plan`` for the incarnation ``record`` holds: resumed from its record (its memos are read
    first; those of the earlier incarnation are replaced as met), with nothing of the earlier
    incarnation's journal or claim."""
    return dataclasses.replace(
        plan,
        resume=True,
        submission=None,
        expected=(),
        incarnation=record.incarnation,
        started_at=record.started_at,
        tags=record.tags,
        record_version=None,
        kept_until=record.kept_until,
    )


def next_record(record: RunRecord, node: ContinueAsNew, now: float) -> RunRecord:
    """The run record of the incarnation after ``record``'s, with ``node``'s input.

    >>> first = RunRecord("fp", RunStatus.RUNNING, incarnation="a1b2c3d4e5f6", input={"rn": 60.0})
    >>> second = next_record(first, ContinueAsNew((2,), {}, {"args": [2], "kwargs": {}}), 5.0)
    >>> incarnation_number(second.incarnation), second.input, second.fingerprint
    (2, {'rn': 60.0, 'args': [2], 'kwargs': {}}, 'fp')
    """
    earlier = record.input if isinstance(record.input, dict) else {}
    stored: dict[str, JSON] = {key: earlier[key] for key in KEPT_FIELDS if key in earlier}
    assert isinstance(node.input, dict)
    stored.update(node.input)
    return dataclasses.replace(
        record,
        status=RunStatus.RUNNING,
        incarnation=renewed_incarnation(incarnation_number(record.incarnation) + 1),
        input=stored,
        started_at=now,
        waiting=None,
        attempts=None,
        continuation=None,
        failure=None,
        reason=None,
        places=None,
    )


def switch(
    given: Given, cursor: Cursor, calls: StoreCalls, recorder: RunRecorder, node: ContinueAsNew
) -> Steps[NoReturn]:
    """Write the next incarnation's run record over this one's, then raise
    :class:`~idemflow.core.plan.Renewed` (or :class:`~idemflow.core.plan.Finished`,
    :class:`~idemflow.core.plan.Cancelled`, or ``Renewed`` as a duplicate when another execution
    of this incarnation switched first): a read and one conditional write."""
    if not cursor.run_known:  # continue_as_new before any step committed: the request is claimed first
        yield from recorder.claim()
    passed: dict[int, Version | None] = {}
    """What the switch met after a timer: the version of an earlier incarnation's memo to write
    over, or None where a memo of this incarnation took the place already."""
    while True:
        row = yield from calls.read(given.run_ref)
        if row is None:  # gone meanwhile (an operator's gc of a stuck request): claimed again
            yield from recorder.claim()
            continue
        record = RunRecord.from_json(row.value)
        if record.status.final:
            raise Finished(record)
        if record.incarnation != recorder.incarnation:
            raise Renewed(record, duplicate=True)
        if record.status is RunStatus.CANCELLED:
            raise Cancelled(record)
        renewed = next_record(record, node, given.clock())
        value = renewed.to_json()
        text = encode(value, "", envelope=3)
        size, allowed = len(text.encode("utf-8")), given.capabilities.max_value_bytes
        if size > allowed:
            where = (
                f"input of the next incarnation of workflow {given.workflow!r} request {given.request_id!r}"
            )
            raise LimitExceededError(
                where, f"{size} bytes stored with the request; the backend allows {allowed}"
            )
        expires = given.expiry()
        ops: list[Op] = [Put(given.run_ref, value, text, expect=row.version, expires_at=expires)]
        waits = _after_waits(given, cursor, recorder.incarnation, expires, passed)
        ops.extend(waits.values())
        outcome = yield from calls.commit(ops, given.run_ref)
        if isinstance(outcome, Committed):
            cursor.committed()
            raise Renewed(renewed)
        steps = {op.ref: step for step, op in waits.items()}
        for failure in outcome.failures:  # else the record moved: read again
            ref = ops[failure.index].ref
            if failure.index > 0:
                step = steps[ref]
                passed.pop(step, None)
                found, over = yield from _wait_met(calls, ref, failure.existing, recorder)
                if found:
                    passed[step] = over


def _after_waits(
    given: Given, cursor: Cursor, incarnation: str | None, expires: float, passed: dict[int, Version | None]
) -> dict[int, Op]:
    """The memos the switch writes in the places of the steps after the timers this execution
    passed whose place no step took: as a completion does, so that an operator's abort meeting
    the timer and the switch cannot both stand (whichever writes first, the other meets it).
    ``passed`` holds what the switch met there before: the version of a memo an earlier
    incarnation left (written over), or None (a memo of this incarnation's: the place is left)."""
    at = int(given.clock() * 1000)
    ops: dict[int, Op] = {}
    for step in cursor.after_waits or ():
        if step in passed and passed[step] is None:
            continue
        ref = RowRef(RUNS_TABLE, given.request_id, given.memo_prefix + step_tag(step))
        value = memo_row(WAIT_ENDED, None, at=at, run=incarnation)
        text = memo_text(WAIT_ENDED, None, at=at, run=incarnation)
        over = passed.get(step)
        ops[step] = (
            Insert(ref, value, text, expires) if over is None else Put(ref, value, text, over, expires)
        )
    return ops


def _wait_met(
    calls: StoreCalls, ref: RowRef, existing: Row | None, recorder: RunRecorder
) -> Steps[tuple[bool, Version | None]]:
    """What a memo after a timer the switch met says: an operator's abort there aborts this
    incarnation (its steps are undone, as at any step after the wait); one an earlier incarnation
    or run left is written over (its version, for the next attempt); one of this incarnation's
    stands (None: the switch leaves that place, and the record, read again, says what came of the
    request). ``(False, None)``: the place was found empty, and is taken again by an insert."""
    existing = existing if existing is not None else (yield from calls.read(ref))
    if existing is None:
        return False, None
    memo = Memo.from_json(existing.value)
    if memo is not None and memo.aborted and memo.identity == WAIT_ABORTED:
        raise AbortWorkflow(memo.value)
    if memo_run(existing) != recorder.incarnation:
        return True, existing.version
    return True, None
