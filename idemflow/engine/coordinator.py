"""The steps that wait or reach another request: timers, children, messages (the engine's part).

:mod:`idemflow.running.coordination` builds these steps; this part interprets them
with the same memos, claims and commits as every other step, through the
stepper. A step that must wait raises :class:`~idemflow.core.plan.Suspended`
where the plan says so (``submit`` and workers hand the rest to the queue)
and waits in the process otherwise (``run``, ``arun``). It holds no state of
its own: what it decides is in memos and in the rows it commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, assert_never

from idemflow.core.plan import Cancelled
from idemflow.core.requests import Scan, SkippingClock, Sleep, Steps
from idemflow.core.timers import skipped_to, when
from idemflow.engine.attempt import Extra, constant
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import WAIT_ABORTED, MemoReader, WaitOver
from idemflow.engine.monad import Call, Child, Coordination, Deadline, Post, Receive, Start, Until, WaitFor
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.stepper import Stepper
from idemflow.engine.store_calls import StoreCalls
from idemflow.engine.wakeups import announce, wake_row
from idemflow.errors import (
    ChildAborted,
    ChildCancelledError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    LimitExceededError,
    RequestFailedError,
)
from idemflow.keys import RUNS_TABLE, inbox_key, inbox_prefix
from idemflow.records import (
    Message,
    OutboxEntry,
    RunRecord,
    RunStatus,
    child_outcome,
    new_incarnation,
    run_ref,
    submitted_input,
)
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Insert, Op, Put, Row, RowRef

_POLL = 0.2
"""Seconds ``run`` waits between looks at a child or an inbox (a worker suspends instead)."""
_LOOK_AGAIN = 15.0
"""Seconds before a worker looks again at a request waited for by one that did not start it (its
outcome wakes only the parent that started it)."""

RunChild = Callable[[Given, Call, str, RunRecord], Steps[None]]
"""Under ``run``, a child nobody finished yet runs in the process, as its own request: an
execution of its own, which only the engine on top builds (handed down, not imported up; a plain
function of the parent's facts, so no part refers back to the execution that owns it)."""


def _next_message(found: list[tuple[str, Row, Message]]) -> tuple[str, Row, Message]:
    """The message a ``receive`` takes: each sender's lowest step first, then the earliest sent."""
    heads: dict[str, tuple[str, Row, Message]] = {}
    for key, row, message in found:
        head = heads.get(message.sender)
        if head is None or message.seq < head[2].seq:
            heads[message.sender] = (key, row, message)
    return min(heads.values(), key=lambda head: (head[2].at, head[0]))


class Coordinator:
    """Timers, children and messages, each a step (or a wait before one) of this execution."""

    __slots__ = ("_calls", "_cursor", "_given", "_journal", "_memos", "_recorder", "_run_child", "_stepper")

    def __init__(
        self,
        given: Given,
        cursor: Cursor,
        calls: StoreCalls,
        memos: MemoReader,
        recorder: RunRecorder,
        journal: Journal,
        stepper: Stepper,
        run_child: RunChild,
    ) -> None:
        self._given = given
        self._journal = journal
        self._memos = memos
        self._cursor = cursor
        self._calls = calls
        self._recorder = recorder
        self._stepper = stepper
        self._run_child = run_child

    def coordinate(self, node: Coordination) -> Steps[Any]:
        """The node's value: a deadline, None after a timer, a child's handle or outcome, a message."""
        given, cursor, stepper = self._given, self._cursor, self._stepper
        if (
            given.plan.abort is not None
            and not cursor.cleaning
            and isinstance(node, Until | WaitFor | Receive)
        ):
            if isinstance(node, Until):
                return (yield from self._abort_at_wait())
            cursor.advance()  # a memo decides, else this step aborts (its body is replaced)
            identity = "wait " + node.workflow if isinstance(node, WaitFor) else "receive " + node.topic
            return (yield from stepper.forward(RUNS_TABLE, given.request_id, identity, constant(None), None))
        match node:
            case Deadline(seconds, at, label):
                due = at if at is not None else given.clock() + (seconds or 0.0)
                return (yield from stepper.memoized(label, lambda tx: due))
            case Until(due):
                while given.clock() < due:
                    if skipped_to(given.clock, due):
                        break
                    yield from self.suspend(due, None, "sleeping until " + when(due))
                cursor.waited()  # an abort meeting the timer takes the place after it: see WAIT_ENDED
                return None
            case Start():
                return (yield from self._start(node))
            case WaitFor():
                return child_result((yield from self.outcome_of(node)), node)
            case Post():
                return (yield from self._post(node))
            case Receive():
                return (yield from self._receive(node))
            case _:
                assert_never(node)

    def _abort_at_wait(self) -> Steps[None]:
        """An abort meeting a timer (``sleep``, ``sleep_until``) aborts there, whether it is due or
        not: no code after the wait runs here. Its abort memo takes the place of the step after
        the wait, so a worker whose timer fires meanwhile aborts at whatever step comes next.

        That memo is an insert, and only a memo a worker wrote there first says the wait was
        over: a step's (the replay goes on from it), or the completion's of a request that ended
        after the wait (:data:`~idemflow.engine.memo_reader.WAIT_ENDED`: its record, completed in the same
        commit, is the answer). Whichever lands first, the other meets it."""
        given, cursor = self._given, self._cursor
        step = cursor.advance()
        try:
            yield from self._stepper.forward(RUNS_TABLE, given.request_id, WAIT_ABORTED, constant(None), None)
        except WaitOver as over:
            if over.ended:  # raises Finished: the request completed right after the wait
                yield from self._recorder.meet((yield from self._calls.read(given.run_ref)))
            cursor.revisit(step - 1)  # that step is the one after the wait: it replays
            return None
        raise AssertionError("an aborting execution's step aborts")  # pragma: no cover

    def hold_until(self, due: float, why: str) -> Steps[bool]:
        """Wait until ``due`` (epoch seconds) before going on: under workers a durable timer (the
        request is handed over, its record saying ``why``), in place under ``run`` and an
        operator's abort, but for no longer than the latter's budget: False if ``due`` is past it."""
        given = self._given
        plan = given.plan
        left = due - given.clock()
        if left <= 0:
            return True
        if plan.suspend or not plan.retry_in_place:  # a worker's execution, or its give-up
            yield from self._recorder.hand_over(self._journal.entries(), due, why)
        if plan.in_place_for is not None and left > plan.in_place_for:
            return False
        yield Sleep(left, time.sleep)
        return True

    def suspend(self, due: float | None, poll: float | None, why: str) -> Steps[None]:
        """Hand the request to a worker until ``due`` (or a wake-up), or wait here: ``run`` sleeps
        until ``due`` or for ``poll`` seconds, then the caller looks again."""
        given = self._given
        if given.plan.suspend:
            yield from self._recorder.hand_over(self._journal.entries(), due, why)
        left = float("inf") if due is None else due - given.clock()
        longest = given.plan.longest_wait_here
        timed = self._cursor.deciding is not None and self._cursor.deciding.timed  # any_of's timer ends it
        if (
            longest is not None
            and left > longest
            and not timed
            and not isinstance(given.clock, SkippingClock)
        ):
            raise LimitExceededError(
                f"workflow {given.workflow!r} request {given.request_id!r}",
                f"{why} for {left:.0f} s in this process, longer than half its rows' retention "
                f"({2 * longest:.0f} s) on a store that expires rows by date alone: submit it to "
                "workers (which keep its rows while it waits), or run it with a longer "
                "RetryPolicy(retention=)",
            )
        yield Sleep(max(min(left, poll if poll is not None else left), 0.0), time.sleep)

    def _step_beside(self, identity: str, memo: JSON, beside: Extra, wake: Put) -> Steps[None]:
        """A table-less step deciding ``memo`` whose commit also writes ``beside()``: rows in other
        partitions (a child's claim, a message), recomputed on each attempt, empty once written.

        Where one commit cannot span partitions (Azure), if ``beside()`` has rows to write, the
        step's ``wake`` row goes first, then each of them, then the memo: a crash after the
        wake-up only wakes a request for nothing, and a rerun that meets the rows (``beside()``
        then returns nothing, and writes no wake-up) finds the wake-up written already."""
        given, stepper, calls = self._given, self._stepper, self._calls
        request_id = given.request_id
        if given.capabilities.cross_partition_commit or given.plan.abort is not None:
            yield from stepper.forward(RUNS_TABLE, request_id, identity, constant(memo), None, beside)
            return
        done, _ = yield from self._memos.replayed(identity)
        if done:
            return
        rows = yield from beside()
        if rows:
            yield from calls.commit([wake], wake.ref)
        for op in rows:
            if op is wake:
                continue  # committed just above
            if not isinstance((yield from calls.commit([op], op.ref)), Committed):
                yield from beside()  # a rerun or a race wrote it: checked again
        yield from stepper.forward(RUNS_TABLE, request_id, identity, constant(memo), None)

    def _start(self, node: Start) -> Steps[Child]:
        given, calls = self._given, self._calls
        if node.call.name == given.workflow and node.request_id == given.request_id:
            raise InvalidInputError(
                f"workflow {given.workflow!r} request {given.request_id!r} cannot start itself as its child: "
                "give the child a request id of its own"
            )
        self._cursor.advance()
        identity = "start " + node.call.name
        child = Child(node.call.name, node.request_id, node.call)
        entry = OutboxEntry(node.call.name, node.version, node.request_id, 0.0)
        claim_ref = run_ref(node.call.name, node.request_id)
        outbox = wake_row(given, entry, "start")
        record = RunRecord(
            node.fingerprint,
            RunStatus.RUNNING,
            version=node.version,
            # the parent's retention and lane
            input=submitted_input(node.input, given.policy.retention, lane=given.plan.lane),
            started_at=given.clock(),
            incarnation=new_incarnation(),
            # A parent a worker runs is woken by the child's outcome; one ``run`` runs polls.
            parent=OutboxEntry(given.workflow, given.plan.version, given.request_id, 0.0)
            if given.plan.suspend
            else None,
        )
        claim_value: JSON = record.to_json()
        claim_text = encode(claim_value, f"input of child {node.call.name!r} {node.request_id!r}", envelope=3)

        made = [False]

        def claimed() -> Steps[list[Op]]:
            """The child's claim and outbox row, or nothing if it was claimed already."""
            existing = yield from calls.read(claim_ref)
            if existing is None:
                made[0] = True  # this execution starts it: it sends the child's pointer too
                return [Insert(claim_ref, claim_value, claim_text, given.expiry()), outbox]
            found = RunRecord.from_json(existing.value)
            if found.fingerprint != node.fingerprint and found.fingerprint not in node.aliases:
                raise IdempotencyKeyReuseError(
                    node.call.name, node.request_id, found.fingerprint, node.fingerprint
                )
            return []

        memo: JSON = {"wf": node.call.name, "id": node.request_id}
        yield from self._step_beside(identity, memo, claimed, outbox)
        if made[0]:  # a replay, or a claim found made, sends nothing: the relay has its outbox row
            yield from announce(given, entry, outbox.ref)
        return child

    def outcome_of(self, node: WaitFor) -> Steps[Any]:
        """``wait``'s step: the child's outcome as its memo keeps it (:func:`child_result` reads it)."""
        given, stepper = self._given, self._stepper
        self._cursor.advance()
        identity = "wait " + node.workflow
        while True:
            done, value = yield from self._memos.replayed(identity)
            if done:
                return value
            row = yield from self._calls.read(run_ref(node.workflow, node.request_id))
            if row is None:
                raise InvalidInputError(
                    f"wait: no request {node.request_id!r} of workflow {node.workflow!r} was started"
                )
            record = RunRecord.from_json(row.value)
            if record.status.final or record.status is RunStatus.CANCELLED:  # cancelled: ChildCancelledError
                done_as = constant(child_outcome(record))
                return (yield from stepper.forward(RUNS_TABLE, given.request_id, identity, done_as, None))
            if given.plan.suspend:
                waiting = f"waiting for {node.workflow!r} request {node.request_id!r}"
                parent = record.parent
                woken = parent is not None and (parent.workflow, parent.request_id) == (
                    given.workflow,
                    given.request_id,
                )
                # Its outcome wakes the parent it recorded; any other waiter looks again now and then.
                yield from self.suspend(None if woken else given.clock() + _LOOK_AGAIN, None, waiting)
            elif record.status is RunStatus.FAILED and record.failure is not None:
                failure = record.failure
                raise RequestFailedError(
                    node.workflow,
                    node.request_id,
                    failure.step,
                    failure.reason,
                    failure.attempts,
                    failure.identity,
                )
            elif node.call is not None and node.call.version == record.version:
                try:
                    yield from self._run_child(given, node.call, node.request_id, record)
                except Cancelled:  # while it ran here: its record, read again, says so
                    continue
            else:
                yield from self.suspend(None, _POLL, "")

    def _post(self, node: Post) -> Steps[None]:
        given, calls = self._given, self._calls
        step = self._cursor.advance()
        identity = f"send {node.workflow} {node.topic}"
        sender = f"{given.workflow}|{given.request_id}"
        key = inbox_key(node.workflow, node.request_id, node.topic, f"{sender}|{step}")
        ref = RowRef(RUNS_TABLE, node.request_id, key)
        entry = OutboxEntry(node.workflow, 1, node.request_id, 0.0)
        wake = wake_row(given, entry, "message " + key)
        message: JSON = Message(node.value, sender, step, given.clock()).to_json()
        text = encode(message, f"message to {node.workflow!r} {node.request_id!r} on {node.topic!r}")
        waiting = [False]

        def delivered() -> Steps[list[Op]]:
            """The message and its wake-up, or nothing if a resent step delivered it already.

            The receiver is woken at once only if it was submitted and is not finished; else the
            relay sends the wake-up if the request exists by then (a ``run`` polls instead)."""
            if (yield from calls.read(ref)) is not None:
                return []
            receiver = yield from calls.read(run_ref(node.workflow, node.request_id))
            found = None if receiver is None else RunRecord.from_json(receiver.value)
            waiting[0] = found is not None and found.input is not None and not found.status.final
            return [Insert(ref, message, text, given.expiry()), wake]

        yield from self._step_beside(identity, None, delivered, wake)
        if waiting[0]:
            yield from announce(given, entry, wake.ref)
        return None

    def _receive(self, node: Receive) -> Steps[Any]:
        given, stepper = self._given, self._stepper
        request_id = given.request_id
        self._cursor.advance()
        identity = "receive " + node.topic
        prefix = inbox_prefix(given.workflow, request_id, node.topic)
        while True:
            done, value = yield from self._memos.replayed(identity)
            if done:
                return value
            rows: list[tuple[str, str, Row]] = yield Scan(RUNS_TABLE, request_id)
            inbox = [
                (key, row, Message.from_json(row.value)) for _, key, row in rows if key.startswith(prefix)
            ]
            found = [(key, row, message) for key, row, message in inbox if not message.taken]
            over = self._memos.first_due(rows, node.over_at) if found and node.over_at else None
            if over is not None:  # an any_of's timer ended it first: a message sent since is not its
                found = [(key, row, message) for key, row, message in found if message.at < over]
            if found:
                key, row, message = _next_message(found)
                # Kept as taken, not deleted: a sender resending its step meets it (on Azure the
                # message commits before the sender's memo) instead of sending it again.
                taken: JSON = message.as_taken().to_json()
                ref = RowRef(RUNS_TABLE, request_id, key)
                consumed = Put(ref, taken, encode(taken), row.version, given.expiry())

                def consume(consumed: Put = consumed) -> Steps[list[Op]]:
                    return [consumed]
                    yield  # a generator: the engine's extra operations are computations

                value = message.value
                return (
                    yield from stepper.forward(
                        RUNS_TABLE, request_id, identity, constant(value), None, consume
                    )
                )
            if node.due is not None and given.clock() >= node.due:  # timed out: None, memoized
                return (yield from stepper.forward(RUNS_TABLE, request_id, identity, lambda tx: None, None))
            if node.due is not None and skipped_to(given.clock, node.due):
                continue  # a test's clock is past the timeout now: one more look, then None
            until = "" if node.due is None else " until " + when(node.due)
            yield from self.suspend(node.due, _POLL, f"waiting for a message on {node.topic!r}{until}")


def child_result(value: Any, node: WaitFor) -> Any:
    """A child's result from its outcome (:class:`~idemflow.errors.ChildAborted` if it aborted,
    :class:`~idemflow.errors.ChildCancelledError` if an operator cancelled it)."""
    if isinstance(value, dict) and value.get("status") == RunStatus.ABORTED.value:
        raise ChildAborted(value.get("reason"), node.workflow, node.request_id)
    if isinstance(value, dict) and value.get("status") == RunStatus.CANCELLED.value:
        raise ChildCancelledError(node.workflow, node.request_id, value.get("reason"))
    return value.get("result") if isinstance(value, dict) else None
