"""Backend-specific queue tests: the wire escaping, stale holders, processes, errors and URLs.

The behaviour every queue shares is in ``tests/conformance/test_queue_contract.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemflow import MessageLostError
from idemflow.async_worklist.queues import Message
from idemflow.async_worklist.queues.base import check_reason, decode_wire, encode_wire
from idemflow.errors import BackendError, ConfigurationError, InvalidNameError, TransientError
from idemflow.testing.servers import AZURITE_KEY, Azurite, Moto, free_port
from idemflow.worker import MemoryQueue, Queue, SqliteQueue, open_queue
from tests.conformance.test_queue_contract import FakeTime
from tests.support.selection import kinds


def _name() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


# --- the wire escaping used by the cloud queues ---------------------------------------------------


@given(st.text())
def test_wire_encoding_round_trips_any_text_and_carries_only_safe_characters(body: str) -> None:
    wire = encode_wire(body)
    assert decode_wire(wire) == body
    assert wire and not any(ch in wire for ch in "\x00\x01\x08\x0b\x0c\x0e\x1f\ufffe\uffff")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1))
def test_wire_encoding_leaves_safe_text_alone(body: str) -> None:
    if not body.startswith("~") and "\ufffe" not in body and "\uffff" not in body:
        assert encode_wire(body) == body


def test_dead_letter_reasons_become_one_line_of_at_most_900_bytes() -> None:
    reason = check_reason("é" * 1000 + "\nmore")
    assert "\n" not in reason and len(reason.encode()) <= 900 and reason == "é" * 450


# --- memory ---------------------------------------------------------------------------------------


def test_memory_receive_wakes_when_another_thread_sends() -> None:
    import threading

    queue = MemoryQueue()
    threading.Timer(0.05, lambda: queue.send("late")).start()
    [message] = queue.receive(wait=10)
    assert message.body == "late"


def test_memory_forgets_stale_schedule_entries() -> None:
    clock = FakeTime()
    queue = MemoryQueue(clock=clock.time)
    for i in range(500):
        queue.send(str(i))
        [message] = queue.receive()
        queue.ack(message)
    assert len(queue._ready) < 200


def test_every_backend_satisfies_the_protocol(tmp_path: Path) -> None:
    from idemflow.worker import AzureQueue, SqsQueue

    assert isinstance(MemoryQueue(), Queue)
    assert isinstance(SqliteQueue(tmp_path / "q.sqlite3"), Queue)
    for cls in (SqsQueue, AzureQueue):
        assert all(
            callable(getattr(cls, name))
            for name in ("send", "receive", "ack", "extend", "consume", "list_dead_letters", "redrive")
        )


# --- stale holders: a receiver whose visibility expired loses the message -------------------------


@pytest.fixture(params=kinds("memory", "sqlite", "azure"))
def stale_setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Queue, FakeTime | None]]:
    """A queue with 1 s visibility and the fake clock driving it (None: real time on Azurite)."""
    if request.param == "azure":
        from idemflow.worker import AzureQueue

        azurite: Azurite = request.getfixturevalue("azurite")
        queue: Queue = AzureQueue(_name(), connection_string=azurite.connection_string, visibility_timeout=1)
        yield queue, None
        queue.close()
        return
    clock = FakeTime()
    if request.param == "memory":
        queue = MemoryQueue(visibility_timeout=1, clock=clock.time)
    else:
        queue = SqliteQueue(tmp_path / "q.sqlite3", visibility_timeout=1, clock=clock.time, sleep=clock.sleep)
    yield queue, clock
    queue.close()


def test_a_stale_holder_cannot_ack_extend_nack_or_dead_letter(
    stale_setup: tuple[Queue, FakeTime | None],
) -> None:
    queue, clock = stale_setup
    queue.send("contested")
    [stale] = queue.receive(visibility_timeout=1)
    fresh: list[Message] = []
    deadline = time.monotonic() + 15
    while not fresh and time.monotonic() < deadline:
        if clock is not None:
            clock.now += 2
        fresh = queue.receive(wait=0.5 if clock is None else 0, visibility_timeout=60)
    assert fresh and fresh[0].deliveries == 2
    queue.ack(stale)  # quietly ignored: the new holder owns it
    queue.nack(stale)
    queue.dead_letter(stale, "stale")
    with pytest.raises(MessageLostError):
        queue.extend(stale, 30)
    assert queue.approximate_size() == 1 and queue.dead_letters() == []
    assert queue.receive() == []  # still hidden for the new holder
    queue.ack(queue.extend(fresh[0], 60))
    assert queue.approximate_size() == 0


# --- SQLite ---------------------------------------------------------------------------------------


def _drain(path: str, start: object, out: str) -> None:
    """Child process: start with the other one, then receive and ack until the queue is empty."""
    queue = SqliteQueue(path, name="jobs", visibility_timeout=30)
    start.wait()  # type: ignore[attr-defined]
    got: list[str] = []
    empty = 0
    while empty < 3:
        messages = queue.receive(wait=0.05)
        empty = 0 if messages else empty + 1
        for message in messages:
            got.append(message.body)
            time.sleep(0.001)  # the work: gives the other process a window on the write lock
            queue.ack(message)
    Path(out).write_text(json.dumps(got))


def _hold_and_hang(path: str) -> None:
    """Child process: take five messages and never ack them (it is killed)."""
    queue = SqliteQueue(path, name="jobs")
    held = 0
    while held < 5:
        held += len(queue.receive(max_messages=5 - held, wait=1, visibility_timeout=1))
    Path(path + ".held").write_text("5")
    time.sleep(60)


@pytest.mark.slow
def test_sqlite_two_processes_draining_one_file_receive_each_message_once(tmp_path: Path) -> None:
    path = str(tmp_path / "q.sqlite3")
    queue = SqliteQueue(path, name="jobs")
    expected = [json.dumps({"n": i}) for i in range(300)]
    for body in expected:
        queue.send(body)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)  # both open the file, then drain it at the same time
    outs = [str(tmp_path / f"out{i}.json") for i in range(2)]
    procs = [ctx.Process(target=_drain, args=(path, start, out)) for out in outs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    got = [json.loads(Path(out).read_text()) for out in outs]
    assert sorted(got[0] + got[1]) == sorted(expected)
    assert not set(got[0]) & set(got[1])
    assert got[0] and got[1]  # both really took part
    assert queue.approximate_size() == 0


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sqlite_messages_of_a_killed_worker_come_back(tmp_path: Path) -> None:
    path = str(tmp_path / "q.sqlite3")
    queue = SqliteQueue(path, name="jobs")
    for i in range(5):
        queue.send(str(i))
    proc = multiprocessing.get_context("spawn").Process(target=_hold_and_hang, args=(path,))
    proc.start()
    deadline = time.monotonic() + 30
    while not Path(path + ".held").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    back: list[Message] = []
    while len(back) < 5 and time.monotonic() < deadline:
        back += queue.receive(max_messages=5, wait=0.5)
    assert sorted(m.body for m in back) == ["0", "1", "2", "3", "4"]
    assert {m.deliveries for m in back} == {2}


def test_sqlite_named_queues_share_a_file_independently(tmp_path: Path) -> None:
    a, b = SqliteQueue(tmp_path / "q.sqlite3", name="a"), SqliteQueue(tmp_path / "q.sqlite3", name="b")
    a.send("for a")
    assert b.receive() == [] and b.approximate_size() == 0
    assert [m.body for m in a.receive()] == ["for a"]


def test_sqlite_messages_and_dead_letters_survive_reopening(tmp_path: Path) -> None:
    clock = FakeTime()
    queue = SqliteQueue(tmp_path / "q.sqlite3", clock=clock.time)
    queue.send("kept")
    queue.send("poison")
    [first, second] = queue.receive(max_messages=2)
    queue.dead_letter(second, "bad")
    queue.close()
    reopened = SqliteQueue(tmp_path / "q.sqlite3", clock=clock.time)
    assert reopened.receive() == []  # still in flight
    clock.now += 31
    [again] = reopened.receive()
    assert (again.body, again.deliveries) == (first.body, 2)
    assert reopened.dead_letters() == [("poison", "bad")]


def test_sqlite_bad_path_and_name_fail_early(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot open"):
        SqliteQueue(tmp_path / "missing-dir" / "q.sqlite3")
    with pytest.raises(InvalidNameError):
        SqliteQueue(tmp_path / "q.sqlite3", name="")


# --- SQS ------------------------------------------------------------------------------------------


def test_sqs_missing_queue_without_create_names_the_fix(moto: Moto) -> None:
    from idemflow.worker import SqsQueue

    with pytest.raises(ConfigurationError, match="does not exist; create it"):
        SqsQueue(_name(), endpoint_url=moto.endpoint, region_name=moto.region, create=False)


def test_sqs_unreachable_endpoint_is_transient() -> None:
    import boto3
    from botocore.config import Config

    from idemflow.worker import SqsQueue

    config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1)
    client = boto3.client(
        "sqs",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=config,
    )
    with pytest.raises(TransientError, match="cannot reach SQS"):
        SqsQueue(_name(), client=client)


def test_sqs_without_credentials_names_the_fix(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    from idemflow.worker import SqsQueue

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # the default session caches credentials
    with pytest.raises(ConfigurationError, match="configure AWS credentials"):
        SqsQueue(_name(), endpoint_url=moto.endpoint, region_name=moto.region)


def test_sqs_names_are_validated_and_the_dead_letter_queue_exists(moto: Moto) -> None:
    import boto3

    from idemflow.worker import SqsQueue

    for bad in ("", "has space", "x" * 77, "jobs.fifo"):
        with pytest.raises(InvalidNameError):
            SqsQueue(bad, endpoint_url=moto.endpoint, region_name=moto.region)
    name = _name()
    SqsQueue(name, endpoint_url=moto.endpoint, region_name=moto.region).close()
    client = boto3.client("sqs", endpoint_url=moto.endpoint, region_name=moto.region)
    assert client.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"].endswith(f"{name}-dlq")


def test_sqs_receives_at_most_ten_per_call(moto: Moto) -> None:
    queue = open_queue(f"sqs:{_name()}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=5")
    assert queue.visibility_timeout == 5.0
    for i in range(12):
        queue.send(str(i))
    assert 1 <= len(queue.receive(max_messages=12, wait=1)) <= 10


@pytest.mark.parametrize("kind", kinds("sqs", "azure"))
def test_cloud_redrive_leaves_nothing_behind_in_the_dead_letter_queue(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A redriven dead letter is deleted from ``<name>-dlq``, not merely hidden there by the receive."""
    name = _name()
    queue: Queue
    if kind == "sqs":
        import boto3

        from idemflow.worker import SqsQueue

        moto: Moto = request.getfixturevalue("moto")
        queue = SqsQueue(name, endpoint_url=moto.endpoint, region_name=moto.region, visibility_timeout=60)
        client = boto3.client("sqs", endpoint_url=moto.endpoint, region_name=moto.region)
        dlq_url = client.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"]
        counts = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]

        def in_dlq() -> tuple[int, int]:
            found = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=counts)["Attributes"]
            return int(found[counts[0]]), int(found[counts[1]])
    else:
        from azure.storage.queue import QueueClient

        from idemflow.worker import AzureQueue

        conn = request.getfixturevalue("azurite").connection_string
        queue = AzureQueue(name, connection_string=conn, visibility_timeout=60)
        dlq = QueueClient.from_connection_string(conn, f"{name}-dlq")

        def in_dlq() -> tuple[int, int]:  # (visible, all): Azure counts hidden messages too
            return len(
                dlq.peek_messages(max_messages=32)
            ), dlq.get_queue_properties().approximate_message_count

    for body in ("a", "b"):
        queue.send(body)
    held: list[Message] = []
    deadline = time.monotonic() + 15
    while len(held) < 2 and time.monotonic() < deadline:
        held += queue.receive(max_messages=2, wait=1)
    for message in held:
        queue.dead_letter(message, "poison")
    dead = sorted(queue.list_dead_letters(), key=lambda d: d.body)
    assert [d.body for d in dead] == ["a", "b"]
    assert in_dlq() == ((2, 0) if kind == "sqs" else (2, 2))  # listed, then made visible again
    assert queue.redrive([dead[0].id]) == 1
    assert in_dlq() == ((1, 0) if kind == "sqs" else (1, 1))
    assert queue.redrive() == 1
    assert in_dlq() == (0, 0) and queue.redrive() == 0
    if kind == "azure":  # redriven messages never expire, like every message sent
        main = QueueClient.from_connection_string(conn, name)
        assert [m.expires_on.year for m in main.peek_messages(max_messages=32)] == [9999, 9999]
    queue.close()


# --- Azure ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["ab", "Jobs", "-jobs", "jobs-", "jo--bs", "jobs_1", "x" * 60, 7])
def test_azure_queue_names_are_validated(bad: object) -> None:
    from idemflow.worker import AzureQueue

    with pytest.raises(InvalidNameError):
        AzureQueue(bad, connection_string="unused")  # type: ignore[arg-type]


def test_azure_sends_plain_text_not_base64(azurite: Azurite) -> None:
    from azure.storage.queue import QueueClient

    name = _name()
    queue = open_queue(f"azure-queue:{name}?connection_string={azurite.connection_string}")
    body = json.dumps({"schritt": "zwei ✓"}, ensure_ascii=False)
    queue.send(body)
    raw = QueueClient.from_connection_string(azurite.connection_string, name)
    assert [m.content for m in raw.peek_messages()] == [body]


def test_azure_errors_name_the_fix_and_never_the_key(azurite: Azurite) -> None:
    from idemflow.worker import AzureQueue

    conn = azurite.connection_string
    missing = AzureQueue(_name(), connection_string=conn, create=False)
    with pytest.raises(ConfigurationError, match="does not exist") as missing_error:
        missing.send("x")
    wrong_key = conn.replace(AZURITE_KEY, "A" * 20 + "+" + AZURITE_KEY[21:])
    with pytest.raises(ConfigurationError, match="authentication failed") as auth_error:
        AzureQueue(_name(), connection_string=wrong_key, retry_total=0)
    down = conn.replace(f":{azurite.queue_port}/", f":{free_port()}/")
    with pytest.raises(TransientError) as down_error:
        AzureQueue(_name(), connection_string=down, retry_total=0)
    with pytest.raises(ConfigurationError, match="malformed") as malformed_error:
        AzureQueue(_name(), connection_string="AccountKey=" + AZURITE_KEY)
    for error in (missing_error, auth_error, down_error, malformed_error):
        assert AZURITE_KEY[:12] not in str(error.value) and "AAAAAAAA" not in str(error.value)
    assert AZURITE_KEY[:12] not in repr(missing)


def test_azure_queue_url_takes_the_environment_connection_string(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    queue = open_queue(f"azure-queue:{_name()}?visibility_timeout=7")
    assert type(queue).__name__ == "AzureQueue" and queue.visibility_timeout == 7.0
    queue.send("via env")
    assert [m.body for m in queue.receive(wait=1)] == ["via env"]


# --- open_queue -----------------------------------------------------------------------------------


def test_open_queue_local_schemes(tmp_path: Path) -> None:
    assert isinstance(open_queue("memory:"), MemoryQueue)
    queue = open_queue(f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs&visibility_timeout=2.5")
    assert isinstance(queue, SqliteQueue) and (queue.name, queue.visibility_timeout) == ("jobs", 2.5)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("nothing", "unknown scheme"),
        ("azure-queues:jobs?connection_string=AccountKey=SECRET+KEY", "unknown scheme"),
        ("memory:?visibility_timout=3", "unknown parameter"),
        ("memory:?visibility_timeout=soon", "must be a number"),
        ("sqlite:", "needs a path"),
        ("sqs:?region=us-east-1", "needs a queue name"),
        ("sqs:jobs?create=maybe", "true or false"),
    ],
)
def test_open_queue_refuses_bad_urls_without_quoting_the_query(
    url: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(ConfigurationError, match=problem) as error:
        open_queue(url)
    assert "SECRET" not in str(error.value)


def test_open_queue_azure_without_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(ConfigurationError, match="AZURE_STORAGE_CONNECTION_STRING"):
        open_queue("azure-queue:jobs")


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import idemflow.async_worklist.queues as queues

    monkeypatch.delitem(sys.modules, "idemflow.async_worklist.queues.sqs", raising=False)
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ConfigurationError, match=r"idemflow\[aws\]"):
        queues.SqsQueue  # noqa: B018


# --- what the optional imports and the cloud queues' errors share ----------------------------------

OPTIONAL = [
    ("idemflow.stores", "DynamoDBStore", "idemflow.stores.dynamodb", "boto3", "aws"),
    ("idemflow.stores", "AzureTableStore", "idemflow.stores.azure_tables", "azure.data.tables", "azure"),
    ("idemflow.worker", "SqsQueue", "idemflow.async_worklist.queues.sqs", "boto3", "aws"),
    (
        "idemflow.worker",
        "AzureQueue",
        "idemflow.async_worklist.queues.azure_queue",
        "azure.storage.queue",
        "azure",
    ),
    ("idemflow.async_worklist.queues", "SqsQueue", "idemflow.async_worklist.queues.sqs", "boto3", "aws"),
    (
        "idemflow.async_worklist.queues",
        "AzureQueue",
        "idemflow.async_worklist.queues.azure_queue",
        "azure.storage.queue",
        "azure",
    ),
]


@pytest.mark.parametrize(("owner", "name", "module", "sdk", "extra"), OPTIONAL)
def test_every_optional_class_is_loaded_by_the_one_lazy_helper(
    owner: str, name: str, module: str, sdk: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    from idemflow.core.lazy import load_optional

    package = importlib.import_module(owner)
    assert getattr(package, name) is load_optional(owner, name, {name: (module, extra)})
    with pytest.raises(AttributeError, match=f"module '{owner}' has no attribute 'Nope'"):
        getattr(package, "Nope")  # noqa: B009
    loaded = []
    real = load_optional

    def spy(*args: Any) -> Any:
        loaded.append(args[:2])
        return real(*args)

    monkeypatch.setattr(
        package, "_load_optional" if hasattr(package, "_load_optional") else "load_optional", spy
    )
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, sdk, None)
    with pytest.raises(
        ConfigurationError, match=rf"{name} needs the '{extra}' extra: pip install 'idemflow\[{extra}\]'"
    ):
        getattr(package, name)
    assert loaded == [(owner, name)]


def _sqs_error(code: str, status: int) -> Any:
    from botocore.exceptions import ClientError

    response: Any = {
        "Error": {"Code": code, "Message": "details"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "SendMessage")


def _azure_error(code: str, status: int) -> Any:
    from azure.core.exceptions import HttpResponseError

    error = HttpResponseError(message="details")
    error.status_code, error.error_code = status, code
    return error


def _queue_errors(sqs_exc: Exception, azure_exc: Exception) -> list[Any]:
    """What the SQS and the Azure queue make of an SDK failure of a send (no server needed)."""
    from idemflow.async_worklist.queues._azure_queue_calls import azure_error
    from idemflow.async_worklist.queues._sqs_calls import sqs_error

    return [
        sqs_error("jobs", "send", sqs_exc, "send_message"),
        azure_error("send on Azure queue 'jobs'", azure_exc, "send_message"),
    ]


ANSWERS = [  # (SQS code, Azure code, HTTP status, the error, its code, what it says)
    (
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueNotFound",
        400,
        ConfigurationError,
        "not_found",
        "does not exist",
    ),
    ("AccessDenied", "AuthenticationFailed", 403, ConfigurationError, "credentials_refused", "check the"),
    ("Whatever", "Whatever", 403, ConfigurationError, "credentials_refused", "check the"),
    ("ThrottlingException", "ServerBusy", 400, TransientError, "throttled", "busy or failing"),
    ("Whatever", "Whatever", 408, TransientError, "transient", "busy or failing"),
    ("Whatever", "Whatever", 429, TransientError, "throttled", "busy or failing"),
    ("Whatever", "Whatever", 503, TransientError, "transient", "busy or failing"),
    ("InvalidParameterValue", "InvalidQueryParameterValue", 400, BackendError, "backend_failed", "failed: "),
]


@pytest.mark.parametrize(("sqs_code", "azure_code", "status", "error", "code", "says"), ANSWERS)
def test_sqs_and_azure_map_service_answers_alike(
    sqs_code: str, azure_code: str, status: int, error: type[Exception], code: str, says: str
) -> None:
    mapped = _queue_errors(_sqs_error(sqs_code, status), _azure_error(azure_code, status))
    for one, backend, service_code in zip(
        mapped, ("sqs", "azure_queue"), (sqs_code, azure_code), strict=True
    ):
        assert type(one) is error and says in str(one) and "send on " in str(one)
        assert (one.code, one.backend, one.service_code) == (code, backend, service_code)
    assert [one.operation for one in mapped] == ["SendMessage", "send_message"]


def test_sqs_and_azure_map_unreachable_services_alike() -> None:
    from azure.core.exceptions import ServiceRequestError
    from botocore.exceptions import EndpointConnectionError

    down = _queue_errors(
        EndpointConnectionError(endpoint_url="http://u:pw@127.0.0.1:1"),
        ServiceRequestError("http://127.0.0.1:1/?sig=secret"),
    )
    for mapped in down:
        assert type(mapped) is TransientError and mapped.code == "transient"
        assert "cannot reach" in str(mapped) and "retry later" in str(mapped)
        assert "pw@" not in str(mapped) and "sig=" not in str(mapped)
    assert [mapped.service_code for mapped in down] == ["EndpointConnectionError", "ServiceRequestError"]
