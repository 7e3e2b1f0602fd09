"""The fault-injecting store wrapper and what it injects."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from idemflow.errors import TransientStoreError
from idemflow.serialization import JSON
from idemflow.stores.base import Capabilities, CommitOutcome, Op, Row, RowRef, Store


class SimulatedCrash(BaseException):
    """The process 'died' here. A BaseException so no handler in the engine or
    in user code catches it: it unwinds like a kill, and the test retries."""


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


@dataclass(frozen=True, slots=True)
class FaultPoint:
    """One store call about to happen: its kind, its index among calls of that kind."""

    kind: str  # "commit" or "read"
    index: int
    ops: tuple[Op, ...] = ()
    ref: RowRef | None = None


Plan = Callable[[FaultPoint], Fault | None]


class FaultyStore:
    """A :class:`~idemflow.stores.base.Store` that injects faults chosen by ``plan``.

    ``plan`` sees every commit (and read, if ``reads=True``) and returns the
    fault to inject there, or None. Counting is thread-safe.
    """

    def __init__(self, inner: Store, plan: Plan, *, reads: bool = False) -> None:
        self.inner = inner
        self.plan = plan
        self.reads = reads
        self.capabilities: Capabilities = inner.capabilities
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
        with self._lock:
            self.injected.append((point, fault))
        if fault is Fault.CRASH_BEFORE:
            raise SimulatedCrash(f"crash before {point.kind} #{point.index}")
        if fault is Fault.TRANSIENT:
            raise TransientStoreError(f"injected transient error at {point.kind} #{point.index}")
        call()
        if fault is Fault.CRASH_AFTER:
            raise SimulatedCrash(f"crash after {point.kind} #{point.index}")
        raise TransientStoreError(f"injected lost answer at {point.kind} #{point.index}")

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


def data_rows(store: Store, *tables: str) -> dict[tuple[str, str, str], JSON]:
    """Every user data row of ``tables`` as ``{(table, partition, key): value}``
    (memo and bookkeeping rows left out): what "the tables" mean in a comparison."""
    from idemflow.reads import rows

    return {
        (table, partition, key): value
        for table in tables
        for (partition, key), value in rows(store, table).items()
    }
