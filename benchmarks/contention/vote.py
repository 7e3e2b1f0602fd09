"""The idemflow side of ``contention``: the 2-step vote workflow (record the vote, then
read-modify-write the survey's counts), its variant, and how write attempts and retries are
counted per request for both variants (:class:`Attempts`).

Why apart: the workflow under test and the counting the hand-written side shares are what the
rest of the benchmark is built around.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from benchmarks.contention.params import Vote
from idemflow import Idem, Tx, atomic, run, workflow
from idemflow.client import rows
from idemflow.errors import TransientError
from idemflow.serialization import JSON
from idemflow.stores import Store
from idemflow.stores.base import CommitOutcome, Conflict, Op
from idemflow.testing.faults import StoreWrapper


def _record(vote: Vote) -> Callable[[Tx], None]:
    def record(tx: Tx) -> None:
        key = f"r:{vote['voter']}"
        if tx.get(key) is not None:
            tx.abort("already voted")
        tx.put(key, vote["option"])

    return record


def _tally(option: str) -> Callable[[Tx], int]:
    def tally(tx: Tx) -> int:
        counts: dict[str, int] = dict(tx.get("counts") or {})
        counts[option] = counts.get(option, 0) + 1
        tx.put("counts", counts)
        return counts[option]

    return tally


@workflow("vote")
def vote_workflow(vote: Vote) -> Generator[Idem[Any], Any, int]:
    yield atomic("responses", vote["survey"], _record(vote))
    rank: int = yield atomic("summaries", vote["survey"], _tally(vote["option"]))
    return rank


# -- counting write attempts per request ----------------------------------------------------------


class Attempts:
    """Write attempts per request id, charged to the request the calling thread is sending, and
    retries by kind (a :class:`benchmarks.common.exactly_once.Tally`)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._counts: dict[str, int] = defaultdict(int)
        self.retries = {"data": 0, "transient": 0}
        """Retries so far, after a data conflict or after a transient error (never reset)."""

    def sending(self, request_id: str) -> None:
        self._local.request = request_id

    def attempted(self) -> None:
        request = getattr(self._local, "request", "-")
        with self._lock:
            self._counts[request] += 1

    def retried(self, transient: bool) -> None:
        with self._lock:
            self.retries["transient" if transient else "data"] += 1

    def take(self) -> dict[str, int]:
        """The counts so far, reset."""
        with self._lock:
            counts, self._counts = dict(self._counts), defaultdict(int)
        return counts


class CommitsPerRequest(StoreWrapper):
    """Counts the engine's ``commit`` calls (first tries, reruns after a data conflict, resends
    after a transient error) per request; cache writes (completion records) are not commits.
    A commit raising :class:`TransientError` is resent (a transient retry); a
    :class:`Conflict` without an existing memo or run record reruns the body (a data retry)."""

    def __init__(self, inner: Store, attempts: Attempts) -> None:
        super().__init__(inner)
        self.attempts = attempts

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self.attempts.attempted()
        try:
            outcome = self.inner.commit(ops)
        except TransientError:
            self.attempts.retried(True)
            raise
        if isinstance(outcome, Conflict) and all(f.existing is None for f in outcome.failures):
            self.attempts.retried(False)
        return outcome


class Variant(Protocol):
    attempts: Attempts

    def send(self, request_id: str, vote: Vote) -> JSON: ...

    def settle(self) -> None:
        """Wait for off-path writes (part of the round's time)."""
        ...

    def counts(self) -> dict[str, dict[str, int]]:
        """Every survey's summary counts."""
        ...


class Idemflow:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.attempts = Attempts()
        self.counted = CommitsPerRequest(store, self.attempts)

    def send(self, request_id: str, vote: Vote) -> JSON:
        rank: int = run(vote_workflow(vote), request_id=request_id, store=self.counted)
        return rank

    def settle(self) -> None:
        self.store.flush()

    def counts(self) -> dict[str, dict[str, int]]:
        return {survey: _counts(value) for (survey, key), value in rows(self.store, "summaries").items()}


def _counts(value: Any) -> dict[str, int]:
    return {str(option): int(n) for option, n in dict(value or {}).items()}
