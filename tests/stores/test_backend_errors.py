"""Errors from real servers: a store and a queue of one cloud raise the same class and code.

moto (with its IAM checks on, in a server of its own), DynamoDB Local, and
Azurite refuse a wrong key; each test asks the blocking and the asyncio store
and queue and checks the class, the code, and that ``backend``,
``operation`` and ``service_code`` say what the server said.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from idemflow import open_async_store, open_store
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.errors import ConfigurationError, ErrorCode, IdemflowError, InvalidValueError
from idemflow.serialization import encode
from idemflow.stores.base import Cond, Increment, Put, RowRef
from idemflow.testing.servers import AZURITE_KEY, Azurite, DynamoDBLocal, Moto, moto_server
from idemflow.worker import AsyncWorker, Worker, open_async_queue, open_queue
from tests.support.workflows import transfer

pytestmark = pytest.mark.cloud

ROW = RowRef("accounts", "p1", "k1")


@pytest.fixture(scope="module")
def moto_iam() -> Iterator[Moto]:
    """A moto server that checks credentials (``INITIAL_NO_AUTH_ACTION_COUNT=0``) as AWS does;
    its own, so the shared server keeps accepting any key."""
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    try:
        with moto_server() as server:
            os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT")
            yield server
    finally:
        os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)


def _name() -> str:
    return "e" + uuid.uuid4().hex[:12]


def _caught(action: Callable[[], Any]) -> IdemflowError:
    with pytest.raises(IdemflowError) as caught:
        action()
    return caught.value


def _acaught(action: Callable[[], Awaitable[Any]]) -> IdemflowError:
    async def run() -> IdemflowError:
        try:
            await action()
        except IdemflowError as exc:
            return exc
        raise AssertionError("no error")

    return asyncio.run(run())


def _aws(server: Moto | DynamoDBLocal, queue: str | None) -> tuple[str, str | None]:
    where = f"endpoint={server.endpoint}&region={server.region}"
    return f"dynamodb:?{where}&prefix={_name()}", None if queue is None else f"sqs:{queue}?{where}"


def _origins(errors: list[IdemflowError]) -> list[tuple[type[Exception], ErrorCode, str | None]]:
    return [(type(error), error.code, error.backend) for error in errors]


def _wrong_aws_key(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


def _store_read(url: str) -> IdemflowError:
    return _caught(lambda: open_store(url, create=False).read(ROW))


def _astore_read(url: str) -> IdemflowError:
    async def read() -> Any:
        store = open_async_store(url, create=False)
        try:
            return await store.read(ROW)
        finally:
            await store.close()

    return _acaught(read)


def _aqueue_send(url: str) -> IdemflowError:
    async def send() -> None:
        queue = open_async_queue(url)
        try:
            await queue.send("x")
        finally:
            await queue.close()

    return _acaught(send)


def test_a_refused_aws_key_is_one_configuration_error_from_store_and_queue(
    moto_iam: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wrong_aws_key(monkeypatch, "AKIAWRONGWRONGWRONG1")
    store_url, queue_url = _aws(moto_iam, _name())
    assert queue_url is not None
    errors = [
        _store_read(store_url),
        _astore_read(store_url),
        _caught(lambda: open_queue(queue_url)),
        _aqueue_send(queue_url),
    ]
    refused = (ConfigurationError, ErrorCode.CREDENTIALS_REFUSED)
    assert _origins(errors) == [(*refused, b) for b in ("dynamodb", "dynamodb", "sqs", "sqs")]
    # moto answers the JSON protocol's refusal in XML: botocore finds only its HTTP status
    assert {error.service_code for error in errors} == {"403"}
    assert [error.operation for error in errors] == ["GetItem", "GetItem", "GetQueueUrl", "GetQueueUrl"]
    assert "credentials refused" in str(errors[0]) and "access refused" in str(errors[2])
    for error in errors:
        assert "AKIAWRONG" not in str(error)


def test_dynamodb_local_refuses_a_key_with_the_services_own_code(
    dynamodb_local: DynamoDBLocal, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wrong_aws_key(monkeypatch, "not-a-key!")  # DynamoDB Local takes letters and digits only
    store_url, _ = _aws(dynamodb_local, None)
    errors = [_store_read(store_url), _astore_read(store_url)]
    for error in errors:
        assert isinstance(error, ConfigurationError) and error.code is ErrorCode.CREDENTIALS_REFUSED
        assert (error.backend, error.operation) == ("dynamodb", "GetItem")
        assert error.service_code == "UnrecognizedClientException"


def _wrong_azure_key(azurite: Azurite) -> str:
    return azurite.connection_string.replace(AZURITE_KEY, "A" * 20 + "+" + AZURITE_KEY[21:])


def test_a_refused_azure_key_is_one_configuration_error_from_store_and_queue(azurite: Azurite) -> None:
    wrong = _wrong_azure_key(azurite)
    store_url = f"azure:?connection_string={wrong}&prefix={_name()}"
    queue_url = f"azure-queue:{_name()}?connection_string={wrong}"
    errors = [
        _store_read(store_url),
        _astore_read(store_url),
        _caught(lambda: open_queue(queue_url)),
        _aqueue_send(queue_url),
    ]
    refused = (ConfigurationError, ErrorCode.CREDENTIALS_REFUSED)
    expected = ("azure_tables", "azure_tables", "azure_queue", "azure_queue")
    assert _origins(errors) == [(*refused, backend) for backend in expected]
    tables, queues = errors[:2], errors[2:]
    assert {(e.operation, e.service_code) for e in tables} == {("get_entity", "AuthorizationFailure")}
    assert {(e.operation, e.service_code) for e in queues} == {("create_queue", "AuthenticationFailed")}
    for error in errors:
        assert AZURITE_KEY[:12] not in str(error) and "AAAAAAAA" not in str(error)


def test_a_missing_table_or_queue_is_not_found_on_each_cloud(moto: Moto, azurite: Azurite) -> None:
    dynamodb_url, sqs_url = _aws(moto, _name())
    conn = azurite.connection_string
    azure_url = f"azure:?connection_string={conn}&prefix={_name()}"
    azure_queue_url = f"azure-queue:{_name()}?connection_string={conn}&create=false"
    errors = {
        "dynamodb": [_store_read(dynamodb_url), _astore_read(dynamodb_url)],
        "sqs": [_caught(lambda: open_queue(f"{sqs_url}&create=false"))],
        "azure_tables": [_store_read(azure_url), _astore_read(azure_url)],
        "azure_queue": [
            _caught(lambda: open_queue(azure_queue_url).send("x")),
            _aqueue_send(azure_queue_url),
        ],
    }
    said = {
        "dynamodb": ("GetItem", "ResourceNotFoundException"),
        "sqs": ("GetQueueUrl", "AWS.SimpleQueueService.NonExistentQueue"),
        "azure_tables": ("get_entity", "TableNotFound"),
        "azure_queue": ("send_message", "QueueNotFound"),
    }
    for backend, found in errors.items():
        for error in found:
            assert isinstance(error, ConfigurationError) and error.code is ErrorCode.NOT_FOUND, error
            assert (error.backend, error.operation, error.service_code) == (backend, *said[backend])


def test_a_failed_condition_names_the_call_and_the_services_code(moto: Moto) -> None:
    store_url, _ = _aws(moto, None)
    store = open_store(store_url)
    store.create_tables("accounts")
    text = RowRef("accounts", "p1", "text")
    store.commit([Put(text, "not a number", encode("not a number"), Cond.ANY, None)])
    alone = _caught(lambda: store.commit([Increment(text, 1)]))
    other = Put(RowRef("accounts", "p1", "other"), 1, encode(1), Cond.ANY, None)
    together = _caught(lambda: store.commit([Increment(text, 1), other]))
    for error, call, code in (
        (alone, "UpdateItem", "ConditionalCheckFailedException"),
        (together, "TransactWriteItems", "ConditionalCheckFailed"),
    ):
        assert isinstance(error, InvalidValueError) and error.code is ErrorCode.INVALID_INPUT
        assert (error.backend, error.operation, error.service_code) == ("dynamodb", call, code)
        assert "not a number" in str(error)


# -- a worker stops on a configuration error, from its store or its queue alike ----------------------


def _pointer(queue_url: str) -> None:
    open_queue(queue_url).send(encode_pointer(Pointer("transfer", 1, "r-1"), b"k"))


def test_a_worker_stops_on_a_refused_store_and_on_a_refused_queue(azurite: Azurite) -> None:
    conn, wrong = azurite.connection_string, _wrong_azure_key(azurite)
    queue_url = f"azure-queue:{_name()}?connection_string={conn}&visibility_timeout=5"
    _pointer(queue_url)
    refused_store = open_store(f"azure:?connection_string={wrong}&prefix={_name()}", create=False)
    good_store = open_store(f"azure:?connection_string={conn}&prefix={_name()}")
    refused_queue = open_queue(f"azure-queue:{_name()}?connection_string={wrong}&create=false")
    halted = []
    for store, queue in ((refused_store, open_queue(queue_url)), (good_store, refused_queue)):
        worker = Worker([transfer], store=store, queue=queue, signing_key=b"k", wait=0.1, relay_every=None)
        with pytest.raises(ConfigurationError) as caught:
            worker.run(idle_timeout=30)
        halted.append(caught.value)
        assert worker.halted is caught.value
    assert [(e.code, e.backend) for e in halted] == [
        (ErrorCode.CREDENTIALS_REFUSED, "azure_tables"),
        (ErrorCode.CREDENTIALS_REFUSED, "azure_queue"),
    ]
    assert open_queue(queue_url).approximate_size() == 1  # the message went back, not to the dead letters


def test_an_async_worker_stops_on_a_refused_queue(azurite: Azurite) -> None:
    wrong = _wrong_azure_key(azurite)

    async def run() -> None:
        store = open_async_store(f"azure:?connection_string={azurite.connection_string}&prefix={_name()}")
        queue = open_async_queue(f"azure-queue:{_name()}?connection_string={wrong}&create=false")
        worker = AsyncWorker(
            [transfer], store=store, queue=queue, signing_key=b"k", wait=0.1, relay_every=None
        )
        try:
            with pytest.raises(ConfigurationError) as caught:
                await worker.run(idle_timeout=30)
        finally:
            await queue.close()
            await store.close()
        assert (caught.value.code, caught.value.backend) == (ErrorCode.CREDENTIALS_REFUSED, "azure_queue")

    asyncio.run(run())
