"""deploy/azure, the survey sample on Azure Functions: function_app.py registers what the host
needs, host.json sets the queue trigger as docs/serverless.md states, and the app finishes the
sample's responses on Azurite when the host's stand-in (tests/support/azure_host.py) runs it."""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from idemflow import open_store, run
from idemflow.async_worklist.queues.azure_queue import AzureQueue
from idemflow.client import RunStatus, status, submit
from idemflow.testing.servers import Azurite
from samples.survey.workflows import TABLES, create_survey, respond, results
from tests.support.azure_host import FunctionsHost, HostSettings

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "deploy" / "azure"
KEY = "survey-azure-signing-key"


@pytest.fixture
def settings(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The app settings of local.settings.json.example, pointed at Azurite and fresh names."""
    prefix = f"s{uuid.uuid4().hex[:8]}"
    values = {
        "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
        "IDEMFLOW_STORE": f"azure:?prefix={prefix}",
        "IDEMFLOW_QUEUE": f"azure-queue:{prefix}-continuations",
        "IDEMFLOW_SIGNING_KEY": KEY,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def load_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"function_app_{uuid.uuid4().hex}", APP / "function_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_json() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((APP / "host.json").read_text())
    return loaded


def test_the_app_registers_a_queue_worker_and_a_relay(settings: dict[str, str]) -> None:
    module = load_app()
    host = FunctionsHost(module.app)  # loads both as the Python worker would
    bindings = {f.get_function_name(): f.get_trigger().get_dict_repr() for f in host.functions}
    assert set(bindings) == {"survey_worker", "survey_relay"}
    worker, relay = bindings["survey_worker"], bindings["survey_relay"]
    assert worker["type"] == "queueTrigger" and worker["connection"] == "AZURE_STORAGE_CONNECTION_STRING"
    assert worker["queueName"] == settings["IDEMFLOW_QUEUE"].removeprefix("azure-queue:")
    assert relay["type"] == "timerTrigger" and relay["schedule"] == "0 */1 * * * *"
    assert module.functions.worker.store is None  # nothing is opened before an invocation


def test_host_json_sets_what_the_serverless_page_states(settings: dict[str, str]) -> None:
    config = host_json()
    queues = config["extensions"]["queues"]
    page = (ROOT / "docs" / "serverless.md").read_text().split("# Serverless: Azure Functions")[1]
    stated = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", page, flags=re.MULTILINE))
    assert set(stated) == {
        "messageEncoding",
        "batchSize",
        "maxDequeueCount",
        "visibilityTimeout",
        "functionTimeout",
    }
    actual = {
        **{name: str(value) for name, value in queues.items()},
        "functionTimeout": config["functionTimeout"],
    }
    assert {name: actual[name] for name in stated} == stated
    assert queues["messageEncoding"] == "none"  # idemflow's messages are plain text
    module = load_app()
    assert module.functions.worker.max_deliveries <= queues["maxDequeueCount"]  # idemflow decides first
    assert module.functions.relay.budget < 60  # under the schedule's minute and the function timeout


def test_requirements_and_settings_follow_the_code(settings: dict[str, str]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {*project["dependencies"], *project["optional-dependencies"]["azure-functions"]}
    lines = (APP / "requirements.txt").read_text().splitlines()
    assert {line for line in lines if line and not line.startswith("#")} == wanted
    example = json.loads((APP / "local.settings.json.example").read_text())["Values"]
    assert set(settings) <= set(example)
    assert not any("AccountKey" in str(value) for value in example.values())  # no secret in the file


def test_the_app_finishes_the_samples_responses(settings: dict[str, str]) -> None:
    store = open_store(settings["IDEMFLOW_STORE"])
    store.create_tables(*TABLES)
    queue = AzureQueue(
        settings["IDEMFLOW_QUEUE"].removeprefix("azure-queue:"),
        connection_string=settings["AZURE_STORAGE_CONNECTION_STRING"],
    )
    definition = {
        "id": "lunch",
        "title": "Lunch",
        "questions": [{"id": "main", "text": "?", "options": ["a", "b"]}],
    }
    run(create_survey(definition), request_id="c-1", store=store)
    ids = [f"r-{n}" for n in range(6)]
    for n, request_id in enumerate(ids):
        answer = {"survey": "lunch", "respondent": f"p{n}", "answers": {"main": "ab"[n % 2]}}
        submit(respond(answer), request_id=request_id, store=store, queue=queue, signing_key=KEY)
    module = load_app()
    host = FunctionsHost(
        module.app, HostSettings(max_dequeue_count=host_json()["extensions"]["queues"]["maxDequeueCount"])
    )
    while host.poll().outcomes:
        pass
    host.tick()
    assert [status(store, "respond", i).status for i in ids] == [RunStatus.COMPLETED] * 6
    assert results(store, "lunch")["questions"] == {"main": {"a": 3, "b": 3}}
