"""deploy/aws/template.yaml, the survey sample on AWS Lambda: valid for CloudFormation (cfn-lint),
and in step with the code it deploys (handlers, the tables the store creates, the queue rules
docs/serverless.md states, the tables the HTTP endpoint touches)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from idemflow import run
from idemflow.aws_lambda import FixedContext, HttpHandler
from idemflow.keys import RUNS_TABLE
from idemflow.stores import MemoryStore
from idemflow.stores._dynamodb_tables import RUNS_SCHEMA
from idemflow.stores.base import Op, Row, RowRef
from samples.survey.tables import TABLES

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "aws" / "template.yaml"


class _Loader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (``!Sub``, ``!GetAtt``) read as plain values."""


def _tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _tagged)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(TEMPLATE.read_text(), Loader=_Loader)
    return loaded


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in template["Resources"].items() if r["Type"] == kind}


def test_cfn_lint_finds_nothing() -> None:
    lint = Path(sys.executable).with_name("cfn-lint")  # the dev extra's console script
    done = subprocess.run([str(lint), str(TEMPLATE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_handler_is_a_function_of_the_sample(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMFLOW_STORE", "memory:")  # nothing is opened until an invocation
    monkeypatch.setenv("IDEMFLOW_QUEUE", "memory:")
    functions = _resources(template, "AWS::Serverless::Function")
    assert len(functions) == 3
    for properties in functions.values():
        module, _, name = properties["Handler"].rpartition(".")
        assert callable(getattr(importlib.import_module(module), name))
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert {"IDEMFLOW_STORE", "IDEMFLOW_QUEUE", "IDEMFLOW_SIGNING_KEY"} <= set(env)


def test_the_tables_are_those_the_store_and_the_sample_use(template: dict[str, Any]) -> None:
    tables = _resources(template, "AWS::DynamoDB::Table")
    names = {props["TableName"]["Sub"] for props in tables.values()}
    assert names == {"${Prefix}" + table for table in (*TABLES, RUNS_TABLE)}
    for props in tables.values():
        assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
        assert props["KeySchema"] == RUNS_SCHEMA["KeySchema"]
        if props["TableName"]["Sub"].endswith(RUNS_TABLE):  # as create_tables makes it
            assert props["GlobalSecondaryIndexes"] == RUNS_SCHEMA["GlobalSecondaryIndexes"]
            assert props["AttributeDefinitions"] == RUNS_SCHEMA["AttributeDefinitions"]


def test_the_queue_follows_the_rules_the_serverless_page_states(template: dict[str, Any]) -> None:
    queues = _resources(template, "AWS::SQS::Queue")
    worker = template["Resources"]["WorkerFunction"]["Properties"]
    source = worker["Events"]["Continuations"]["Properties"]
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]  # else failed records are deleted
    continuations = queues["Continuations"]
    assert continuations["VisibilityTimeout"] >= 6 * worker["Timeout"]
    assert continuations["RedrivePolicy"]["maxReceiveCount"] > 5  # above the worker's max_deliveries
    assert queues["DeadLetters"]["QueueName"] == {"Sub": "${QueueName}-dlq"}  # where idemflow writes
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert "create=false" in env["IDEMFLOW_QUEUE"]["Sub"]  # so no function needs sqs:CreateQueue


class _Touched:
    """A real store that notes the tables each read and commit touches."""

    def __init__(self) -> None:
        self._store = MemoryStore()
        self.tables: set[str] = set()

    def read(self, ref: RowRef) -> Row | None:
        self.tables.add(ref.table)
        return self._store.read(ref)

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        self.tables.update(ref.table for ref in refs)
        return self._store.read_many(refs)

    def commit(self, ops: Sequence[Op]) -> Any:
        self.tables.update(op.ref.table for op in ops)
        return self._store.commit(ops)

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self.tables.update(op.ref.table for op in ops)
        self._store.commit_cache(ops)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_the_http_endpoint_is_the_handler_its_api_routes_to_with_only_the_tables_it_touches(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMFLOW_STORE", "memory:")
    monkeypatch.setenv("IDEMFLOW_QUEUE", "memory:")
    from samples.survey import lambda_handlers
    from samples.survey.workflows import create_survey

    function = template["Resources"]["RespondFunction"]["Properties"]
    assert function["Handler"] == "samples.survey.lambda_handlers.respond"
    assert isinstance(lambda_handlers.respond, HttpHandler)
    event = function["Events"]["Respond"]
    assert event["Type"] == "HttpApi" and event["Properties"]["Method"] == "POST"
    assert event["Properties"]["Path"] == "/surveys/{survey}/responses"  # the handler reads {survey}
    assert event["Properties"]["PayloadFormatVersion"] == "2.0"
    assert template["Resources"][event["Properties"]["ApiId"]["Ref"]]["Type"] == "AWS::Serverless::HttpApi"
    assert function["Timeout"] < 30  # the HTTP API gives up on an integration after 30 s

    touched: Any = _Touched()
    lunch = {"id": "lunch", "title": "L", "questions": [{"id": "q", "text": "?", "options": ["a", "b"]}]}
    run(create_survey(lunch), request_id="c-1", store=touched)
    touched.tables.clear()
    respond = HttpHandler(
        lambda_handlers.respond._function, store=touched, options=lambda_handlers.respond.options
    )
    request = {
        "version": "2.0",
        "rawPath": "/surveys/lunch/responses",
        "pathParameters": {"survey": "lunch"},
        "headers": {"idempotency-key": "r-1"},
        "requestContext": {"http": {"method": "POST"}},
        "body": json.dumps({"respondent": "ada", "answers": {"q": "a"}}),
        "isBase64Encoded": False,
    }
    assert respond(request, FixedContext(10_000))["statusCode"] == 200
    [statement] = function["Policies"][0]["Statement"]
    allowed = {resource["GetAtt"].removesuffix(".Arn") for resource in statement["Resource"]}
    names = {
        name: props["TableName"]["Sub"].removeprefix("${Prefix}")
        for name, props in _resources(template, "AWS::DynamoDB::Table").items()
    }
    assert {names[resource] for resource in allowed} == touched.tables  # all it needs, nothing more
    assert not any(action.startswith("sqs:") for action in statement["Action"])
    assert {"dynamodb:Query", "dynamodb:Scan"}.isdisjoint(statement["Action"])
