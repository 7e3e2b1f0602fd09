"""The survey workload: ``samples.survey``'s ``respond`` (record a response after validating it
against the survey, checkpoint, count it), and its hand-written baselines on SQLite, DynamoDB and
Azure Tables (see :mod:`benchmarks.common.workloads`).

Why apart: ``asyncio_api`` runs this workload's requests on its own, without the auction.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks.common.backends import Backend, create_dynamodb_table
from benchmarks.common.counting import Tally, counter_bytes, row_bytes
from benchmarks.common.workload_base import Workload, _dumps, _etag_update, _PerThread
from idemflow import Idem, run
from idemflow.stores import Store
from samples.survey import workflows as survey_sample

SURVEY_ID = "s0"
QUESTION = "main"
OPTIONS = ["soup", "salad"]
SURVEY: Any = {
    "id": SURVEY_ID,
    "title": "Lunch",
    "questions": [{"id": QUESTION, "text": "?", "options": OPTIONS}],
}


def survey_request(i: int) -> Idem[Any]:
    return survey_sample.respond(
        {"survey": SURVEY_ID, "respondent": f"p{i}", "answers": {QUESTION: OPTIONS[i % 2]}}
    )


def survey_prepare(store: Store) -> None:
    run(survey_sample.create_survey(SURVEY), request_id="create-s0", store=store)


def _survey_counters(i: int) -> list[str]:
    return ["responses", f"q:{QUESTION}:{OPTIONS[i % 2]}"]


class SurveySqlite:
    def __init__(self, backend: Backend, tag: str) -> None:
        self.tally = Tally()
        self.db = _PerThread(
            backend,
            tag,
            [
                "CREATE TABLE surveys (id TEXT PRIMARY KEY, definition TEXT NOT NULL)",
                "CREATE TABLE responses (survey TEXT, respondent TEXT, answers TEXT, "
                "PRIMARY KEY (survey, respondent))",
                "CREATE TABLE summaries (survey TEXT, key TEXT, n INTEGER, PRIMARY KEY (survey, key))",
            ],
        )
        self.db.conn().execute("INSERT INTO surveys VALUES (?, ?)", (SURVEY_ID, _dumps(SURVEY)))

    def __call__(self, i: int) -> None:
        conn = self.db.conn()
        answers = {QUESTION: OPTIONS[i % 2]}
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT definition FROM surveys WHERE id = ?", (SURVEY_ID,)).fetchone()
            if row is None or survey_sample.answer_problem(json.loads(row[0]), answers) is not None:
                raise ValueError("refused")
            text = _dumps(answers)
            conn.execute("INSERT INTO responses VALUES (?, ?, ?)", (SURVEY_ID, f"p{i}", text))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("BEGIN IMMEDIATE")
        for key in _survey_counters(i):
            conn.execute(
                "INSERT INTO summaries VALUES (?, ?, 1) ON CONFLICT (survey, key) DO UPDATE SET n = n + 1",
                (SURVEY_ID, key),
            )
        conn.execute("COMMIT")
        self.tally.read()
        self.tally.wrote(1, row_bytes(SURVEY_ID, f"r:p{i}", text))
        self.tally.wrote(2, sum(counter_bytes(SURVEY_ID, key) for key in _survey_counters(i)))

    def close(self) -> None:
        self.db.close()


class SurveyDynamo:
    def __init__(self, backend: Backend, tag: str) -> None:
        self.tally = Tally()
        self.client = backend.dynamodb
        self.responses, self.summaries = f"{tag}presponses", f"{tag}psummaries"
        for table in (self.responses, self.summaries):
            create_dynamodb_table(self.client, table)
        self.client.put_item(
            TableName=self.responses,
            Item={"pk": {"S": SURVEY_ID}, "sk": {"S": "survey"}, "v": {"S": _dumps(SURVEY)}},
        )

    def __call__(self, i: int) -> None:
        answers = {QUESTION: OPTIONS[i % 2]}
        found = self.client.get_item(
            TableName=self.responses,
            Key={"pk": {"S": SURVEY_ID}, "sk": {"S": "survey"}},
            ConsistentRead=True,
        )
        if survey_sample.answer_problem(json.loads(found["Item"]["v"]["S"]), answers) is not None:
            raise ValueError("refused")
        text = _dumps(answers)
        # A condition instead of a read: a second response of the same respondent fails here.
        self.client.put_item(
            TableName=self.responses,
            Item={"pk": {"S": SURVEY_ID}, "sk": {"S": f"r:p{i}"}, "v": {"S": text}},
            ConditionExpression="attribute_not_exists(pk)",
        )
        counters = _survey_counters(i)
        self.client.update_item(
            TableName=self.summaries,
            Key={"pk": {"S": SURVEY_ID}, "sk": {"S": "counts"}},
            UpdateExpression="ADD " + ", ".join(f"#c{n} :one" for n in range(len(counters))),
            ExpressionAttributeNames={f"#c{n}": key for n, key in enumerate(counters)},
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        self.tally.read()
        self.tally.wrote(1, row_bytes(SURVEY_ID, f"r:p{i}", text))
        self.tally.wrote(2, sum(counter_bytes(SURVEY_ID, key) for key in counters))

    def close(self) -> None:
        """The client belongs to the backend."""


class SurveyAzure:
    def __init__(self, backend: Backend, tag: str) -> None:
        self.tally = Tally()
        service = backend.tables
        self.responses = service.create_table(f"{tag}presp")
        self.summaries = service.create_table(f"{tag}psum")
        self.responses.create_entity({"PartitionKey": SURVEY_ID, "RowKey": "survey", "v": _dumps(SURVEY)})

    def __call__(self, i: int) -> None:
        answers = {QUESTION: OPTIONS[i % 2]}
        found = self.responses.get_entity(SURVEY_ID, "survey")
        if survey_sample.answer_problem(json.loads(found["v"]), answers) is not None:
            raise ValueError("refused")
        text = _dumps(answers)
        # create_entity fails if the respondent already answered: no read needed.
        self.responses.create_entity({"PartitionKey": SURVEY_ID, "RowKey": f"r-p{i}", "v": text})
        counters = [key.replace(":", "_") for key in _survey_counters(i)]

        def add(entity: dict[str, Any] | None) -> dict[str, Any]:
            current = entity or {}
            return {k: v for k, v in current.items() if k.startswith(("q_", "responses"))} | {
                key: int(current.get(key, 0)) + 1 for key in counters
            }

        reads, writes = _etag_update(self.summaries, SURVEY_ID, "counts", add)
        self.tally.read(1 + reads)
        self.tally.wrote(1, row_bytes(SURVEY_ID, f"r-p{i}", text))
        self.tally.wrote(2, sum(counter_bytes(SURVEY_ID, key) for key in counters), calls=writes)

    def close(self) -> None:
        """The service belongs to the backend."""


SURVEY_WORKLOAD = Workload(
    "survey",
    survey_sample.TABLES,
    [survey_sample.create_survey, survey_sample.respond],
    survey_prepare,
    survey_request,
    {"sqlite": SurveySqlite, "moto": SurveyDynamo, "azurite": SurveyAzure},
)
