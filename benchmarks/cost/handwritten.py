"""The hand-written side of ``cost``: plain handlers and the minimal exactly-once protocol, on
DynamoDB, Azure Tables and SQLite, doing the data writes idemflow's workflows do
(:mod:`benchmarks.cost.flows`): step 1 records the user's response, each later step adds one to a
counter.

**Minimal exactly-once** is the fewest calls any exactly-once protocol can make, one per step:

- *DynamoDB*: each step one ``TransactWriteItems`` with a memo ``Put`` (``attribute_not_exists``)
  and the step's data write; the run record (a small item, ``attribute_not_exists``) rides in
  step 1's transaction, the final status and answer (an ``Update`` of it) in the last step's (a
  1-step request: the run record is put already final). A duplicate of a finished request is
  **one call**: step 1's transaction is cancelled on the run record's condition, and the
  cancellation returns the record (``ReturnValuesOnConditionCheckFailure='ALL_OLD'``) with the
  answer.
- *Azure Tables*: each step one entity group transaction (memo insert + data, the memo in the
  data's partition); a counter is read first for its ETag (Azure cannot add server-side). The
  last step's memo holds the answer. A duplicate: step 1's batch fails on its memo
  (``EntityAlreadyExists`` returns no entity), then one read of the last memo: **two calls**.
- *SQLite*: each step one ``BEGIN IMMEDIATE`` transaction, memo ``INSERT`` + data. A duplicate:
  step 1's memo insert fails, the last memo is read inside that same transaction, rolled back:
  **one transaction**.

A request found half done (not in these runs) goes on step by step, skipping steps whose memo
exists. One client at a time: no conflict handling (``benchmarks.common.exactly_once`` has it).

Why apart: three SDKs' worth of baseline code, read against the workflows they match.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from benchmarks.cost.flows import COUNTERS, RESULT, SURVEY, Handler

RESULT_TEXT = json.dumps(RESULT, separators=(",", ":"))


# -- DynamoDB -------------------------------------------------------------------------------------


class MinimalDynamo:
    """``steps`` steps, one ``TransactWriteItems`` each, on tables ``prefix`` + ``mresponses``,
    ``msummaries``, ``mruns`` (created by the caller, shared by every step count)."""

    def __init__(self, client: Any, prefix: str, steps: int) -> None:
        self.client = client
        self.steps = steps
        self.responses, self.summaries, self.runs = (
            f"{prefix}m{t}" for t in ("responses", "summaries", "runs")
        )

    def __call__(self, event: dict[str, Any]) -> Any:
        request, user = event["id"], event["user"]
        for step in range(1, self.steps + 1):
            try:
                self.client.transact_write_items(TransactItems=self._items(step, request, user))
            except self.client.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons") or []
                if step == 1 and _failed(reasons, 0):
                    record = reasons[0].get("Item") or {}
                    if record.get("st", {}).get("S") == "done":
                        return json.loads(record["r"]["S"])  # a duplicate of a finished request
                if not _failed(reasons, 1 if step == 1 else 0):
                    raise  # not this step's memo: a conflict, which one client never meets
        return RESULT

    def _items(self, step: int, request: str, user: str) -> list[dict[str, Any]]:
        table = self.responses if step == 1 else self.summaries
        memo = {
            "TableName": table,
            "Item": {"pk": {"S": SURVEY}, "sk": {"S": f"m|{request}|{step}"}, "v": {"S": "null"}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        items: list[dict[str, Any]] = [{"Put": memo}]
        if step == 1:
            items.append(
                {
                    "Put": {
                        "TableName": self.responses,
                        "Item": {"pk": {"S": SURVEY}, "sk": {"S": user}, "v": {"S": '"yes"'}},
                    }
                }
            )
            final = {"st": {"S": "done"}, "r": {"S": RESULT_TEXT}} if self.steps == 1 else {}
            record = {
                "TableName": self.runs,
                "Item": {"pk": {"S": request}, "sk": {"S": "run"}, "st": {"S": "running"}, **final},
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
            items.insert(0, {"Put": record})
        else:
            items.append(
                {
                    "Update": {
                        "TableName": self.summaries,
                        "Key": {"pk": {"S": SURVEY}, "sk": {"S": COUNTERS[step - 2]}},
                        "UpdateExpression": "ADD n :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                }
            )
            if step == self.steps:
                done = {
                    "TableName": self.runs,
                    "Key": {"pk": {"S": request}, "sk": {"S": "run"}},
                    "UpdateExpression": "SET st = :d, r = :r",
                    "ExpressionAttributeValues": {":d": {"S": "done"}, ":r": {"S": RESULT_TEXT}},
                }
                items.append({"Update": done})
        return items


def _failed(reasons: list[dict[str, Any]], index: int) -> bool:
    return len(reasons) > index and reasons[index].get("Code") == "ConditionalCheckFailed"


# -- Azure Tables ---------------------------------------------------------------------------------


def plain_azure(responses: Any, summaries: Any) -> Handler:
    """Upsert the response; read the counter and write it back under its ETag: 3 calls."""
    from benchmarks.common.workload_base import _etag_update

    def handle(event: dict[str, Any]) -> dict[str, Any]:
        responses.upsert_entity({"PartitionKey": SURVEY, "RowKey": event["user"], "v": '"yes"'})
        _etag_update(summaries, SURVEY, "yes", lambda found: {"n": int((found or {}).get("n", 0)) + 1})
        return RESULT

    return handle


class MinimalAzure:
    """``steps`` steps, one entity group transaction each, on two table clients (created)."""

    def __init__(self, responses: Any, summaries: Any, steps: int) -> None:
        self.tables = (responses, summaries)
        self.steps = steps

    def __call__(self, event: dict[str, Any]) -> Any:
        from azure.data.tables import TableTransactionError

        request, user = event["id"], event["user"]
        for step in range(1, self.steps + 1):
            try:
                self._step(step, request, user)
            except TableTransactionError as exc:
                if getattr(exc, "error_code", None) != "EntityAlreadyExists" or exc.index != 0:
                    raise
                if step == 1:  # a duplicate: a finished request's last memo holds its answer
                    last = self._memo(self.steps, request)
                    if last is not None:
                        return json.loads(last)
        return RESULT

    def _table(self, step: int) -> Any:
        return self.tables[0 if step == 1 else 1]

    def _memo(self, step: int, request: str) -> str | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return str(self._table(step).get_entity(SURVEY, f"m-{request}-{step}")["v"])
        except ResourceNotFoundError:
            return None

    def _step(self, step: int, request: str, user: str) -> None:
        from azure.core import MatchConditions
        from azure.data.tables import UpdateMode

        answer = RESULT_TEXT if step == self.steps else "null"
        memo = ("create", {"PartitionKey": SURVEY, "RowKey": f"m-{request}-{step}", "v": answer})
        table = self._table(step)
        if step == 1:
            data: tuple[Any, ...] = ("upsert", {"PartitionKey": SURVEY, "RowKey": user, "v": '"yes"'})
        else:
            counter = table.get_entity(SURVEY, COUNTERS[step - 2])
            entity = {"PartitionKey": SURVEY, "RowKey": COUNTERS[step - 2], "n": int(counter["n"]) + 1}
            condition = {"etag": counter.metadata["etag"], "match_condition": MatchConditions.IfNotModified}
            data = ("update", entity, {"mode": UpdateMode.REPLACE, **condition})
        table.submit_transaction([memo, data])


# -- SQLite ---------------------------------------------------------------------------------------

SQLITE_SCHEMA = [
    "CREATE TABLE responses (survey TEXT, id TEXT, answer TEXT, PRIMARY KEY (survey, id))",
    "CREATE TABLE summaries (survey TEXT, option TEXT, n INTEGER, PRIMARY KEY (survey, option))",
    "CREATE TABLE memos (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
]
_INSERT = "INSERT INTO responses VALUES (?, ?, 'yes')"
_COUNT = "INSERT INTO summaries VALUES (?, ?, 1) ON CONFLICT (survey, option) DO UPDATE SET n = n + 1"


class SqliteCounts:
    """Transactions (every ``BEGIN`` … ``COMMIT``/``ROLLBACK``) and statements a baseline made."""

    def __init__(self) -> None:
        self.transactions = 0
        self.statements = 0

    def run(self, conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """``work`` inside ``BEGIN IMMEDIATE``; committed unless it raised."""
        self.transactions += 1
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = work(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result


def plain_sqlite_handler(conn: sqlite3.Connection, counts: SqliteCounts) -> Handler:
    """Two transactions, as plain code does it: insert the response; add to the counter."""

    def handle(event: dict[str, Any]) -> dict[str, Any]:
        counts.run(conn, lambda c: c.execute(_INSERT, (SURVEY, event["user"])))
        counts.run(conn, lambda c: c.execute(_COUNT, (SURVEY, "yes")))
        counts.statements += 2
        return RESULT

    return handle


class MinimalSqlite:
    """``steps`` steps, one transaction each (memo insert + data) on one connection."""

    def __init__(self, conn: sqlite3.Connection, counts: SqliteCounts, steps: int) -> None:
        self.conn = conn
        self.counts = counts
        self.steps = steps

    def __call__(self, event: dict[str, Any]) -> Any:
        request, user = event["id"], event["user"]
        for step in range(1, self.steps + 1):
            answer = RESULT_TEXT if step == self.steps else "null"
            self.counts.transactions += 1
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute("INSERT INTO memos VALUES (?, ?)", (f"{request}|{step}", answer))
            except sqlite3.IntegrityError:  # the step was done before
                found = None
                if step == 1:  # a duplicate: a finished request's last memo holds its answer
                    last = (f"{request}|{self.steps}",)
                    found = self.conn.execute("SELECT v FROM memos WHERE k = ?", last).fetchone()
                    self.counts.statements += 1
                self.conn.execute("ROLLBACK")
                self.counts.statements += 1
                if found is not None:
                    return json.loads(found[0])
                continue
            if step == 1:
                self.conn.execute(_INSERT, (SURVEY, user))
            else:
                self.conn.execute(_COUNT, (SURVEY, COUNTERS[step - 2]))
            self.conn.execute("COMMIT")
            self.counts.statements += 2
        return RESULT
