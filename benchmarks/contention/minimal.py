"""The hand-written side of ``contention``: the minimal exactly-once vote on SQLite, DynamoDB
and Azure Tables, each step one conditioned transactional write with a memo row
(:mod:`benchmarks.common.exactly_once`).

Why apart: three SDKs' worth of baseline code, read on its own against the workflow it matches.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from benchmarks.common.backends import Backend, create_dynamodb_table
from benchmarks.common.exactly_once import (
    SQLITE_MEMOS,
    AzureSteps,
    DynamoSteps,
    Execution,
    Refused,
    SqliteSteps,
    dumps,
)
from benchmarks.common.workload_base import _PerThread
from benchmarks.contention.params import Vote
from benchmarks.contention.vote import Attempts, _counts
from idemflow.serialization import JSON


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
