"""deploy/aws/template.yaml, the survey sample on AWS Lambda: valid for CloudFormation (cfn-lint),
and in step with the code it deploys (handlers, the tables the store creates, the queue rules
docs/serverless.md states)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from idemflow.keys import RUNS_TABLE
from idemflow.stores._dynamodb_calls import _RUNS_SCHEMA
from samples.survey.tables import TABLES

TEMPLATE = Path(__file__).resolve().parents[1] / "deploy" / "aws" / "template.yaml"


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
    assert len(functions) == 2
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
        assert props["KeySchema"] == _RUNS_SCHEMA["KeySchema"]
        if props["TableName"]["Sub"].endswith(RUNS_TABLE):  # as create_tables makes it
            assert props["GlobalSecondaryIndexes"] == _RUNS_SCHEMA["GlobalSecondaryIndexes"]
            assert props["AttributeDefinitions"] == _RUNS_SCHEMA["AttributeDefinitions"]


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
