"""The fault-injecting store wrapper and what it injects.

A :class:`FaultyStore` wraps any real store; its ``plan`` chooses, per store
call, a :class:`Fault` or nothing. Why a wrapper and not a mock: the wrapped
store is real, so what a test asserts afterwards is real state.

>>> from idemflow import atomic, run
>>> from idemflow.client import rows
>>> from idemflow.stores import MemoryStore
>>> store = FaultyStore(MemoryStore(), lambda point: Fault.CONFLICT if point.index == 0 else None)
>>> def add(tx):
...     tx.put("n", tx.get("n", 0) + 1)
>>> run(atomic("accounts", "a", add), request_id="seed", store=store.inner)
>>> run(atomic("accounts", "a", add), request_id="r", store=store)  # conflicts once, retried
>>> [fault.value for _point, fault in store.injected], rows(store.inner, "accounts")
(['conflict'], {('a', 'n'): 2})
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from idemflow.core.policy import resend
from idemflow.core.requests import ProcessDied
from idemflow.errors import TransientError
from idemflow.keys import DATA
from idemflow.running.reads import rows
from idemflow.serialization import JSON, encode
from idemflow.stores.base import (
    Capabilities,
    Check,
    CommitOutcome,
    Cond,
    Conflict,
    Delete,
    Op,
    OpFailure,
    Put,
    Row,
    RowRef,
    Store,
)


class SimulatedCrash(ProcessDied):
    """The process 'died' here. A BaseException so no handler in the engine or
    in user code catches it: it unwinds like a kill, and the test retries.
    Like a kill, it gives nothing back on the way out: the limit slots and the
    effect lease the execution held stay held until their leases end."""


class Fault(enum.Enum):
    """What to do at one store call."""

    CRASH_BEFORE = "crash-before"
    """Die before the call reaches the backend."""
    CRASH_AFTER = "crash-after"
    """The backend applied the call; die before the caller sees the answer."""
    LOST_ANSWER = "lost-answer"
    """The backend applied the call; the caller gets a transient error (timeout)."""
    TRANSIENT = "transient"
    """The call fails transiently without reaching the backend."""
    CONFLICT = "conflict"
    """A concurrent writer got in first: a data row the commit checks is rewritten (same
    value, new version) just before the commit, which then fails as a data conflict and
    the step body reruns. A commit that checks no existing data row and expects one to be
    absent fails without being sent; one that checks nothing (only increments and memo
    inserts) cannot conflict and goes through untouched (nothing is recorded)."""


@dataclass(frozen=True, slots=True)
class FaultPoint:
    """One store call about to happen: its kind, its index among calls of that kind."""

    kind: str  # "commit" or "read"
    index: int
    ops: tuple[Op, ...] = ()
    ref: RowRef | None = None


Plan = Callable[[FaultPoint], Fault | None]
_SEND = object()


class StoreWrapper:
    """A :class:`~idemflow.stores.base.Store` that hands every call to ``inner``: the base of a
    wrapper that looks at or changes some calls (override them) and passes the rest through.

    >>> from idemflow import atomic, run
    >>> from idemflow.stores import MemoryStore
    >>> class Commits(StoreWrapper):
    ...     seen = 0
    ...     def commit(self, ops):
    ...         self.seen += 1
    ...         return super().commit(ops)
    >>> store = Commits(MemoryStore())
    >>> run(atomic("tablea", "p", lambda tx: tx.put("k", 1)), request_id="r", store=store)
    >>> store.seen
    1
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.capabilities: Capabilities = inner.capabilities

    def read(self, ref: RowRef) -> Row | None:
        return self.inner.read(ref)

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        return self.inner.read_many(refs)

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        return self.inner.commit(ops)

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self.inner.commit_cache(ops)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        return self.inner.scan(table, partition)

    def tables(self) -> list[str]:
        return self.inner.tables()

    def create_tables(self, *names: str) -> None:
        self.inner.create_tables(*names)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    @property
    def round_trips(self) -> int:
        return self.inner.round_trips


class FaultyStore(StoreWrapper):
    """A :class:`~idemflow.stores.base.Store` that injects faults chosen by ``plan``.

    ``plan`` sees every commit (and read, if ``reads=True``) and returns the
    fault to inject there, or None. Counting is thread-safe.
    """

    def __init__(self, inner: Store, plan: Plan, *, reads: bool = False) -> None:
        super().__init__(inner)
        self.plan = plan
        self.reads = reads
        self._lock = threading.Lock()
        self._commits = 0
        self._reads = 0
        self.injected: list[tuple[FaultPoint, Fault]] = []

    def _next(self, kind: str) -> int:
        with self._lock:
            if kind == "commit":
                self._commits += 1
                return self._commits - 1
            self._reads += 1
            return self._reads - 1

    def _inject(self, point: FaultPoint, call: Callable[[], object]) -> object:
        fault = self.plan(point)
        if fault is None:
            return call()
        if fault is Fault.CONFLICT:
            if point.kind != "commit":
                return call()  # a read cannot conflict
            forced = self._interfere(point.ops)
            if forced is None:
                return call()  # nothing this commit checks can be written underneath it
            with self._lock:
                self.injected.append((point, fault))
            return call() if forced is _SEND else forced
        with self._lock:
            self.injected.append((point, fault))
        if fault is Fault.CRASH_BEFORE:
            raise SimulatedCrash(f"crash before {point.kind} #{point.index}")
        if fault is Fault.TRANSIENT:
            raise TransientError(f"injected transient error at {point.kind} #{point.index}")
        # The call must reach the backend before the crash or the lost answer: one the backend
        # refused transiently (a DynamoDB transaction conflict) is sent again until it lands.
        resend(call)
        if fault is Fault.CRASH_AFTER:
            raise SimulatedCrash(f"crash after {point.kind} #{point.index}")
        raise TransientError(f"injected lost answer at {point.kind} #{point.index}")

    def _interfere(self, ops: tuple[Op, ...]) -> Conflict | object | None:
        """Play the concurrent writer: bump a data row the commit conditions on.

        Returns ``_SEND`` (a row was bumped: send the commit, it fails for real), a
        :class:`Conflict` to return unsent (only absent rows were expected), or None.
        """
        absent: int | None = None
        for index, op in enumerate(ops):
            if not isinstance(op, (Put, Delete, Check)) or not op.ref.key.startswith(DATA):
                continue
            if op.expect is Cond.ABSENT:
                absent = index if absent is None else absent
            elif op.expect is not Cond.ANY:
                row = resend(self.inner.read, op.ref)
                if row is None:
                    return Conflict((OpFailure(index),))  # gone already: the commit must fail
                # Same value, new version; if the row moved meanwhile the commit fails anyway.
                resend(self.inner.commit, [Put(op.ref, row.value, encode(row.value), row.version)])
                return _SEND
        if absent is not None:
            return Conflict((OpFailure(absent),))
        return None

    def read(self, ref: RowRef) -> Row | None:
        if not self.reads:
            return self.inner.read(ref)
        point = FaultPoint("read", self._next("read"), ref=ref)
        return self._inject(point, lambda: self.inner.read(ref))  # type: ignore[return-value]

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        if not self.reads:
            return self.inner.read_many(refs)
        point = FaultPoint("read", self._next("read"), ref=refs[0])
        return self._inject(point, lambda: self.inner.read_many(refs))  # type: ignore[return-value]

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        point = FaultPoint("commit", self._next("commit"), ops=tuple(ops))
        return self._inject(point, lambda: self.inner.commit(ops))  # type: ignore[return-value]


def data_rows(store: Store, *tables: str) -> dict[tuple[str, str, str], JSON]:
    """Every user data row of ``tables`` as ``{(table, partition, key): value}``
    (memo and bookkeeping rows left out): what "the tables" mean in a comparison."""

    return {
        (table, partition, key): value
        for table in tables
        for (partition, key), value in rows(store, table).items()
    }
