"""A dict of rows that answers an engine part's requests: the smallest store there is.

The engine's parts never call a store; they yield requests (:mod:`idemflow.core.requests`).
These tests drive one part's generator with :class:`Rows` instead of one of
our stores, so a part is checked against the requests it makes and the rows
they leave, and a failure can be put exactly where a test wants it
(:meth:`Rows.fail_next`, :meth:`Rows.refuse_next`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from idemflow import RetryPolicy
from idemflow.compensation.compensator import Compensator
from idemflow.core.plan import Plan
from idemflow.core.requests import CallOut, Commit, CommitCache, Read, ReadMany, Scan, Sleep, Steps, Turn
from idemflow.core.trampoline import trampoline
from idemflow.engine.branches import Branches
from idemflow.engine.coordinator import Coordinator, RunChild
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit
from idemflow.engine.given import Given
from idemflow.engine.interpreter import Interpreter
from idemflow.engine.journal import Journal
from idemflow.engine.memo_reader import MemoReader
from idemflow.engine.outcome import OutcomeWriter
from idemflow.engine.publisher import Publisher
from idemflow.engine.run_record import RunRecorder
from idemflow.engine.stepper import Stepper
from idemflow.engine.store_calls import StoreCalls
from idemflow.engine.together import Together
from idemflow.keys import memo_prefix
from idemflow.records import run_ref
from idemflow.serialization import JSON
from idemflow.stores.base import (
    COMMITTED,
    Capabilities,
    Check,
    CommitOutcome,
    Cond,
    Conflict,
    Delete,
    Increment,
    Insert,
    Op,
    OpFailure,
    Put,
    Row,
    RowRef,
)

T = TypeVar("T")

CROSS = Capabilities(True, 100, 400_000, 4_000_000, 1024)
"""A backend whose commits span partitions (SQLite, DynamoDB)."""
ONE_PARTITION = Capabilities(False, 100, 64_000, 4_000_000, 1024)
"""A backend whose commits stay in one partition (Azure)."""
FAST = RetryPolicy(deadline=2.0)
"""Tests wait for nothing: a short deadline bounds any retry loop gone wrong."""


class Rows:
    """Rows by reference, each ``(value, version)``; every request it answered, in order."""

    def __init__(self) -> None:
        self.rows: dict[RowRef, tuple[JSON, int]] = {}
        self.asked: list[object] = []
        self._version = 0
        self._failures: list[tuple[type, BaseException]] = []
        self._refusals: list[int] = []

    def put(self, ref: RowRef, value: JSON) -> None:
        """A row some other execution wrote."""
        self._version += 1
        self.rows[ref] = (value, self._version)

    def row(self, ref: RowRef) -> Row | None:
        found = self.rows.get(ref)
        return None if found is None else Row(found[0], found[1])

    def fail_next(self, kind: type, error: BaseException) -> None:
        """The next request of ``kind`` raises ``error`` instead of being answered."""
        self._failures.append((kind, error))

    def refuse_next(self, index: int) -> None:
        """The next commit fails its operation at ``index`` as if another execution moved the row."""
        self._refusals.append(index)

    def commits(self) -> list[list[Op]]:
        return [list(request.ops) for request in self.asked if isinstance(request, Commit)]

    def run(self, steps: Steps[T]) -> T:
        return trampoline(steps, self.answer)

    def answer(self, request: object) -> Any:
        self.asked.append(request)
        for at, (kind, error) in enumerate(self._failures):
            if type(request) is kind:
                del self._failures[at]
                raise error
        match request:
            case Read(ref):
                return self.row(ref)
            case ReadMany(refs):
                return [self.row(ref) for ref in refs]
            case Commit(ops):
                return self._commit(list(ops))
            case CommitCache(ops):
                self._apply(list(ops))
                return None
            case Scan(table, partition):
                return sorted(
                    (ref.partition, ref.key, Row(value, version))
                    for ref, (value, version) in self.rows.items()
                    if ref.table == table and partition in (None, ref.partition)
                )
            case Turn():
                return lambda: None
            case Sleep():
                return None
            case CallOut(function, key):
                return function(key)
        raise TypeError(f"not an engine request: {request!r}")

    def _commit(self, ops: list[Op]) -> CommitOutcome:
        failures = []
        for index, op in enumerate(ops):
            current = self.rows.get(op.ref)
            if isinstance(op, Insert):
                ok = current is None
            elif isinstance(op, Put | Delete | Check):
                ok = _matches(current, op.expect)
            else:
                ok = True
            if self._refusals and self._refusals[0] == index:
                ok = False
            if not ok:
                existing = Row(*current) if isinstance(op, Insert) and current is not None else None
                failures.append(OpFailure(index, existing))
        self._refusals[:1] = []
        if failures:
            return Conflict(tuple(failures))
        self._apply(ops)
        return COMMITTED

    def _apply(self, ops: list[Op]) -> None:
        for op in ops:
            if isinstance(op, Put | Insert):
                self.put(op.ref, op.value)
            elif isinstance(op, Increment):
                current = self.rows.get(op.ref)
                base = 0 if current is None else current[0]
                assert type(base) is int and type(op.delta) is int, "these tests count in ints"
                self.put(op.ref, base + op.delta)
            elif isinstance(op, Delete):
                self.rows.pop(op.ref, None)


def _matches(current: tuple[JSON, int] | None, expect: object) -> bool:
    if expect is Cond.ANY:
        return True
    if expect is Cond.ABSENT:
        return current is None
    return current is not None and current[1] == expect


def given(
    plan: Plan | None = None,
    *,
    capabilities: Capabilities = CROSS,
    workflow: str = "wf",
    request_id: str = "r1",
    fingerprint: str = "fp",
    aliases: tuple[str, ...] = (),
    clock: Callable[[], float] = lambda: 1000.0,
) -> Given:
    """What an execution of ``workflow``'s ``request_id`` is given: bodies read through the
    driver (no blocking reader), telemetry and logs off."""
    return Given(
        capabilities,
        workflow,
        request_id,
        fingerprint,
        aliases,
        FAST,
        clock,
        plan or Plan(),
        None,
        run_ref(workflow, request_id),
        memo_prefix(workflow, request_id),
        False,
        False,
    )


class Parts:
    """One execution's parts, wired as :class:`~idemflow.engine.execution.Execution` wires them."""

    def __init__(
        self,
        facts: Given,
        *,
        run_child: RunChild | None = None,
        abort_child: Callable[..., Steps[None]] | None = None,
    ) -> None:
        self.given = facts
        self.cursor = Cursor(facts.plan.resume)
        self.calls = StoreCalls(facts, self.cursor)
        self.recorder = RunRecorder(facts, self.cursor, self.calls)
        self.memos = MemoReader(facts, self.cursor, self.calls, self.recorder)
        self.deferred = DeferredCommit(facts, self.cursor, self.calls, self.memos)
        self.journal = Journal(facts, self.cursor)
        self.stepper = Stepper(
            facts, self.cursor, self.calls, self.memos, self.recorder, self.deferred, self.journal
        )
        self.coordinator = Coordinator(
            facts,
            self.cursor,
            self.calls,
            self.memos,
            self.recorder,
            self.journal,
            self.stepper,
            run_child or _no_child,
        )
        self.compensator = Compensator(
            facts, self.cursor, self.stepper, self.deferred, abort_child or _no_child
        )
        self.outcome = OutcomeWriter(
            facts, self.cursor, self.calls, self.recorder, self.deferred, self.memos, self.journal
        )
        self.publisher = Publisher(facts, self.cursor, self.stepper)
        self.together = Together(
            facts,
            self.cursor,
            self.calls,
            self.memos,
            self.recorder,
            self.journal,
            self.stepper,
            self.coordinator,
            Branches(self.cursor, self.stepper, self.calls),
        )
        self.interpreter = Interpreter(
            facts,
            self.cursor,
            self.recorder,
            self.deferred,
            self.journal,
            self.stepper,
            self.coordinator,
            self.compensator,
            self.publisher,
            self.together,
        )


def _no_child(*_: object) -> Steps[None]:
    raise AssertionError("this test starts no child")
    yield
