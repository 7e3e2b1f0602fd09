"""The scheduler's serverless functions: ``aws_lambda.schedules_handler`` for an EventBridge
schedule (called directly on SQLite, and in a Lambda sandbox against moto, two sandboxes racing)
and ``azure_functions.schedules_function`` / ``register(schedules=)`` on Azurite, run as the
Functions host runs a timer. Each fires the ticks due once however often it runs, and the
queue-triggered functions finish them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from idemflow import InvalidInputError, InvalidScheduleError
from idemflow.admin import resume_schedule
from idemflow.aws_lambda import FixedContext, schedules_handler, sqs_handler
from idemflow.azure_functions import register
from idemflow.client import RunStatus, status
from idemflow.keys import RUNS_TABLE
from idemflow.stores import SqliteStore, Store
from idemflow.worker import SqliteQueue
from tests.integrations.test_aws_lambda import SCHEDULED, cloud, local_event  # noqa: F401 - fixture
from tests.integrations.test_azure_functions import KEY, SETTING, drain
from tests.integrations.test_azure_functions import cloud as azure_cloud  # noqa: F401 - fixture
from tests.support.azure_host import FunctionsHost, TimerRequest
from tests.support.lambda_functions import HOURLY, WORKFLOWS
from tests.support.lambda_runtime import Sandbox
from tests.support.workflows import rows_of

NOW = 1_800_000_000.0 + 1800
"""The clock of the functions built here: 2027-01-15T08:30:00Z (the sandboxes run on the wall
clock, so a test there reads what they fired rather than computing it)."""


def two_hours_back(store: Store, now: float = NOW) -> list[str]:
    """Move the hourly schedule's state two hours back from ``now`` (as if its schedulers were
    down): the request ids of the two ticks a pass at ``now`` fires."""
    resume_schedule(store, HOURLY.name, clock=lambda: now - 2 * 3600)
    due, _ = HOURLY.ticking.ticks(now - 2 * 3600, now, limit=10)
    assert len(due) == 2
    return [HOURLY.request_id(tick) for tick in due]


def ticks_counted(store: Store) -> dict[str, Any]:
    return {key: value for (table, part, key), value in rows_of(store, "s-").items() if table == "tableb"}


def requests(store: Store) -> list[str]:
    return sorted(p for p, k, _ in store.scan(RUNS_TABLE) if k == "rlambda-tick")


def test_the_lambda_handler_fires_each_tick_once_however_often_it_runs(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "store.sqlite3"))
    queue = SqliteQueue(str(tmp_path / "queue.sqlite3"), name="jobs", visibility_timeout=30)
    expected = two_hours_back(store)
    handler = schedules_handler([HOURLY], store=store, queue=queue, clock=lambda: NOW)
    first = handler(SCHEDULED, FixedContext(60_000))
    assert first["submitted"] == 2 and first["schedules"]["hourly"]["fired"] == expected
    assert handler(SCHEDULED, FixedContext(60_000))["submitted"] == 0  # its row moved past them
    assert requests(store) == expected
    worker = sqs_handler(WORKFLOWS, store=store, queue=queue)
    assert worker(local_event(queue), FixedContext(60_000)) == {"batchItemFailures": []}
    assert all(status(store, "lambda-tick", r).status is RunStatus.COMPLETED for r in expected)
    assert sorted(ticks_counted(store).values()) == [1, 1]


def test_the_lambda_handler_refuses_wrong_events_and_schedules_before_anything_is_written(
    tmp_path: Path,
) -> None:
    store = SqliteStore(str(tmp_path / "store.sqlite3"))
    queue = SqliteQueue(str(tmp_path / "queue.sqlite3"), name="jobs", visibility_timeout=30)
    handler = schedules_handler([HOURLY], store=store, queue=queue)
    for event in ({"Records": []}, {"detail-type": "Object Created"}, ["x"]):
        with pytest.raises(InvalidInputError, match="takes"):
            handler(event, FixedContext(60_000))  # type: ignore[arg-type]
    with pytest.raises(InvalidScheduleError, match="two schedules have this name"):
        schedules_handler([HOURLY, HOURLY], store=store, queue=queue)
    assert list(store.scan(RUNS_TABLE)) == [] and queue.approximate_size() == 0


@pytest.mark.cloud
def test_two_lambda_sandboxes_racing_fire_each_tick_once(cloud: dict[str, Any]) -> None:  # noqa: F811
    """Two sandboxes invoked by the same schedule at once (a retried EventBridge delivery, two
    regions): the two due ticks are two requests, which the worker's sandbox finishes once each."""
    store, mapping = cloud["store"], cloud["mapping"]
    two_hours_back(store, time.time())
    with (
        Sandbox("tests.support.lambda_functions.schedules", cloud["env"]) as one,
        Sandbox("tests.support.lambda_functions.schedules", cloud["env"]) as two,
    ):
        racing = [one.invoke_async(SCHEDULED), two.invoke_async(SCHEDULED)]
        answers = [invocation.result(timeout=60) for invocation in racing]
    assert all(answer["schedules"]["hourly"]["error"] is None for answer in answers), answers
    fired = [answer["schedules"]["hourly"]["fired"] for answer in answers]
    expected = sorted({request for ids in fired for request in ids})
    assert len(expected) in (2, 3) and all(len(set(ids)) == len(ids) for ids in fired)  # 3: an hour began
    assert requests(store) == expected
    with Sandbox("tests.support.lambda_functions.worker", cloud["env"]) as sandbox:
        deadline = time.monotonic() + 30
        while not all(status(store, "lambda-tick", r).status is RunStatus.COMPLETED for r in expected):
            assert time.monotonic() < deadline, sandbox.output()
            event = mapping.batch()
            if event is not None:
                assert sandbox.invoke(event) == {"batchItemFailures": []}
    assert sorted(ticks_counted(store).values()) == [1] * len(expected)


@pytest.mark.cloud
def test_the_azure_timer_fires_each_tick_once_and_the_queue_function_finishes_them(
    azure_cloud: dict[str, Any],  # noqa: F811
) -> None:
    store = azure_cloud["store"]
    expected = two_hours_back(store)
    wiring: dict[str, Any] = {
        "store": store,
        "queue": azure_cloud["url"],
        "connection": SETTING,
        "clock": lambda: NOW,
    }
    indexed = func.FunctionApp()
    register(indexed, WORKFLOWS, **wiring, signing_key=KEY, schedules=[HOURLY])
    names = sorted(f.get_function_name() for f in indexed.get_functions())
    assert names == ["idemflow_relay", "idemflow_schedules", "idemflow_worker"]
    app = func.FunctionApp()
    registered = register(app, WORKFLOWS, **wiring, signing_key=KEY, schedules=[HOURLY])
    assert registered.schedules is not None
    assert registered.schedules(TimerRequest(past_due=True))["schedules"]["hourly"]["fired"] == expected
    assert registered.schedules(TimerRequest(past_due=False))["submitted"] == 0
    assert requests(store) == expected
    drain(FunctionsHost(app))
    assert all(status(store, "lambda-tick", r).status is RunStatus.COMPLETED for r in expected)
    assert sorted(ticks_counted(store).values()) == [1, 1]
    with pytest.raises(InvalidScheduleError):
        register(func.FunctionApp(), WORKFLOWS, store=store, queue=azure_cloud["url"], schedules=["x"])  # type: ignore[list-item]
