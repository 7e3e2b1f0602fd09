"""No request fails under contention (issue #20): throughput, latency, failures and retries
of a read-modify-write workflow as concurrent users pile onto one row, against the minimal
exactly-once version written by hand under the same load and the same conflicts.

Why: idemflow retries a step until a deadline (30 s) instead of a fixed number of times, so
on a hot row requests should queue up and finish at the row's serial rate, never reach the
caller as an error, and cost no more than the hand-written version (target: idemflow /
minimal throughput ≥ 0.9). This measures it, and checks exactly-once while doing so.

The workload, a 2-step survey vote:

1. record the vote in table ``responses``, partition = survey, key ``r:<voter>`` (a second
   vote of the same voter is refused: the step aborts);
2. read-modify-write the survey's one summary row (``summaries/<survey>``, key ``counts``,
   a dict option -> count): read it, add one, write it back; the answer is the option's
   new count (each vote's rank: distinct per option if the updates were serial).

Each request id is sent **twice**: by default (``--duplicates same-user``) its user sends it
again as soon as it has the answer (a client retrying a request whose answer it lost); with
``next-user`` the second copy comes from the next user, in the same position of its own
sequence, so with several users it usually races the original (a client retrying through
another server while the first attempt still runs): twice the executions on the hot row.
Both sends must get the same answer, and the duplicate must change nothing. Users are threads
(kept for a whole cell) sending back to back: 1, 8, 32, 64, 128; placement **hot** (every user
votes in one survey: one summary row) or **spread** (a survey per user).

Variants, interleaved round by round in this process (order alternating), each on fresh
tables per cell:

- **idemflow**: a ``@workflow`` under :func:`idemflow.run`;
- **minimal**: the hand-written minimal exactly-once version (:mod:`benchmarks._exactly_once`):
  each step one transactional write with its data change, conditioned on what it read, and a
  memo row (request id, step) inserted if absent; a duplicate answered from the memo;
  conflicts retried with jittered exponential backoff until a 30 s deadline (idemflow's own
  waits and deadline).

Stores: SQLite, DynamoDB Local (AWS's own engine) with
:class:`idemflow.testing.conflicts.DynamoDBConflicts` on both variants' clients (the service's
transaction-conflict rules, plus ``--phantom-rate`` conflicts injected at random: 0.05), and
Azure Tables on Azurite.

Reported per store × placement × users × variant: throughput (sends per second, both sends
counted, until every effect is done: idemflow's off-path completion writes flushed), p50/p95
latency of answered sends, failed sends (any exception reaching the caller; the goal is 0),
write attempts beyond a conflict-free execution's per request id (p50/p99: idemflow's commits
counted by a :class:`~idemflow.stores.base.StoreWrapper`, the baseline's own attempts; the
conflict-free number is measured on each cell's fresh tables before the load), the per-round
idemflow / minimal throughput ratio, and the exactly-once check: every survey's final counts
equal its distinct voters, both sends of a request got one answer, and no rank was given
twice. Violations are printed loudly and listed on the page.

Run: ``python -m benchmarks contention [--quick] [--stores sqlite,dynamodb-local,azurite]``
(or ``python -m benchmarks.contention --help`` for sizes). Writes ``contention.md``,
``contention.json`` and ``contention.png`` into ``benchmarks/results/`` (``--quick``:
``results-quick/``). The full run takes about 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import sqlite3
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks._backends import LABELS, Backend, create_dynamodb_table, open_backend
from benchmarks._exactly_once import (
    SQLITE_MEMOS,
    AzureSteps,
    DynamoSteps,
    Execution,
    Refused,
    SqliteSteps,
    dumps,
)
from benchmarks._report import Report, fmt_ratio
from benchmarks._stats import RESULTS, Summary, paired_ratio, percentile, summarize
from benchmarks._workloads import _PerThread
from idemflow import Idem, Store, Tx, atomic, rows, run, workflow
from idemflow.errors import TransientStoreError
from idemflow.serialization import JSON
from idemflow.stores.base import CommitOutcome, Conflict, Op
from idemflow.testing.faults import StoreWrapper

STORES = ("sqlite", "dynamodb-local", "azurite")
TITLES = {
    "sqlite": "SQLite (WAL, synchronous=FULL)",
    "dynamodb-local": "DynamoDB Local + conflict emulator",
    "moto": "DynamoDB on moto + conflict emulator",
    "azurite": "Azure Tables (Azurite)",
}
DYNAMO = ("dynamodb-local", "moto")
USERS = (1, 8, 32, 64, 128)
PLACEMENTS = ("hot", "spread")
VARIANTS = ("idemflow", "minimal")
OPTIONS = ("yes", "no")
PHANTOM_RATE = 0.05
CALIBRATION = 3
"""Requests (each sent twice, one after the other) that measure a conflict-free execution's writes."""
TARGET_RATIO = 0.9

Vote = dict[str, str]
"""``{"survey": ..., "voter": ..., "option": ...}``"""


# -- the workflow ---------------------------------------------------------------------------------


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
    retries by kind (a :class:`benchmarks._exactly_once.Tally`)."""

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
    A commit raising :class:`TransientStoreError` is resent (a transient retry); a
    :class:`Conflict` without an existing memo or run record reruns the body (a data retry)."""

    def __init__(self, inner: Store, attempts: Attempts) -> None:
        super().__init__(inner)
        self.attempts = attempts

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self.attempts.attempted()
        try:
            outcome = self.inner.commit(ops)
        except TransientStoreError:
            self.attempts.retried(True)
            raise
        if isinstance(outcome, Conflict) and all(f.existing is None for f in outcome.failures):
            self.attempts.retried(False)
        return outcome


# -- the variants ---------------------------------------------------------------------------------


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


class MinimalSqlite:
    """Both steps inside ``BEGIN IMMEDIATE`` on one file, a connection per user thread."""

    def __init__(self, backend: Backend, tag: str) -> None:
        self.attempts = Attempts()
        self.db = _PerThread(
            backend,
            tag,
            [
                "CREATE TABLE responses (survey TEXT, key TEXT, v TEXT NOT NULL, PRIMARY KEY (survey, key))",
                "CREATE TABLE summaries (survey TEXT, key TEXT, v TEXT NOT NULL, PRIMARY KEY (survey, key))",
                SQLITE_MEMOS,
            ],
        )
        self.steps = SqliteSteps(self.db, self.attempts)

    def send(self, request_id: str, vote: Vote) -> JSON:
        survey, voter, option = vote["survey"], vote["voter"], vote["option"]

        def record(conn: sqlite3.Connection) -> JSON:
            found = conn.execute(
                "SELECT 1 FROM responses WHERE survey = ? AND key = ?", (survey, f"r:{voter}")
            ).fetchone()
            if found is not None:
                raise Refused("already voted")
            conn.execute("INSERT INTO responses VALUES (?, ?, ?)", (survey, f"r:{voter}", dumps(option)))
            return None

        def tally(conn: sqlite3.Connection) -> JSON:
            found = conn.execute(
                "SELECT v FROM summaries WHERE survey = ? AND key = 'counts'", (survey,)
            ).fetchone()
            counts = _counts(None if found is None else json.loads(found[0]))
            counts[option] = counts.get(option, 0) + 1
            conn.execute(
                "INSERT INTO summaries VALUES (?, 'counts', ?) ON CONFLICT (survey, key) DO UPDATE SET v = ?",
                (survey, dumps(dict(counts)), dumps(dict(counts))),
            )
            return counts[option]

        self.steps.step(f"{request_id}|1", record)
        return self.steps.step(f"{request_id}|2", tally)

    def settle(self) -> None:
        """Nothing off the path."""

    def counts(self) -> dict[str, dict[str, int]]:
        found = self.db.conn().execute("SELECT survey, v FROM summaries WHERE key = 'counts'").fetchall()
        return {str(survey): _counts(json.loads(text)) for survey, text in found}

    def close(self) -> None:
        self.db.close()


class MinimalDynamo:
    """Step 1: the vote's ``Put`` (condition: absent) beside the memo, a condition instead of a
    read; step 2: ``GetItem`` of the counts, then their ``Put`` conditioned on the version read."""

    def __init__(self, client: Any, tag: str) -> None:
        self.attempts = Attempts()
        self.client = client
        self.responses, self.summaries = f"{tag}mresponses", f"{tag}msummaries"
        for table in (self.responses, self.summaries):
            create_dynamodb_table(client, table)
        self.steps = DynamoSteps(client, self.attempts)

    def send(self, request_id: str, vote: Vote) -> JSON:
        survey, voter, option = vote["survey"], vote["voter"], vote["option"]
        voter_key = {"pk": {"S": survey}, "sk": {"S": f"r:{voter}"}}
        counts_key = {"pk": {"S": survey}, "sk": {"S": "counts"}}

        def record(again: bool) -> tuple[list[Any], JSON]:
            if again:  # the condition failed, or a transaction met ours: refused if the voter voted
                got = self.client.get_item(TableName=self.responses, Key=voter_key, ConsistentRead=True)
                if "Item" in got:
                    raise Refused("already voted")
            put = {
                "TableName": self.responses,
                "Item": {**voter_key, "v": {"S": dumps(option)}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
            return [{"Put": put}], None

        def tally(_again: bool) -> tuple[list[Any], JSON]:
            got = self.client.get_item(TableName=self.summaries, Key=counts_key, ConsistentRead=True)
            item = got.get("Item")
            counts = _counts(None if item is None else json.loads(item["v"]["S"]))
            counts[option] = counts.get(option, 0) + 1
            version = 0 if item is None else int(item["ver"]["N"])
            put: dict[str, Any] = {
                "TableName": self.summaries,
                "Item": {**counts_key, "v": {"S": dumps(dict(counts))}, "ver": {"N": str(version + 1)}},
            }
            if item is None:
                put["ConditionExpression"] = "attribute_not_exists(pk)"
            else:
                put["ConditionExpression"] = "ver = :ver"
                put["ExpressionAttributeValues"] = {":ver": {"N": str(version)}}
            return [{"Put": put}], counts[option]

        memo, execution = f"m:{request_id}:", Execution()
        self.steps.step(execution, self.responses, survey, memo + "1", record)
        return self.steps.step(execution, self.summaries, survey, memo + "2", tally)

    def settle(self) -> None:
        """Nothing off the path."""

    def counts(self) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for page in self.client.get_paginator("scan").paginate(TableName=self.summaries, ConsistentRead=True):
            for item in page.get("Items", []):
                if item["sk"]["S"] == "counts":
                    found[item["pk"]["S"]] = _counts(json.loads(item["v"]["S"]))
        return found

    def close(self) -> None:
        self.client.close()


class MinimalAzure:
    """Step 1: ``create`` of the vote beside the memo (fails if the voter voted: no read);
    step 2: read the counts, ``update`` them under the ETag read, beside the memo."""

    def __init__(self, service: Any, tag: str) -> None:
        self.attempts = Attempts()
        self.responses = service.create_table(f"{tag}mresponses")
        self.summaries = service.create_table(f"{tag}msummaries")
        self.steps = AzureSteps(self.attempts)

    def send(self, request_id: str, vote: Vote) -> JSON:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceNotFoundError
        from azure.data.tables import UpdateMode

        survey, voter, option = vote["survey"], vote["voter"], vote["option"]

        def record(again: bool) -> tuple[list[Any], JSON]:
            if again:  # a 409 on the vote: refused if the voter voted
                try:
                    self.responses.get_entity(survey, f"r:{voter}")
                    raise Refused("already voted")
                except ResourceNotFoundError:
                    pass
            entity = {"PartitionKey": survey, "RowKey": f"r:{voter}", "v": dumps(option)}
            return [("create", entity)], None

        def tally(_again: bool) -> tuple[list[Any], JSON]:
            try:
                found: Any = self.summaries.get_entity(survey, "counts")
            except ResourceNotFoundError:
                found = None
            counts = _counts(None if found is None else json.loads(found["v"]))
            counts[option] = counts.get(option, 0) + 1
            entity = {"PartitionKey": survey, "RowKey": "counts", "v": dumps(dict(counts))}
            if found is None:
                return [("create", entity)], counts[option]
            condition = {
                "mode": UpdateMode.REPLACE,
                "etag": found.metadata["etag"],
                "match_condition": MatchConditions.IfNotModified,
            }
            return [("update", entity, condition)], counts[option]

        memo, execution = f"m:{request_id}:", Execution()
        self.steps.step(execution, self.responses, survey, memo + "1", record)
        return self.steps.step(execution, self.summaries, survey, memo + "2", tally)

    def settle(self) -> None:
        """Nothing off the path."""

    def counts(self) -> dict[str, dict[str, int]]:
        return {
            str(entity["PartitionKey"]): _counts(json.loads(entity["v"]))
            for entity in self.summaries.query_entities("RowKey eq 'counts'")
        }

    def close(self) -> None:
        """The service belongs to the backend."""


@dataclass
class Pair:
    """Both variants of one cell, on fresh tables; on DynamoDB, each variant's client."""

    variants: dict[str, Variant]
    closers: list[Callable[[], None]] = field(default_factory=list)
    clients: dict[str, Any] = field(default_factory=dict)
    """boto3 DynamoDB client per variant: where the conflict emulator goes."""
    emulators: dict[str, Any] = field(default_factory=dict)

    def emulate(self, rate: float, seed: int) -> None:
        """Install a ``DynamoDBConflicts`` on each variant's client, the same phantom rate for both
        (after the calibration, which measures conflict-free executions)."""
        from idemflow.testing.conflicts import DynamoDBConflicts

        for n, (name, client) in enumerate(self.clients.items()):
            self.emulators[name] = DynamoDBConflicts(client, phantom_rate=rate, seed=seed * 2 + n).install()

    def conflicts(self, name: str) -> int | None:
        emulator = self.emulators.get(name)
        return None if emulator is None else sum(emulator.produced.values())

    def close(self) -> None:
        for emulator in self.emulators.values():
            emulator.uninstall()
        for close in reversed(self.closers):
            close()


def make_pair(backend: Backend, tag: str) -> Pair:
    store = backend.store(f"{tag}i", "responses", "summaries")
    idem = Idemflow(store)
    if backend.kind == "sqlite":
        minimal_sqlite = MinimalSqlite(backend, f"{tag}m")
        return Pair({"idemflow": idem, "minimal": minimal_sqlite}, [store.close, minimal_sqlite.close])
    if backend.kind in DYNAMO:
        import boto3

        from idemflow.stores.dynamodb import DynamoDBStore

        assert isinstance(store, DynamoDBStore)
        meta = store.client.meta  # the baseline's client is configured as the store's (pool size...)
        client = boto3.client(
            "dynamodb", endpoint_url=meta.endpoint_url, region_name=meta.region_name, config=meta.config
        )
        minimal_dynamo = MinimalDynamo(client, tag)
        return Pair(
            {"idemflow": idem, "minimal": minimal_dynamo},
            [store.close, minimal_dynamo.close],
            clients={"idemflow": store.client, "minimal": client},
        )
    if backend.kind == "azurite":
        return Pair({"idemflow": idem, "minimal": MinimalAzure(backend.tables, tag)}, [store.close])
    raise ValueError(f"contention has no baseline for {backend.kind!r}")


# -- users ----------------------------------------------------------------------------------------


class Crew:
    """``size`` user threads kept for a whole cell (their connections stay open across rounds)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._jobs: list[queue.SimpleQueue[Callable[[], None] | None]] = [
            queue.SimpleQueue() for _ in range(size)
        ]
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, args=(jobs,), name=f"user-{n}", daemon=True)
            for n, jobs in enumerate(self._jobs)
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := jobs.get()) is not None:
            try:
                job()
                self._done.put(None)
            except BaseException as exc:  # noqa: BLE001 - re-raised by run()
                self._done.put(exc)

    def run(self, work: Callable[[int], None]) -> float:
        """Every user runs ``work(user)`` from one start signal; seconds until the last is done."""
        start = threading.Barrier(self.size + 1)

        def job(user: int) -> Callable[[], None]:
            def go() -> None:
                start.wait()
                work(user)

            return go

        for user, jobs in enumerate(self._jobs):
            jobs.put(job(user))
        start.wait()
        t0 = time.perf_counter()
        errors = [self._done.get() for _ in range(self.size)]
        elapsed = time.perf_counter() - t0
        for error in errors:
            if error is not None:
                raise error
        return elapsed

    def close(self) -> None:
        for jobs in self._jobs:
            jobs.put(None)
        for thread in self._threads:
            thread.join()


@dataclass
class Ledger:
    """What a variant was asked and answered in one cell: the exactly-once check's input."""

    requests: dict[str, Vote] = field(default_factory=dict)
    answers: dict[str, list[JSON]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)

    def check(self, counts: dict[str, dict[str, int]]) -> list[str]:
        """Every violation of exactly-once found: counts against distinct voters, answers."""
        problems: list[str] = []
        answered: dict[tuple[str, str], list[int]] = defaultdict(list)
        unknown: dict[tuple[str, str], int] = defaultdict(int)
        for request, vote in self.requests.items():
            where = (vote["survey"], vote["option"])
            got = self.answers.get(request, [])
            if not got:
                unknown[where] += 1  # every send failed: applied once or not at all
                continue
            if any(other != got[0] for other in got[1:]):
                problems.append(f"request {request} answered differently: {got}")
            answered[where].append(int(got[0]) if isinstance(got[0], int) else -1)
        surveys = {vote["survey"] for vote in self.requests.values()}
        for survey in sorted(set(counts) - surveys):
            problems.append(f"survey {survey} has counts {counts[survey]} but no vote was sent to it")
        for survey in sorted(surveys):
            for option in OPTIONS:
                where = (survey, option)
                final = counts.get(survey, {}).get(option, 0)
                low, high = len(answered[where]), len(answered[where]) + unknown[where]
                if not low <= final <= high:
                    expected = str(low) if low == high else f"{low}..{high}"
                    problems.append(f"survey {survey} counts {final} '{option}' votes, expected {expected}")
                ranks = sorted(answered[where])
                repeated = sorted({rank for rank in ranks if ranks.count(rank) > 1})
                if repeated:
                    problems.append(f"survey {survey} '{option}': ranks {repeated[:5]} answered twice")
                if ranks and (ranks[0] < 1 or ranks[-1] > final):
                    problems.append(
                        f"survey {survey} '{option}': ranks {ranks[0]}..{ranks[-1]}, count {final}"
                    )
        return problems


@dataclass
class RoundResult:
    sends: int
    seconds: float
    latencies: list[float]

    @property
    def throughput(self) -> float:
        return self.sends / self.seconds


@dataclass
class Result:
    """One variant in one cell (store × placement × users), over all rounds."""

    rounds: list[RoundResult] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)
    """Write attempts beyond a conflict-free execution's, per request id."""
    failures: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    free_attempts: int = 0
    """Write attempts of a conflict-free request (both sends), measured on the cell's tables."""
    conflicts: int | None = None
    """Transaction conflicts the emulator produced (DynamoDB)."""
    retried: dict[str, int] = field(default_factory=dict)
    """Retries by kind over the cell (calibration and warm-up included): ``data`` (a failed
    condition: re-read) and ``transient`` (a concurrent transaction, throttling, busy: resent)."""

    @property
    def latencies(self) -> list[float]:
        return [x for r in self.rounds for x in r.latencies]

    def throughput(self) -> Summary:
        return summarize("throughput", [r.throughput for r in self.rounds])

    def record(self) -> dict[str, Any]:
        latencies = self.latencies
        tp = self.throughput()
        return {
            "throughput": {"median": tp.median, "q1": tp.q1, "q3": tp.q3},
            "rounds": [{"sends": r.sends, "seconds": r.seconds} for r in self.rounds],
            "latency_ms": {
                "p50": statistics.median(latencies) * 1e3 if latencies else None,
                "p95": percentile(latencies, 95) * 1e3 if latencies else None,
            },
            "failed": len(self.failures),
            "failures": sorted(set(self.failures))[:10],
            "retries_per_request": {"p50": _pct(self.retries, 50), "p99": _pct(self.retries, 99)},
            "requests": len(self.retries),
            "conflict_free_attempts": self.free_attempts,
            "emulated_conflicts": self.conflicts,
            "retried_by_kind": self.retried,
            "violations": self.violations,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _pct(values: list[int], q: float) -> float | None:
    return percentile([float(v) for v in values], q) if values else None


@dataclass(frozen=True)
class Sizes:
    """How much each cell runs, by store (key ``default`` for the ones not named)."""

    users: tuple[int, ...]
    rounds: dict[str, int]
    requests: dict[str, int]
    """Requests (each sent twice) per variant per round, split over the users (at least one each)."""
    warmup: dict[str, int]
    """Untimed requests per variant per cell before the rounds (SQLite files to their steady state)."""

    def of(self, sizes: dict[str, int], kind: str) -> int:
        return sizes.get(kind, sizes["default"])

    def per_user(self, kind: str, users: int) -> int:
        return max(1, math.ceil(self.of(self.requests, kind) / users))


FULL = Sizes(
    USERS,
    # The servers are slow under a hot row (a 128-user hot round of both variants takes about
    # 95 s on Azurite, 25 s on DynamoDB Local, on 2 shared cores): two rounds keep the run
    # near 10 minutes.
    rounds={"sqlite": 4, "default": 2},
    requests={"sqlite": 128, "default": 24},
    warmup={"sqlite": 200, "default": 0},
)
QUICK = Sizes((1, 4), rounds={"default": 1}, requests={"default": 4}, warmup={"sqlite": 8, "default": 0})


class Cell:
    """Both variants at one store, placement and number of users."""

    def __init__(self, backend: Backend, placement: str, users: int, index: int, duplicates: str) -> None:
        self.placement, self.users, self.index, self.duplicates = placement, users, index, duplicates
        self.pair = make_pair(backend, backend.tag(f"c{placement[0]}{users}x"))
        self.ledgers = {name: Ledger() for name in VARIANTS}
        self.results = {name: Result() for name in VARIANTS}

    def _votes(self, prefix: str, users: int, per_user: int, placement: str) -> list[list[tuple[str, Vote]]]:
        """Each user's requests: (request id, vote); spread: the user's own survey (``s<user>``,
        ``w<user>`` for the warm-up)."""
        survey = "w" if prefix == "w" else "s"
        return [
            [
                (
                    f"{prefix}.{user}.{k}",
                    {
                        "survey": "hot" if placement == "hot" else f"{survey}{user}",
                        "voter": f"v{prefix}.{user}.{k}",
                        "option": OPTIONS[(user + k) % 2],
                    },
                )
                for k in range(per_user)
            ]
            for user in range(users)
        ]

    def _sends(self, votes: list[list[tuple[str, Vote]]]) -> list[list[tuple[str, Vote]]]:
        """Each user's sends: its request, then a duplicate (the previous user's, or its own)."""
        n = len(votes)
        sends: list[list[tuple[str, Vote]]] = []
        for user, mine in enumerate(votes):
            other = votes[(user - 1) % n] if self.duplicates == "next-user" else mine
            sends.append([send for k, own in enumerate(mine) for send in (own, other[k])])
        return sends

    def calibrate(self) -> None:
        """Conflict-free write attempts of one request and its duplicate, one after the other."""
        for name, variant in self.pair.variants.items():
            seen = []
            for n in range(CALIBRATION):
                request, vote = f"cal.{n}", {"survey": "cal", "voter": f"vcal.{n}", "option": OPTIONS[n % 2]}
                self.ledgers[name].requests[request] = vote
                variant.attempts.sending(request)
                for _ in range(2):
                    self.ledgers[name].answers[request].append(variant.send(request, vote))
                variant.settle()
                seen.append(variant.attempts.take().get(request, 0))
            self.results[name].free_attempts = min(seen)

    def burst(
        self, crew: Crew, name: str, prefix: str, per_user: int, placement: str
    ) -> tuple[RoundResult, list[int]]:
        """One round of one variant: every user sends its requests and duplicates back to back.
        Returns the round and the retries of each of its request ids."""
        variant, ledger = self.pair.variants[name], self.ledgers[name]
        votes = self._votes(prefix, crew.size, per_user, placement)
        for mine in votes:
            ledger.requests.update(mine)
        sends = self._sends(votes)
        logs: list[list[tuple[str, JSON, float]]] = [[] for _ in sends]
        failed: list[list[tuple[str, str]]] = [[] for _ in sends]

        def user(n: int) -> None:
            log, errors = logs[n], failed[n]
            for request, vote in sends[n]:
                variant.attempts.sending(request)
                t0 = time.perf_counter()
                try:
                    answer = variant.send(request, vote)
                except Exception as exc:  # noqa: BLE001 - every error reaching the caller is counted
                    errors.append((request, f"{type(exc).__name__}: {exc}"[:300]))
                    continue
                log.append((request, answer, time.perf_counter() - t0))

        seconds = crew.run(user)
        t0 = time.perf_counter()
        variant.settle()
        seconds += time.perf_counter() - t0
        latencies = []
        for log in logs:
            for request, answer, latency in log:
                ledger.answers[request].append(answer)
                latencies.append(latency)
        for errors in failed:
            ledger.failures.extend(text for _request, text in errors)
        attempts = variant.attempts.take()
        free = self.results[name].free_attempts
        retries = [max(0, attempts.get(request, 0) - free) for mine in votes for request, _vote in mine]
        return RoundResult(sum(len(s) for s in sends), seconds, latencies), retries

    def measure(self, sizes: Sizes, kind: str, phantom_rate: float) -> None:
        self.calibrate()
        self.pair.emulate(phantom_rate, seed=self.index)
        crew = Crew(self.users)
        try:
            warmup = sizes.of(sizes.warmup, kind)
            if warmup:  # untimed, every user in its own survey: connections and files warmed
                for name in VARIANTS:
                    self.burst(crew, name, "w", max(1, math.ceil(warmup / self.users)), "spread")
            for r in range(sizes.of(sizes.rounds, kind)):
                order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                for name in order:
                    measured, retries = self.burst(
                        crew, name, f"r{r}", sizes.per_user(kind, self.users), self.placement
                    )
                    self.results[name].rounds.append(measured)
                    self.results[name].retries.extend(retries)
        finally:
            crew.close()
        for name, variant in self.pair.variants.items():
            ledger, result = self.ledgers[name], self.results[name]
            result.failures = list(ledger.failures)
            result.violations = ledger.check(variant.counts())
            result.conflicts = self.pair.conflicts(name)
            result.retried = dict(variant.attempts.retries)
            for problem in result.violations:
                print(
                    f"!!! EXACTLY-ONCE VIOLATION ({name}, {self.placement}, {self.users} users): {problem}",
                    file=sys.stderr,
                    flush=True,
                )

    def close(self) -> None:
        self.pair.close()


Results = dict[str, dict[int, dict[str, Result]]]
"""``results[placement][users][variant]`` for one store."""


def measure_store(
    backend: Backend, sizes: Sizes, placements: Sequence[str], phantom_rate: float, duplicates: str
) -> Results:
    results: Results = {}
    index = 0
    for placement in placements:
        results[placement] = {}
        for users in sizes.users:
            index += 1
            cell = Cell(backend, placement, users, index, duplicates)
            try:
                cell.measure(sizes, backend.kind, phantom_rate)
            finally:
                cell.close()
            results[placement][users] = cell.results
            print(
                f"  {backend.kind} {placement} {users:>3} users: "
                + ", ".join(
                    f"{name} {r.throughput().median:.0f}/s, p95 {percentile(r.latencies, 95) * 1e3:.0f} ms, "
                    f"{len(r.failures)} failed"
                    for name, r in cell.results.items()
                    if r.latencies
                ),
                flush=True,
            )
    return results


# -- the report -----------------------------------------------------------------------------------


def _ratio(cell: dict[str, Result]) -> Summary:
    return paired_ratio(
        "idemflow/minimal",
        [r.throughput for r in cell["idemflow"].rounds],
        [r.throughput for r in cell["minimal"].rounds],
    )


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1e3:.1f}" if values else "–"


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def report_store(report: Report, kind: str, results: Results) -> dict[str, Any]:
    """The store's tables; returns its part of the JSON record."""
    report.add(f"## {TITLES.get(kind, LABELS.get(kind, kind))}", "")
    rows: list[list[str]] = []
    ratios: list[list[str]] = []
    record: dict[str, Any] = {}
    for placement, by_users in results.items():
        record[placement] = {}
        for users, cell in by_users.items():
            ratio = _ratio(cell)
            record[placement][str(users)] = {
                **{name: result.record() for name, result in cell.items()},
                "idemflow_over_minimal_throughput": {
                    "median": ratio.median,
                    "q1": ratio.q1,
                    "q3": ratio.q3,
                },
            }
            verdict = "met" if ratio.median >= TARGET_RATIO else "**missed**"
            ratios.append([placement, str(users), fmt_ratio(ratio), verdict])
            for name, result in cell.items():
                tp = result.throughput()
                ok = "ok" if not result.violations else f"**{len(result.violations)} VIOLATIONS**"
                rows.append(
                    [
                        placement,
                        str(users),
                        name,
                        f"{tp.median:.0f} (IQR {tp.q1:.0f}–{tp.q3:.0f})",
                        _ms(result.latencies, 50),
                        _ms(result.latencies, 95),
                        str(len(result.failures)) if not result.failures else f"**{len(result.failures)}**",
                        f"{_n(_pct(result.retries, 50))} / {_n(_pct(result.retries, 99))}",
                        str(result.free_attempts),
                        f"{result.retried.get('data', 0)} / {result.retried.get('transient', 0)}",
                        "–" if result.conflicts is None else str(result.conflicts),
                        ok,
                    ]
                )
    report.table(
        [
            "placement",
            "users",
            "variant",
            "sends/s",
            "p50 ms",
            "p95 ms",
            "failed",
            "retries/request p50 / p99",
            "writes, conflict-free",
            "retried: data / transient",
            "emulated conflicts",
            "exactly once",
        ],
        rows,
    )
    report.add(f"idemflow / minimal throughput, per round (median, IQR; target ≥ {TARGET_RATIO}):", "")
    report.table(["placement", "users", "idemflow / minimal", "target"], ratios)
    problems = [
        (placement, users, name, text)
        for placement, by_users in results.items()
        for users, cell in by_users.items()
        for name, result in cell.items()
        for text in [*(f"VIOLATION: {v}" for v in result.violations), *sorted(set(result.failures))[:3]]
    ]
    if problems:
        report.add("Failures and exactly-once violations (first distinct ones per cell):", "")
        for placement, users, name, text in problems:
            report.add(f"- {placement}, {users} users, {name}: `{text}`")
        report.add("")
    else:
        report.add("No send failed and every exactly-once check held.", "")
    return record


def headlines(report: Report, kind: str, results: Results) -> None:
    hot = results.get("hot", {})
    for users in (64, 128):
        if users in hot:
            report.headline(
                f"contention.{kind}.hot.{users}.idemflow_over_minimal_throughput",
                _ratio(hot[users]),
                note=f"hot row, {users} users, sends/s",
            )
            retries = hot[users]["idemflow"].retries
            report.headline(
                f"contention.{kind}.hot.{users}.idemflow_retries",
                {"p50": _rounded(_pct(retries, 50)), "p99": _rounded(_pct(retries, 99))},
                note="commits beyond a conflict-free execution's, per request",
            )
    for name in VARIANTS:
        cells = [cell[name] for by_users in results.values() for cell in by_users.values()]
        report.headline(
            f"contention.{kind}.{name}.failed",
            sum(len(r.failures) for r in cells),
            note="sends that raised, all cells",
        )
        report.headline(
            f"contention.{kind}.{name}.violations",
            sum(len(r.violations) for r in cells),
            note="exactly-once violations, all cells",
        )


def plot(out: Path, per_store: dict[str, Results]) -> Path:
    from benchmarks._plot import panels_lines_figure

    panels = {
        TITLES.get(kind, LABELS.get(kind, kind)): {
            f"{name}, {placement}": (
                [float(u) for u in by_users],
                [by_users[u][name].throughput().median for u in by_users],
            )
            for placement, by_users in results.items()
            for name in VARIANTS
        }
        for kind, results in per_store.items()
    }
    return panels_lines_figure(
        out / "contention.png",
        "2-step vote with a read-modify-write: throughput against concurrent users",
        "concurrent users",
        "sends/s (both sends of each request)",
        panels,
        style=lambda name: {
            "linestyle": "--" if "spread" in name else "-",
            "marker": "o" if name.startswith("idemflow") else "s",
            "color": "C0" if name.startswith("idemflow") else "C1",
        },
    )


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks contention", description=__doc__)
    parser.add_argument("--stores", default=",".join(STORES), help="comma-separated: " + ",".join(STORES))
    parser.add_argument("--users", default=None, help="comma-separated user counts")
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    parser.add_argument("--rounds", type=int, default=None, help="rounds per cell, every store")
    parser.add_argument(
        "--requests", type=int, default=None, help="requests per variant per round, every store"
    )
    parser.add_argument("--phantom-rate", type=float, default=PHANTOM_RATE, help="DynamoDB emulator")
    parser.add_argument(
        "--duplicates",
        choices=("same-user", "next-user"),
        default="same-user",
        help="who sends a request's second copy: its user right after the answer, or the next user (racing)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = parser.parse_args(argv)
    quick = quick or args.quick
    out = args.out or out
    base = QUICK if quick else FULL
    sizes = Sizes(
        users=tuple(int(u) for u in args.users.split(",")) if args.users else base.users,
        rounds={"default": args.rounds} if args.rounds else base.rounds,
        requests={"default": args.requests} if args.requests else base.requests,
        warmup=base.warmup,
    )
    stores = [s for s in args.stores.split(",") if s]
    placements = [p for p in args.placements.split(",") if p]
    report = Report(
        "contention",
        "Under contention: a read-modify-write workflow, idemflow against minimal exactly-once",
        {
            "stores": stores,
            "placements": placements,
            "users": list(sizes.users),
            "rounds": sizes.rounds,
            "requests per variant per round": f"max(users, {sizes.requests}), each sent twice",
            "duplicates": args.duplicates,
            "DynamoDB phantom conflict rate": args.phantom_rate,
            "untimed warm-up requests per variant and cell": sizes.warmup,
            "retry deadline (s)": 30,
        },
        out,
    )
    report.add(
        "A 2-step vote: record the vote (refused if the voter voted), then read-modify-write the",
        "survey's one summary row. Each request id is sent twice (*duplicates* `same-user`: again by",
        "its user once answered; `next-user`: by the next user, racing the original). *hot*: every",
        "user votes in one survey (one summary row); *spread*: a survey per user. *minimal*:",
        "hand-written, each step one conditioned transactional write with a memo row, conflicts",
        "retried with idemflow's waits (by kind: data conflict or transient) until 30 s.",
        "Variants interleaved round by round on fresh tables per cell. *sends/s* counts both sends,",
        "until idemflow's off-path writes are flushed; latencies are of answered sends; *failed*",
        "counts sends that raised; *retries/request*: write attempts (idemflow: store commits)",
        "beyond the conflict-free execution's (*writes, conflict-free*: measured before the load on",
        "each cell's tables, a request and its duplicate one after the other); *retried*: retries",
        "over the cell after a failed condition on data (re-read) / after a transient error (a",
        "concurrent transaction, throttling, busy: both variants re-read and run the step again;",
        "idemflow's retries on one partition take turns inside the process); *emulated conflicts*:",
        "transactions the DynamoDB conflict emulator cancelled (overlaps and phantoms). *exactly",
        "once*: final counts equal the distinct voters, both sends of a request got one answer, no",
        "rank answered twice. See the module docstring of `benchmarks/contention.py`.",
        "",
    )
    per_store: dict[str, Results] = {}
    record: dict[str, Any] = {}
    try:
        for kind in stores:
            print(f"  contention on {kind} ...", flush=True)
            with open_backend(kind) as backend:
                per_store[kind] = measure_store(
                    backend, sizes, placements, args.phantom_rate, args.duplicates
                )
            record[kind] = report_store(report, kind, per_store[kind])
            headlines(report, kind, per_store[kind])
        if per_store:
            image = plot(out, per_store)
            report.add(f"![throughput against users]({image.name})", "")
    finally:
        report.data["results"] = record
        report.write()  # what was measured is kept even if a later store fails
    violations = sum(
        len(result.violations)
        for results in per_store.values()
        for by_users in results.values()
        for cell in by_users.values()
        for result in cell.values()
    )
    if violations:
        print(f"!!! {violations} EXACTLY-ONCE VIOLATIONS: see {out / 'contention.md'}", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
