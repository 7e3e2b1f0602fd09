"""idemflow.aws_lambda: SQS batches and the scheduled relay, in-process and inside AWS's runtime client.

The in-process tests call the handlers with a fixed context on SQLite; the sandbox
tests run them in ``python -m awslambdaric`` against the loopback Runtime API of
:mod:`tests.support.lambda_runtime`, on DynamoDB and SQS (moto), with the events built from
messages received with the SDK, as an SQS event-source mapping builds them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from idemflow import open_store
from idemflow.async_worklist.messages import decode_pointer
from idemflow.aws_lambda import FixedContext, schedule_handler, sqs_handler, sqs_messages
from idemflow.client import RunStatus, status, submit
from idemflow.errors import ConfigurationError, InvalidInputError, QueueError
from idemflow.integrations.lambda_queues import LEASE_MARGIN, Batch
from idemflow.stores import SqliteStore
from idemflow.testing.servers import Moto
from idemflow.worker import MemoryQueue, SqliteQueue, open_queue
from tests.conftest import TEST_TABLES, dynamodb_url
from tests.support.async_workflows import survey
from tests.support.lambda_functions import WORKFLOWS, PoisonedReads, gated
from tests.support.lambda_runtime import ACCOUNT, EventSourceMapping, InvocationFailed, Sandbox, SandboxCounts
from tests.support.workflows import rows_of

KEY = "lambda-test-key"
ANSWERS = ("red", "green", "blue")


SCHEDULED = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": ACCOUNT,
    "time": "2026-11-27T16:00:00Z",
    "region": "us-east-1",
    "resources": [f"arn:aws:events:us-east-1:{ACCOUNT}:rule/idemflow-relay"],
    "detail": {},
}


def request_of(record: dict[str, Any]) -> tuple[str, str]:
    pointer = decode_pointer(record["body"], KEY.encode())
    return pointer.workflow, pointer.request_id


def final(store: Any, workflow: str, request_id: str) -> bool:
    return status(store, workflow, request_id).status in (RunStatus.COMPLETED, RunStatus.ABORTED)


@pytest.fixture
def cloud(moto: Moto, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A fresh prefix on moto: store and queue URLs, the sandbox's environment, an open store."""
    prefix = f"l{uuid.uuid4().hex[:8]}"
    store_url = dynamodb_url("dynamodb", request, prefix)
    queue_url = f"sqs:{prefix}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=2"
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    queue = open_queue(queue_url)
    gates = tmp_path / "gates"
    gates.mkdir()
    env = {
        "IDEMFLOW_STORE_URL": store_url,
        "IDEMFLOW_QUEUE_URL": queue_url,
        "IDEMFLOW_SIGNING_KEY": KEY,
        "LAMBDA_GATE_DIR": str(gates),
    }
    return {
        "prefix": prefix,
        "store": store,
        "queue": queue,
        "env": env,
        "gates": gates,
        "mapping": EventSourceMapping(moto.endpoint, moto.region, prefix),
    }


# -- inside AWS's runtime client ------------------------------------------------


@pytest.mark.cloud
def test_sandbox_finishes_every_request_once_across_freezes_and_a_kill(cloud: dict[str, Any]) -> None:
    store, queue, mapping, gates = cloud["store"], cloud["queue"], cloud["mapping"], cloud["gates"]
    space = cloud["prefix"] + "-"
    expected: Counter[str] = Counter()
    requests = [("gated", f"{space}g0"), ("gated", f"{space}g1")]
    for n in range(24):
        answer = ANSWERS[n % 3]
        expected[answer] += 1
        response = {"space": space, "user": f"u{n}", "answer": answer, "at": [1]}
        for _ in range(1 + (n % 4 == 0)):  # every fourth request submitted twice
            submit(survey(response), request_id=f"{space}s{n}", store=store, queue=queue, signing_key=KEY)
        requests.append(("survey", f"{space}s{n}"))
    for _, request_id in requests[:2]:
        submit(gated(space, request_id), request_id=request_id, store=store, queue=queue, signing_key=KEY)

    counts = SandboxCounts()
    sandbox = Sandbox("tests.support.lambda_functions.worker", cloud["env"], counts)
    anomalies: list[str] = []
    deadline = time.monotonic() + 45
    try:
        while not all(final(store, *r) for r in requests):
            assert time.monotonic() < deadline, f"unfinished after {counts}: {sandbox.output()}"
            event = mapping.batch()
            if event is None:
                continue
            if sandbox.frozen:
                sandbox.thaw()
            held = [gates / f"{r[1]}.entered" for r in map(request_of, event["Records"]) if r[0] == "gated"]
            gate = next((g for g in held if not g.exists()), None)
            if gate is not None:  # this invocation is killed inside that step
                invocation = sandbox.invoke_async(event)
                while not gate.exists():
                    assert not invocation.done.is_set(), "the gate was not reached"
                    assert time.monotonic() < deadline, sandbox.output()
                    time.sleep(0.01)
                sandbox.kill()
                sandbox.stop()
                sandbox = Sandbox("tests.support.lambda_functions.worker", cloud["env"], counts)
                continue
            answer = sandbox.invoke(event)
            sandbox.freeze()  # frozen at once: what it wrote must be durable already
            failed = {item["itemIdentifier"] for item in answer["batchItemFailures"]}
            for record in event["Records"]:
                if record["messageId"] not in failed and not final(store, *request_of(record)):
                    anomalies.append(f"{request_of(record)} acked but not final")
    finally:
        sandbox.stop()
    store.flush()
    rows = rows_of(store, space)
    summary = {
        key: value for (table, part, key), value in rows.items() if table == "tableb" and "summary" in part
    }
    effects = {
        key: value for (table, part, key), value in rows.items() if table == "tableb" and "effects" in part
    }
    assert summary == dict(expected)  # each survey response counted exactly once
    assert effects == {f"{space}g0": 1, f"{space}g1": 1}  # the killed step's effect: once
    assert anomalies == []
    assert counts.kills >= 1 and counts.freezes >= 2 and counts.sandboxes == counts.kills + 1
    print(f"\nlambda sandbox: {counts}")


@pytest.mark.cloud
def test_sandbox_reports_only_the_record_that_failed(cloud: dict[str, Any]) -> None:
    store, queue, mapping = cloud["store"], cloud["queue"], cloud["mapping"]
    space = cloud["prefix"] + "-"
    ids = [f"{space}ok{n}" for n in range(3)] + [f"{space}poison"]
    for n, request_id in enumerate(ids):
        response = {"space": space, "user": f"u{n}", "answer": "red", "at": [1]}
        submit(survey(response), request_id=request_id, store=store, queue=queue, signing_key=KEY)
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while len(records) < len(ids):  # one event holding all four, as a batch of 4 would
        assert time.monotonic() < deadline
        event = mapping.batch()
        records += event["Records"] if event else []
    env = {**cloud["env"], "LAMBDA_POISONED": "1"}
    with Sandbox("tests.support.lambda_functions.poisoned", env) as sandbox:
        answer = sandbox.invoke({"Records": records})
    poison = [r["messageId"] for r in records if request_of(r)[1].endswith("poison")]
    assert answer == {"batchItemFailures": [{"itemIdentifier": poison[0]}]}
    assert all(final(store, "survey", request_id) for request_id in ids[:3])
    assert not final(store, "survey", ids[3])


@pytest.mark.cloud
def test_sandbox_relay_sends_what_submit_could_not(cloud: dict[str, Any]) -> None:
    store, mapping = cloud["store"], cloud["mapping"]
    space = cloud["prefix"] + "-"
    down = _Down(cloud["queue"])
    response = {"space": space, "user": "u0", "answer": "blue", "at": [1]}
    submit(survey(response), request_id=f"{space}r0", store=store, queue=down, signing_key=KEY, grace=0.0)
    assert mapping.batch(wait=0) is None  # the send failed: only the outbox holds the continuation
    with Sandbox("tests.support.lambda_functions.relay", cloud["env"]) as sandbox:
        assert sandbox.invoke(SCHEDULED) == {"relayed": 1, "finished": True}
    with Sandbox("tests.support.lambda_functions.worker", cloud["env"]) as sandbox:
        deadline = time.monotonic() + 20
        while not final(store, "survey", f"{space}r0"):
            assert time.monotonic() < deadline
            event = mapping.batch()
            if event is not None:
                assert sandbox.invoke(event) == {"batchItemFailures": []}


@pytest.mark.cloud
def test_sandbox_raises_for_a_wrong_event_and_takes_the_next(cloud: dict[str, Any]) -> None:
    """Wired to the wrong trigger, the function fails the invocation (Lambda's error path) and lives on."""
    with Sandbox("tests.support.lambda_functions.worker", cloud["env"]) as sandbox:
        with pytest.raises(InvocationFailed) as failed:
            sandbox.invoke(SCHEDULED)
        assert failed.value.error["errorType"] == "InvalidInputError"
        assert sandbox.invoke({"Records": []}) == {"batchItemFailures": []}
    with Sandbox("tests.support.lambda_functions.no_such_handler", cloud["env"]) as sandbox:
        with pytest.raises(InvocationFailed) as missing:
            sandbox.invoke({"Records": []})
        assert missing.value.error["errorType"] == "Runtime.HandlerNotFound"


class _Down:
    """A queue whose sends fail, as SQS does during an outage."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise QueueError("injected: the queue is down")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


# -- in-process, with a fixed context --------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> tuple[SqliteStore, SqliteQueue]:
    store = SqliteStore(str(tmp_path / "store.sqlite3"))
    return store, SqliteQueue(str(tmp_path / "queue.sqlite3"), name="jobs", visibility_timeout=30)


def local_event(queue: Any) -> dict[str, Any]:
    """The queue's messages as an SQS event (the fields the handler reads, with SQS's names)."""
    messages = queue.receive(max_messages=10)
    return {
        "Records": [
            {
                "messageId": m.id,
                "receiptHandle": m.receipt,
                "body": m.body,
                "attributes": {"ApproximateReceiveCount": str(m.deliveries)},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:{ACCOUNT}:jobs",
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }


def submit_surveys(store: Any, queue: Any, ids: list[str]) -> None:
    for n, request_id in enumerate(ids):
        response = {"space": "p-", "user": f"u{n}", "answer": ANSWERS[n % 3], "at": [1]}
        submit(survey(response), request_id=request_id, store=store, queue=queue, signing_key=KEY)


def test_handler_finishes_a_batch_and_reports_no_failures(local: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = local
    ids = [f"p-{n}" for n in range(5)]
    submit_surveys(store, queue, ids)
    handler = sqs_handler(WORKFLOWS, store=store, queue=queue, signing_key=KEY)
    assert handler(local_event(queue), FixedContext(60_000)) == {"batchItemFailures": []}
    assert all(status(store, "survey", i).status is RunStatus.COMPLETED for i in ids)
    assert queue.approximate_size() == 0  # acked records were deleted at once
    assert handler.stats is not None and handler.stats.completed == 5


def test_records_without_time_left_are_given_back(local: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = local
    ids = [f"p-{n}" for n in range(3)]
    submit_surveys(store, queue, ids)
    handler = sqs_handler(WORKFLOWS, store=store, queue=queue, signing_key=KEY, reserve=5.0)
    event = local_event(queue)
    answer = handler(event, FixedContext(4_000))  # less than the reserve: nothing is started
    assert answer == {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
    assert all(status(store, "survey", i).status is RunStatus.RUNNING for i in ids)
    assert len(queue.receive(max_messages=10)) == 3  # visible again at once, not after 30 s


def test_a_failing_record_is_the_only_failure(local: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = local
    submit_surveys(store, queue, ["p-0", "p-poison", "p-2"])
    poisoned: Any = PoisonedReads(store)
    handler = sqs_handler(WORKFLOWS, store=poisoned, queue=queue, signing_key=KEY)
    event = local_event(queue)
    poison = next(r["messageId"] for r in event["Records"] if request_of(r)[1] == "p-poison")
    assert handler(event, FixedContext(60_000)) == {"batchItemFailures": [{"itemIdentifier": poison}]}
    assert [status(store, "survey", i).status for i in ("p-0", "p-2")] == [RunStatus.COMPLETED] * 2


def test_wrong_events_are_refused_before_anything_is_written(local: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = local
    submit_surveys(store, queue, ["p-0"])
    handler = sqs_handler(WORKFLOWS, store=store, queue=queue, signing_key=KEY)
    event = local_event(queue)
    other = {"Records": [{**event["Records"][0], "eventSourceARN": "arn:aws:sqs:us-east-1:1:other"}]}
    with pytest.raises(InvalidInputError, match="not from this handler's queue"):
        handler(other, FixedContext(60_000))
    with pytest.raises(InvalidInputError, match="not an SQS message"):
        handler({"Records": [{**event["Records"][0], "eventSource": "aws:sns"}]}, FixedContext(60_000))
    with pytest.raises(InvalidInputError, match="ApproximateReceiveCount"):
        sqs_messages({"Records": [{"eventSource": "aws:sqs", "messageId": "m", "body": "{}"}]})
    with pytest.raises(InvalidInputError, match="scheduled event"):
        schedule_handler(store=store, queue=queue)(event, FixedContext(60_000))
    assert status(store, "survey", "p-0").status is RunStatus.RUNNING
    with pytest.raises(TypeError, match="@workflow"):
        sqs_handler([len], store=store, queue=queue)  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="reserve"):
        sqs_handler(WORKFLOWS, store=store, queue=queue, reserve=-1)


def test_a_laned_queue_is_refused_when_the_handler_is_built(tmp_path: Path) -> None:
    """An event's records carry no lane: each lane's queue needs its own mapping and handler, which
    the error names; the URL is read, not opened (no queue file is made)."""
    path = tmp_path / "q.sqlite3"
    with pytest.raises(ConfigurationError, match=r"\(jobs-high, jobs, jobs-low\) its own event source"):
        sqs_handler(WORKFLOWS, store="memory:", queue=f"sqlite:{path}?name=jobs&lanes=true")
    assert not path.exists()
    with pytest.raises(ConfigurationError, match="drains one queue"):
        sqs_handler(WORKFLOWS, store="memory:", queue=open_queue("memory:?lanes=true"))
    handler = sqs_handler(WORKFLOWS, store="memory:", queue=f"sqlite:{path}?name=jobs-high")  # one lane
    assert handler(local_event(open_queue(f"sqlite:{path}?name=jobs-high")), FixedContext(60_000)) == {
        "batchItemFailures": []
    }


def test_relay_stops_at_its_reserve_and_the_next_run_sends_the_rest(
    local: tuple[SqliteStore, SqliteQueue],
) -> None:
    store, queue = local
    down: Any = _Down(queue)
    for n in range(2):
        response = {"space": "p-", "user": f"u{n}", "answer": "red", "at": [1]}
        submit(survey(response), request_id=f"p-{n}", store=store, queue=down, signing_key=KEY, grace=0.0)
    relay = schedule_handler(store=store, queue=queue, signing_key=KEY, reserve=2.0)
    assert relay(SCHEDULED, FixedContext(1_000)) == {"relayed": 0, "finished": False}
    assert relay(SCHEDULED, FixedContext(60_000)) == {"relayed": 2, "finished": True}
    assert relay(SCHEDULED, FixedContext(60_000)) == {"relayed": 0, "finished": True}
    handler = sqs_handler(WORKFLOWS, store=store, queue=queue, signing_key=KEY)
    assert handler(local_event(queue), FixedContext(60_000)) == {"batchItemFailures": []}
    assert status(store, "survey", "p-1").status is RunStatus.COMPLETED


def test_each_url_is_opened_once_and_shared(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'store.sqlite3'}"
    queue_url = f"sqlite:{tmp_path / 'queue.sqlite3'}?name=jobs"
    worker = sqs_handler(WORKFLOWS, store=store_url, queue=queue_url, signing_key=KEY)
    again = sqs_handler(WORKFLOWS, store=store_url, queue=queue_url, signing_key=KEY)
    assert worker.store is None  # nothing is opened before the first invocation
    for handler in (worker, again, worker):
        assert handler({"Records": []}, FixedContext(10_000)) == {"batchItemFailures": []}
    assert worker.store is not None and worker.store is again.store
    queue = open_queue(queue_url)
    submit_surveys(worker.store, queue, ["p-0"])
    assert again(local_event(queue), FixedContext(10_000)) == {"batchItemFailures": []}
    assert status(worker.store, "survey", "p-0").status is RunStatus.COMPLETED


class StoppedClock:
    """A Lambda context whose remaining time does not run down (the queue's clock is the test's)."""

    def __init__(self, millis: int) -> None:
        self.millis = millis

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


def test_a_running_record_is_hidden_only_until_shortly_after_the_invocation_ends() -> None:
    """The heartbeat's extension is bounded by the time left: a timed-out sandbox's record returns soon."""
    now = [0.0]
    queue = MemoryQueue(visibility_timeout=60, clock=lambda: now[0])
    queue.send("body")
    [message] = queue.receive()
    batch = Batch(queue)
    batch.context = StoppedClock(3_000)
    batch.extend(message, queue.visibility_timeout)
    now[0] = 3.0 + LEASE_MARGIN - 0.1
    assert queue.receive() == []
    now[0] = 3.0 + LEASE_MARGIN + 0.1  # not 60 s: the invocation was over
    assert [m.id for m in queue.receive()] == [message.id]


def test_loading_the_module_imports_no_sdk() -> None:
    code = (
        "import sys, idemflow.aws_lambda\n"
        "print(sorted(m for m in sys.modules if m.startswith(('boto', 'azure'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
