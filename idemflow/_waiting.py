"""The steps that wait or reach another request: timers, children, messages (the engine's part).

:mod:`idemflow.coordination` builds these steps; this mixin of
:class:`~idemflow.engine.Execution` interprets them, with the same memos,
claims and commits as every other step. A step that must wait raises
:class:`~idemflow.plan.Suspended` where the plan says so (``submit`` and
workers hand the rest to the queue) and waits in the process otherwise
(``run``, ``arun``). Only the engine changes an execution's state: these
methods are the engine's own, kept in a module of their own for size.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any, assert_never

from idemflow._execution import Done
from idemflow._io import CommitCache, Scan, Send, Sleep, Steps
from idemflow._stepping import Stepping
from idemflow.errors import (
    ChildAborted,
    IdempotencyKeyReuseError,
    InvalidInputError,
    RequestFailed,
    StoreError,
)
from idemflow.keys import RUNS_TABLE, inbox_key, inbox_prefix, outbox_partition, step_tag, wake_key
from idemflow.monad import Call, Child, Coordination, Deadline, Post, Receive, Start, Until, WaitFor
from idemflow.plan import Suspended
from idemflow.records import (
    Message,
    OutboxEntry,
    RunRecord,
    RunStatus,
    child_outcome,
    new_incarnation,
    of_earlier_run,
    run_ref,
)
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Committed, Delete, Insert, Op, Put, Row, RowRef
from idemflow.tx import Tx

_log = logging.getLogger("idemflow.engine")

_POLL = 0.2
"""Seconds ``run`` waits between looks at a child or an inbox (a worker suspends instead)."""
_LOOK_AGAIN = 15.0
"""Seconds before a worker looks again at a request waited for by one that did not start it (its
outcome wakes only the parent that started it)."""


def _when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="seconds")


def _next_message(found: list[tuple[str, Row, Message]]) -> tuple[str, Row, Message]:
    """The message a ``receive`` takes: each sender's lowest step first, then the earliest sent."""
    heads: dict[str, tuple[str, Row, Message]] = {}
    for key, row, message in found:
        head = heads.get(message.sender)
        if head is None or message.seq < head[2].seq:
            heads[message.sender] = (key, row, message)
    return min(heads.values(), key=lambda head: (head[2].at, head[0]))


def _constant(value: Any) -> Callable[[Tx], Any]:
    """A step body that only decides ``value`` (the step's memo is all it writes)."""
    return lambda tx: value


class Waiting(Stepping):
    """Timers, children and messages: the :class:`~idemflow.engine.Execution` methods for them."""

    def _coordinate(self, node: Coordination) -> Steps[Any]:
        if self.plan.abort is not None and not self._cleaning and isinstance(node, Until | WaitFor | Receive):
            if isinstance(node, Until):
                return None  # an abort waits for nothing: the next step not committed aborts
            self._step += 1  # a memo decides, else this step aborts (its body is replaced)
            identity = "wait " + node.workflow if isinstance(node, WaitFor) else "receive " + node.topic
            return (yield from self._forward(RUNS_TABLE, self.request_id, identity, _constant(None), None))
        match node:
            case Deadline(seconds, at, label):
                due = at if at is not None else self.clock() + (seconds or 0.0)
                return (yield from self._memoized(label, lambda tx: due))
            case Until(due):
                while self.clock() < due:
                    yield from self._suspend(due, None, "sleeping until " + _when(due))
                return None
            case Start():
                return (yield from self._start(node))
            case WaitFor():
                return (yield from self._wait(node))
            case Post():
                return (yield from self._post(node))
            case Receive():
                return (yield from self._receive(node))
            case _:
                assert_never(node)

    def _suspend(self, due: float | None, poll: float | None, why: str) -> Steps[None]:
        """Hand the request to a worker until ``due`` (or a wake-up), or wait here: ``run`` sleeps
        until ``due`` or for ``poll`` seconds, then the caller looks again."""
        if self.plan.suspend:
            if not self._run_known:
                yield from self._claim()  # a worker accepts only requests that were submitted
            raise Suspended(
                tuple(self._journal or ()), due, why, duplicate=self._copy, claimed_at=self._started_at
            )
        left = float("inf") if due is None else due - self.clock()
        yield Sleep(max(min(left, poll if poll is not None else left), 0.0), time.sleep)

    def _replayed(self, identity: str) -> Steps[tuple[bool, Any]]:
        """The current step's memo when replaying: ``(True, value)``, else ``(False, None)``."""
        if not self._replaying:
            return False, None
        here = self._here()
        row = yield from self._read(here)
        if row is not None and of_earlier_run(row, self._incarnation):
            row = yield from self._this_runs(here, row)
        if row is None:
            self._replaying = False  # memos are sequential: none after a missing one
            return False, None
        return True, self._memo_result(row, identity)

    def _here(self) -> RowRef:
        """Where the current table-less step's memo lives."""
        return RowRef(RUNS_TABLE, self.request_id, self._memo_prefix + step_tag(self._step))

    def _wake(self, entry: OutboxEntry, cause: str) -> Put:
        """The wake-up of ``entry``'s request for ``cause``: relayed at once if nobody announces it."""
        wake = dataclasses.replace(entry, due=self.clock())
        value: JSON = wake.to_json()
        ref = RowRef(
            RUNS_TABLE, outbox_partition(entry.request_id), wake_key(entry.workflow, entry.request_id, cause)
        )
        return Put(ref, value, encode(value), expires_at=self._expiry())

    def _announce(self, entry: OutboxEntry, ref: RowRef) -> Steps[None]:
        """Send the continuation of ``entry``'s request now, then clear its outbox row; a queue
        that fails (or none, under ``run``) leaves the row to a worker's relay."""
        if self.plan.announce is None:
            return
        try:
            yield Send(self.plan.announce(entry))
        except StoreError as exc:
            _log.warning("queue send failed; a worker's relay will send it: %s", exc)
            return
        yield CommitCache([Delete(ref)])

    def _step_beside(
        self, identity: str, memo: JSON, beside: Callable[[], Steps[list[Op]]], wake: Put
    ) -> Steps[None]:
        """A table-less step deciding ``memo`` whose commit also writes ``beside()``: rows in other
        partitions (a child's claim, a message), recomputed on each attempt, empty once written.

        Where one commit cannot span partitions (Azure), if ``beside()`` has rows to write, the
        step's ``wake`` row goes first, then each of them, then the memo: a crash after the
        wake-up only wakes a request for nothing, and a rerun that meets the rows (``beside()``
        then returns nothing, and writes no wake-up) finds the wake-up written already."""
        if self.capabilities.cross_partition_commit or self.plan.abort is not None:
            yield from self._forward(RUNS_TABLE, self.request_id, identity, _constant(memo), None, beside)
            return
        done, _ = yield from self._replayed(identity)
        if done:
            return
        rows = yield from beside()
        if rows:
            yield from self._commit([wake], wake.ref)
        for op in rows:
            if op is wake:
                continue  # committed just above
            if not isinstance((yield from self._commit([op], op.ref)), Committed):
                yield from beside()  # a rerun or a race wrote it: checked again
        yield from self._forward(RUNS_TABLE, self.request_id, identity, _constant(memo), None)

    def _start(self, node: Start) -> Steps[Child]:
        if node.call.name == self.workflow and node.request_id == self.request_id:
            raise InvalidInputError(
                f"workflow {self.workflow!r} request {self.request_id!r} cannot start itself as its child: "
                "give the child a request id of its own"
            )
        self._step += 1
        step = self._step
        identity = "start " + node.call.name
        child = Child(node.call.name, node.request_id, node.call)
        entry = OutboxEntry(node.call.name, node.version, node.request_id, 0.0)
        claim_ref = run_ref(node.call.name, node.request_id)
        outbox = self._wake(entry, "start")
        record = RunRecord(
            node.fingerprint,
            RunStatus.RUNNING,
            version=node.version,
            input=node.input,
            started_at=self.clock(),
            incarnation=new_incarnation(),
            # A parent a worker runs is woken by the child's outcome; one ``run`` runs polls.
            parent=OutboxEntry(self.workflow, self.plan.version, self.request_id, 0.0)
            if self.plan.suspend
            else None,
        )
        claim_value: JSON = record.to_json()
        claim_text = encode(claim_value, f"input of child {node.call.name!r} {node.request_id!r}", envelope=3)

        made = [False]

        def claimed() -> Steps[list[Op]]:
            """The child's claim and outbox row, or nothing if it was claimed already."""
            existing = yield from self._read(claim_ref)
            if existing is None:
                made[0] = True  # this execution starts it: it sends the child's pointer too
                return [Insert(claim_ref, claim_value, claim_text, self._expiry()), outbox]
            found = RunRecord.from_json(existing.value)
            if found.fingerprint != node.fingerprint and found.fingerprint not in node.aliases:
                raise IdempotencyKeyReuseError(
                    node.call.name, node.request_id, found.fingerprint, node.fingerprint
                )
            return []

        memo: JSON = {"wf": node.call.name, "id": node.request_id}
        yield from self._step_beside(identity, memo, claimed, outbox)
        if made[0]:  # a replay, or a claim found made, sends nothing: the relay has its outbox row
            yield from self._announce(entry, outbox.ref)
        if node.on_parent_abort == "abort":
            self._done.append(Done(step, node, child))
        return child

    def _wait(self, node: WaitFor) -> Steps[Any]:
        self._step += 1
        identity = "wait " + node.workflow
        while True:
            done, value = yield from self._replayed(identity)
            if done:
                return self._child_result(value, node)
            row = yield from self._read(run_ref(node.workflow, node.request_id))
            if row is None:
                raise InvalidInputError(
                    f"wait: no request {node.request_id!r} of workflow {node.workflow!r} was started"
                )
            record = RunRecord.from_json(row.value)
            if record.status.final:
                outcome = child_outcome(record)
                value = yield from self._forward(
                    RUNS_TABLE, self.request_id, identity, _constant(outcome), None
                )
                return self._child_result(value, node)
            if self.plan.suspend:
                waiting = f"waiting for {node.workflow!r} request {node.request_id!r}"
                parent = record.parent
                woken = parent is not None and (parent.workflow, parent.request_id) == (
                    self.workflow,
                    self.request_id,
                )
                # Its outcome wakes the parent it recorded; any other waiter looks again now and then.
                yield from self._suspend(None if woken else self.clock() + _LOOK_AGAIN, None, waiting)
            elif record.status is RunStatus.FAILED and record.failure is not None:
                failure = record.failure
                raise RequestFailed(
                    node.workflow, node.request_id, failure.step, failure.reason, failure.attempts
                )
            elif node.call is not None and node.call.version == record.version:
                yield from self._run_child(node.call, node.request_id, record)
            else:
                yield from self._suspend(None, _POLL, "")

    def _run_child(self, call: Call, request_id: str, record: RunRecord) -> Steps[None]:
        """Under ``run``, a child nobody finished yet runs here, as its own request: an
        execution of its own, so the engine's top layer builds it."""
        raise NotImplementedError

    def _child_result(self, value: Any, node: WaitFor) -> Any:
        if isinstance(value, dict) and value.get("status") == RunStatus.ABORTED.value:
            raise ChildAborted(value.get("reason"), node.workflow, node.request_id)
        return value.get("result") if isinstance(value, dict) else None

    def _post(self, node: Post) -> Steps[None]:
        self._step += 1
        identity = f"send {node.workflow} {node.topic}"
        sender = f"{self.workflow}|{self.request_id}"
        key = inbox_key(node.workflow, node.request_id, node.topic, f"{sender}|{self._step}")
        ref = RowRef(RUNS_TABLE, node.request_id, key)
        entry = OutboxEntry(node.workflow, 1, node.request_id, 0.0)
        wake = self._wake(entry, "message " + key)
        message: JSON = Message(node.value, sender, self._step, self.clock()).to_json()
        text = encode(message, f"message to {node.workflow!r} {node.request_id!r} on {node.topic!r}")
        waiting = [False]

        def delivered() -> Steps[list[Op]]:
            """The message and its wake-up, or nothing if a resent step delivered it already.

            The receiver is woken at once only if it was submitted and is not finished; else the
            relay sends the wake-up if the request exists by then (a ``run`` polls instead)."""
            if (yield from self._read(ref)) is not None:
                return []
            receiver = yield from self._read(run_ref(node.workflow, node.request_id))
            found = None if receiver is None else RunRecord.from_json(receiver.value)
            waiting[0] = found is not None and found.input is not None and not found.status.final
            return [Insert(ref, message, text, self._expiry()), wake]

        yield from self._step_beside(identity, None, delivered, wake)
        if waiting[0]:
            yield from self._announce(entry, wake.ref)
        return None

    def _receive(self, node: Receive) -> Steps[Any]:
        self._step += 1
        identity = "receive " + node.topic
        prefix = inbox_prefix(self.workflow, self.request_id, node.topic)
        while True:
            done, value = yield from self._replayed(identity)
            if done:
                return value
            inbox = [
                (key, row, Message.from_json(row.value))
                for _, key, row in (yield Scan(RUNS_TABLE, self.request_id))
                if key.startswith(prefix)
            ]
            found = [(key, row, message) for key, row, message in inbox if not message.taken]
            if found:
                key, row, message = _next_message(found)
                # Kept as taken, not deleted: a sender resending its step meets it (on Azure the
                # message commits before the sender's memo) instead of sending it again.
                taken: JSON = message.as_taken().to_json()
                ref = RowRef(RUNS_TABLE, self.request_id, key)
                consumed = Put(ref, taken, encode(taken), row.version, self._expiry())

                def consume(consumed: Put = consumed) -> Steps[list[Op]]:
                    return [consumed]
                    yield  # a generator: the engine's extra operations are computations

                value = message.value
                return (
                    yield from self._forward(
                        RUNS_TABLE, self.request_id, identity, _constant(value), None, consume
                    )
                )
            if node.due is not None and self.clock() >= node.due:  # timed out: None, memoized
                return (
                    yield from self._forward(RUNS_TABLE, self.request_id, identity, lambda tx: None, None)
                )
            until = "" if node.due is None else " until " + _when(node.due)
            yield from self._suspend(node.due, _POLL, f"waiting for a message on {node.topic!r}{until}")
