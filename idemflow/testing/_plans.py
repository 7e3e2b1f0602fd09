"""What the workflow checker injects and compares: fault plans, the fast retry policy, snapshots.

:func:`~idemflow.testing.check.check_workflow` runs a workflow under every plan here and
compares the :func:`snapshot` of each run with a failure-free one; kept apart so the checker
module holds only the scenarios.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import stop_after_attempt, wait_none, wait_random

from idemflow.core.places import is_places_row
from idemflow.core.policy import RetryPolicy
from idemflow.engine.monad import Idem
from idemflow.keys import DATA, RUNS_TABLE, parse_published_key
from idemflow.stores.base import CommitOutcome, Committed, Op, Store
from idemflow.testing.faults import Fault, FaultPoint, FaultyStore, Plan, SimulatedCrash
from idemflow.testing.report import Outcome, Snapshot, describe_commit


class MovedClock:
    """The checker's clock of one scenario: the clock it was given, plus the time its waits passed.

    A ``sleep``, a ``receive(timeout=)`` or a retry's backoff under ``run`` moves it on to the
    wait's end (:class:`~idemflow.core.requests.SkippingClock`) instead of sleeping: the given clock
    is frozen by default, so a real wait would never end. Racing executions of one scenario share
    it and move it to the same memoized ends, so every scenario sees the reference's times.

    >>> clock = MovedClock(lambda: 100.0)
    >>> clock.skip_to(160.0); clock.skip_to(130.0); clock()
    160.0
    """

    def __init__(self, base: Callable[[], float]) -> None:
        self._base = base
        self._skipped = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._base() + self._skipped

    def skip_to(self, when: float) -> None:
        with self._lock:
            self._skipped = max(self._skipped, when - self._base())


RERUN = "a failure-free rerun on a fresh store"
RACING = "racing:"


def fast_policy() -> RetryPolicy:
    """Retries without real waits (a checker runs thousands of them), bounds kept generous.

    >>> fast_policy().conflicts.stop.max_attempt_number
    50
    """
    base = RetryPolicy()
    return RetryPolicy(
        conflicts=base.conflicts.copy(wait=wait_random(0, 0.002), stop=stop_after_attempt(50)),
        transient=base.transient.copy(wait=wait_none()),
    )


def snapshot(store: Store, outcome: Outcome) -> Snapshot:
    """The outcome with every data row, every event and stream value a request published (what
    readers see, under its row key), and every memo / run-record key of ``store`` (but the places
    row a submission's checkpoint writes: it says where the memos are, not a step's path).

    >>> from idemflow.stores import MemoryStore
    >>> snapshot(MemoryStore(), Outcome("completed", None)).rows
    {}
    """
    store.flush()
    rows: dict[tuple[str, str, str], Any] = {}
    bookkeeping = set()
    for table in store.tables():
        for partition, key, row in store.scan(table):
            if key.startswith(DATA):
                rows[(table, partition, key[1:])] = row.value
            elif table == RUNS_TABLE and parse_published_key(key) is not None:
                rows[(table, partition, key)] = row.value
            elif not is_places_row(key):
                bookkeeping.add((table, partition, key))
    return Snapshot(outcome, rows, frozenset(bookkeeping))


class CrashAfterProgress(FaultyStore):
    """Dies right after every commit that applied: one commit of progress per execution."""

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        outcome = self.inner.commit(ops)
        if isinstance(outcome, Committed):
            point = FaultPoint("commit", self._next("commit"), tuple(ops))
            self.injected.append((point, Fault.CRASH_AFTER))
            raise SimulatedCrash(f"crash after commit #{point.index}")
        return outcome


class CacheLosingStore(FaultyStore):
    """Drops completion records (``commit_cache``): as if the process died right before."""

    def commit_cache(self, ops: Sequence[Op]) -> None:
        return None


FAULT_TEXT = {
    Fault.CRASH_BEFORE: "the process dies just before commit #{i}",
    Fault.CRASH_AFTER: "the process dies just after commit #{i} applied, before it sees the answer",
    Fault.LOST_ANSWER: "commit #{i} applies but its answer is lost (a timeout)",
    Fault.TRANSIENT: "commit #{i} fails with a transient error",
    Fault.CONFLICT: "a concurrent writer changes a row that commit #{i} checks, just before it",
}


def never(point: FaultPoint) -> Fault | None:
    return None


def recorder(into: list[FaultPoint]) -> Plan:
    def record(point: FaultPoint) -> Fault | None:
        into.append(point)
        return None

    return record


def at_commit(index: int, fault: Fault) -> Plan:
    return lambda point: fault if point.index == index else None


def injected(point: FaultPoint, fault: Fault) -> str:
    return f"injected {fault.value} at {point.kind} #{point.index}:\n{describe_commit(point.ops)}"


def hint(scenario: str) -> str:
    if scenario == RERUN:
        return (
            "two failure-free runs differ: the workflow is not deterministic. Use now(), uuid4(), "
            "random() instead of time/uuid/random, and depend only on the input and step results."
        )
    if scenario.startswith(RACING):
        return "racing executions disagree: results must come from step results, not from process state."
    return (
        "a retry took another path or wrote something else: pass data between steps through step "
        "results (x = yield atomic(...)), never through variables a step body sets, and keep side "
        "effects inside steps or effect()."
    )


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What :func:`~idemflow.testing.check.check_workflow` was asked to check, and how."""

    wf: Callable[[Any], Idem[Any]]
    store_factory: Callable[[], Store]
    setup: Callable[[Store], object] | None
    faults: tuple[Fault, ...]
    duplicates: int
    request_id: str
    signing_key: bytes
    policy: RetryPolicy
    clock: Callable[[], float]
    max_attempts: int
