"""The minimal exactly-once step by hand, per backend: the baseline idemflow is held to under load.

What a careful engineer writes without a library, for one step of a multi-step request:

- **one transactional write** carries the step's data change, conditioned on what the step
  read (a version, an ETag, "absent"), and a **memo row** keyed by (request id, step),
  inserted only if absent and holding the step's answer;
- a **duplicate** finds the memo and answers from it (its write fails on the memo's
  condition; from then on, :class:`Execution` ``replaying``, it reads each later step's
  memo first);
- a **conflict** (a condition on the data failed, a concurrent transaction, SQLite busy)
  re-reads and retries with jittered exponential backoff until a deadline, with tenacity:
  the same waits and the same 30 s deadline as idemflow's own retries (:mod:`idemflow.core.policy`:
  its data-conflict waits after a failed condition, its transient-error waits after a
  concurrent transaction, throttling or a busy database), so both variants face the same rules;
- a step that refuses (``Refused``) records the refusal as its memo, so every duplicate
  is refused alike.

No run record: the memos alone make the request exactly-once (a request id reused with
another input is not detected, which idemflow's run record does). The memo sits in the
step's own table and partition, as idemflow's does, so DynamoDB and Azure commit it in the
same transaction as the data. Each write attempt and each retry is reported to a
:class:`Tally` (the benchmarks count them).

``benchmarks/cloud_survey.py`` and ``benchmarks/core_overhead.py`` keep their own
straight-line versions: one user, no duplicates, no conflicts, so no retry loop to pay for.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay

from benchmarks.common.workload_base import _PerThread
from idemflow.core.policy import DEADLINE, DEFAULT_POLICY
from idemflow.serialization import JSON


class Tally(Protocol):
    """What the steps report: every write attempt, and every retry by kind."""

    def attempted(self) -> None:
        """Before every write attempt of a step (first tries, retries, duplicates' attempts)."""
        ...

    def retried(self, transient: bool) -> None:
        """Before the wait of a retry: after a transient error, or after a data conflict."""
        ...


class Refused(Exception):
    """The step refuses the request (an answer, recorded as the memo: duplicates get it too)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


class Again(Exception):
    """A conflict: the step re-reads and tries again after a backoff. ``transient``: the backend
    asked to retry (a concurrent transaction, throttling, SQLite busy), which idemflow waits for
    longer than for a failed condition on data (its two retryers' waits, :mod:`idemflow.core.policy`)."""

    def __init__(self, what: str, *, transient: bool = False) -> None:
        super().__init__(what)
        self.transient = transient


@dataclass
class Execution:
    """One send of a request, across its steps: once a step met its memo the request is a
    duplicate, and its later steps read their memo before doing anything else."""

    replaying: bool = False


def dumps(value: JSON) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def answer(memo: str) -> JSON:
    """The answer a memo holds: the step's result, or its refusal raised again."""
    found = json.loads(memo)
    if "refused" in found:
        raise Refused(str(found["refused"]))
    value: JSON = found["v"]
    return value


def _wait(state: RetryCallState) -> float:
    """idemflow's wait for what the last attempt met: a transient error or a data conflict."""
    failed = state.outcome.exception() if state.outcome is not None else None
    transient = isinstance(failed, Again) and failed.transient
    wait = DEFAULT_POLICY.transient.wait if transient else DEFAULT_POLICY.conflicts.wait
    return float(wait(state))


def retrying(tally: Tally) -> Retrying:
    """Conflicts retried with idemflow's own waits until idemflow's deadline (per step)."""

    def note(state: RetryCallState) -> None:
        failed = state.outcome.exception() if state.outcome is not None else None
        tally.retried(isinstance(failed, Again) and failed.transient)

    return Retrying(
        stop=stop_after_delay(DEADLINE),
        wait=_wait,
        retry=retry_if_exception_type(Again),
        before_sleep=note,
        reraise=True,
    )


def _again(attempt: Callable[[bool], JSON]) -> Callable[[], JSON]:
    """``attempt(again)`` with ``again`` False the first time it is called, True afterwards."""
    calls = [0]

    def call() -> JSON:
        calls[0] += 1
        return attempt(calls[0] > 1)

    return call


# -- SQLite ---------------------------------------------------------------------------------------

SQLITE_MEMOS = "CREATE TABLE memos (k TEXT PRIMARY KEY, v TEXT NOT NULL)"
"""The memo table a :class:`SqliteSteps` database needs beside its own tables."""

SqliteBody = Callable[[sqlite3.Connection], JSON]
"""Reads and writes the step's data inside the write transaction; returns the answer
(or raises :class:`Refused`, before it writes anything: the refusal's memo is committed)."""


class SqliteSteps:
    """Steps on one SQLite file, a connection per thread (WAL, ``synchronous=FULL``).

    The memo is read first without a lock (a duplicate costs one read), then the step runs
    inside ``BEGIN IMMEDIATE``: the write lock makes the read-modify-write serial, so the
    only conflict left is the lock itself (``database is locked`` after the busy timeout).
    """

    def __init__(self, db: _PerThread, tally: Tally) -> None:
        self.db = db
        self.tally = tally

    def step(self, memo: str, body: SqliteBody) -> JSON:
        found = self.db.conn().execute("SELECT v FROM memos WHERE k = ?", (memo,)).fetchone()
        if found is not None:
            return answer(found[0])
        result: JSON = retrying(self.tally)(self._attempt, memo, body)
        return result

    def _attempt(self, memo: str, body: SqliteBody) -> JSON:
        conn = self.db.conn()
        self.tally.attempted()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise Again(str(exc), transient=True) from exc
        try:
            found = conn.execute("SELECT v FROM memos WHERE k = ?", (memo,)).fetchone()
            if found is not None:  # a racing duplicate got here first
                conn.execute("ROLLBACK")
                return answer(found[0])
            refused: Refused | None = None
            try:
                result = body(conn)
                text = dumps({"v": result})
            except Refused as exc:
                refused, result, text = exc, None, dumps({"refused": exc.reason})
            conn.execute("INSERT INTO memos VALUES (?, ?)", (memo, text))
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise Again(str(exc), transient=True) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if refused is not None:
            raise refused
        return result


# -- DynamoDB -------------------------------------------------------------------------------------

Plan = Callable[[bool], tuple[list[Any], JSON]]
"""``plan(again)``: the step's reads, then its conditioned writes (transaction items for
DynamoDB, batch operations for Azure) and its answer; ``again`` after a conflict, when a
failed "absent" condition may mean the request must be refused (raise :class:`Refused`)."""

_ABSENT = "attribute_not_exists(pk)"
_RETRYABLE = frozenset(
    {
        "TransactionConflictException",
        "TransactionInProgressException",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
    }
)


class DynamoSteps:
    """Steps on DynamoDB: one ``TransactWriteItems`` per attempt, the memo its first item.

    A cancelled transaction says which items failed: the memo's condition means a duplicate
    (its answer comes back in the cancellation, ``ALL_OLD``); anything else (a data
    condition, ``TransactionConflict``) is a conflict, retried.
    """

    def __init__(self, client: Any, tally: Tally) -> None:
        self.client = client
        self.tally = tally

    def step(self, execution: Execution, table: str, partition: str, memo: str, plan: Plan) -> JSON:
        key = {"pk": {"S": partition}, "sk": {"S": memo}}
        if execution.replaying:
            found = self._memo(table, key)
            if found is not None:
                return answer(found)
        attempt = _again(lambda again: self._attempt(execution, table, key, plan, again))
        result: JSON = retrying(self.tally)(attempt)
        return result

    def _memo(self, table: str, key: dict[str, Any]) -> str | None:
        got = self.client.get_item(TableName=table, Key=key, ConsistentRead=True)
        item = got.get("Item")
        return None if item is None else str(item["v"]["S"])

    def _attempt(
        self, execution: Execution, table: str, key: dict[str, Any], plan: Plan, again: bool
    ) -> JSON:
        from botocore.exceptions import ClientError

        try:
            items, result = plan(again)
        except Refused as exc:
            return self._refuse(execution, table, key, exc)
        memo = {
            "Put": {
                "TableName": table,
                "Item": {**key, "v": {"S": dumps({"v": result})}},
                "ConditionExpression": _ABSENT,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        self.tally.attempted()
        try:
            self.client.transact_write_items(TransactItems=[memo, *items])
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _RETRYABLE:
                raise Again(code, transient=True) from exc
            if code != "TransactionCanceledException":
                raise
            reasons: Any = exc.response.get("CancellationReasons") or [{}]
            if reasons[0].get("Code") == "ConditionalCheckFailed":  # the memo exists: a duplicate
                item = reasons[0].get("Item")
                found = str(item["v"]["S"]) if item else self._memo(table, key)
                if found is not None:
                    execution.replaying = True
                    return answer(found)
            codes = {reason.get("Code") for reason in reasons} - {None, "None"}
            # A failed condition on data: re-read now; only a concurrent transaction (or
            # throttling) cancelled it: the backend asks to wait, as idemflow's store maps it.
            raise Again(str(exc), transient="ConditionalCheckFailed" not in codes) from exc
        return result

    def _refuse(self, execution: Execution, table: str, key: dict[str, Any], refused: Refused) -> JSON:
        from botocore.exceptions import ClientError

        self.tally.attempted()
        try:
            self.client.put_item(
                TableName=table,
                Item={**key, "v": {"S": dumps({"refused": refused.reason})}},
                ConditionExpression=_ABSENT,
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _RETRYABLE:
                raise Again(code, transient=True) from exc
            if code != "ConditionalCheckFailedException":
                raise
            found = self._memo(table, key)  # a racing execution of the same request answered first
            if found is not None:
                execution.replaying = True
                return answer(found)
            raise Again(code) from exc
        raise refused


# -- Azure Tables ---------------------------------------------------------------------------------


class AzureSteps:
    """Steps on Azure Tables: one entity-group transaction per attempt, the memo's ``create``
    first. Azure names the first failing operation: the memo (409, index 0) means a duplicate,
    whose memo is then read (Azure does not return it); any other 409 or a 412 (ETag) is a
    conflict, retried."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def step(self, execution: Execution, table: Any, partition: str, memo: str, plan: Plan) -> JSON:
        """``table``: an ``azure.data.tables.TableClient``."""
        if execution.replaying:
            found = self._memo(table, partition, memo)
            if found is not None:
                return answer(found)
        attempt = _again(lambda again: self._attempt(execution, table, partition, memo, plan, again))
        result: JSON = retrying(self.tally)(attempt)
        return result

    @staticmethod
    def _memo(table: Any, partition: str, memo: str) -> str | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return str(table.get_entity(partition, memo)["v"])
        except ResourceNotFoundError:
            return None

    def _attempt(
        self, execution: Execution, table: Any, partition: str, memo: str, plan: Plan, again: bool
    ) -> JSON:
        from azure.core.exceptions import HttpResponseError
        from azure.data.tables import TableTransactionError

        try:
            ops, result = plan(again)
        except Refused as exc:
            return self._refuse(execution, table, partition, memo, exc)
        entity = {"PartitionKey": partition, "RowKey": memo, "v": dumps({"v": result})}
        self.tally.attempted()
        try:
            table.submit_transaction([("create", entity), *ops])
        except TableTransactionError as exc:
            if exc.status_code == 409 and exc.index == 0:  # the memo exists: a duplicate
                found = self._memo(table, partition, memo)
                if found is not None:
                    execution.replaying = True
                    return answer(found)
            if exc.status_code in (409, 412):
                raise Again(str(exc.status_code)) from exc
            if exc.status_code in (429, 500, 503):
                raise Again(str(exc.status_code), transient=True) from exc
            raise
        except HttpResponseError as exc:
            if exc.status_code in (429, 500, 503):
                raise Again(str(exc.status_code), transient=True) from exc
            raise
        return result

    def _refuse(self, execution: Execution, table: Any, partition: str, memo: str, refused: Refused) -> JSON:
        from azure.core.exceptions import ResourceExistsError

        self.tally.attempted()
        try:
            table.create_entity(
                {"PartitionKey": partition, "RowKey": memo, "v": dumps({"refused": refused.reason})}
            )
        except ResourceExistsError as exc:
            found = self._memo(table, partition, memo)  # a racing execution answered first
            if found is not None:
                execution.replaying = True
                return answer(found)
            raise Again("memo") from exc
        raise refused
