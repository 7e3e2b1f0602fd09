"""One retry layer: the SDKs send each call once, idemflow's tenacity policy does the resending.

Failures are injected inside the SDKs, below their retry logic (botocore's ``before-send``, an
azure-core transport), on real servers. A step's read or commit reaches the engine after one
send (under botocore's standard mode or azure-core's default policy it took 3 or 11); a call the
engine does not own (creating tables) is resent by the store, and a workflow whose commits fail
still completes exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.core.pipeline.transport import RequestsTransport
from botocore.awsrequest import AWSRequest, AWSResponse

from idemflow import Idem, RetryPolicy, Tx, atomic, run, workflow
from idemflow.async_worklist._delivery import redelivery_delay
from idemflow.errors import TransientError
from idemflow.serialization import encode
from idemflow.stores.azure_tables import AzureTableStore
from idemflow.stores.base import Increment, Put, RowRef
from idemflow.stores.dynamodb import DynamoDBStore
from idemflow.testing.servers import Azurite, Moto
from tests.conftest import TEST_TABLES

pytestmark = pytest.mark.cloud


class _Body:
    """The raw body botocore reads an injected answer from."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def failing_sends(store: DynamoDBStore, operation: str, failures: int) -> list[str]:
    """Answer the first ``failures`` sends of ``operation`` with HTTP 500 (which botocore's
    standard mode retries); returns the list every send is recorded in."""
    sends: list[str] = []

    def send(request: AWSRequest, **_: Any) -> AWSResponse | None:
        sends.append(operation)
        if len(sends) > failures:
            return None  # sent to moto
        body = b'{"__type": "InternalServerError", "message": "injected"}'
        return AWSResponse(request.url, 500, {"x-amzn-ErrorType": "InternalServerError"}, _Body(body))

    event = f"before-send.dynamodb.{operation}"
    store.client.meta.events.register(event, send, unique_id=f"fail {operation}")
    return sends


def stop_failing(store: DynamoDBStore, operation: str) -> None:
    store.client.meta.events.unregister(f"before-send.dynamodb.{operation}", unique_id=f"fail {operation}")


def dynamodb_store(moto: Moto) -> DynamoDBStore:
    prefix = f"r{uuid.uuid4().hex[:8]}"
    return DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix=prefix)


@pytest.fixture
def dynamodb(moto: Moto) -> Iterator[DynamoDBStore]:
    store = dynamodb_store(moto)
    store.create_tables(*TEST_TABLES)
    yield store
    store.close()


@pytest.mark.parametrize(
    ("rows", "operation"), [(2, "TransactWriteItems"), (1, "PutItem")], ids=["transaction", "one row"]
)
def test_a_dynamodb_commit_is_sent_once_and_its_failure_reported(
    dynamodb: DynamoDBStore, rows: int, operation: str
) -> None:
    sends = failing_sends(dynamodb, operation, failures=3)
    with pytest.raises(TransientError):
        dynamodb.commit([Put(RowRef("tablea", "p", f"k{i}"), 1, encode(1)) for i in range(rows)])
    assert len(sends) == 1  # botocore's standard mode sent it 3 times


def test_a_dynamodb_read_is_sent_once_and_its_failure_reported(dynamodb: DynamoDBStore) -> None:
    sends = failing_sends(dynamodb, "GetItem", failures=3)
    with pytest.raises(TransientError):
        dynamodb.read(RowRef("tablea", "p", "k"))
    assert len(sends) == 1


def test_dynamodb_table_creation_is_resent_by_the_store(moto: Moto) -> None:
    store = dynamodb_store(moto)
    sends = failing_sends(store, "CreateTable", failures=2)
    store.create_tables("tablea")
    assert "tablea" in store.tables()
    assert len(sends) >= 3  # two failures, then the tables (runs and tablea)
    store.close()


def _add(tx: Tx) -> None:
    tx.increment("n")


@workflow("one_layer")
def one_layer(space: str) -> Generator[Idem[Any], Any, str]:
    yield atomic("tablea", space, _add)
    yield atomic("tableb", space, _add)
    return "done"


def test_a_workflow_whose_commits_fail_completes_once(dynamodb: DynamoDBStore) -> None:
    sends = failing_sends(dynamodb, "TransactWriteItems", failures=4)
    space = f"s{uuid.uuid4().hex[:8]}"
    assert run(one_layer(space), request_id=space, store=dynamodb) == "done"
    assert len(sends) >= 6  # 4 failures, then each step's commit (and the outcome's)
    for table in ("tablea", "tableb"):
        row = dynamodb.read(RowRef(table, space, "dn"))
        assert row is not None and row.value == 1


def _read_then_add(tx: Tx) -> None:
    tx.put("seen", tx.get("seen"))


@workflow("unreachable")
def unreachable(space: str) -> Generator[Idem[Any], Any, str]:
    yield atomic("tablea", space, _read_then_add)
    return "done"


def test_a_store_that_cannot_be_read_is_reported_as_such_not_as_a_conflict(dynamodb: DynamoDBStore) -> None:
    """A step whose reads never get an answer is retried until its deadline, then the caller gets
    the store's error (it used to be told the step kept conflicting)."""
    sends = failing_sends(dynamodb, "GetItem", failures=10_000)
    batched = failing_sends(dynamodb, "BatchGetItem", failures=10_000)  # a first read peeks at the run
    space = f"u{uuid.uuid4().hex[:8]}"
    with pytest.raises(TransientError, match="worth retrying"):
        run(unreachable(space), request_id=space, store=dynamodb, policy=RetryPolicy(deadline=0.5))
    assert len(sends) + len(batched) >= 2  # retried, one send per attempt
    for operation in ("GetItem", "BatchGetItem"):
        stop_failing(dynamodb, operation)
    assert run(unreachable(space), request_id=space, store=dynamodb) == "done"


class FlakyTransport(RequestsTransport):
    """azure-core's transport, failing its first ``failures`` sends as a refused connection would
    (which azure-core's default retry policy retries)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.sends = 0

    def send(self, request: Any, **kwargs: Any) -> Any:
        self.sends += 1
        if self.sends <= self.failures:
            raise ServiceRequestError("injected: connection refused")
        return super().send(request, **kwargs)


def azure_store(azurite: Azurite, transport: FlakyTransport) -> AzureTableStore:
    prefix = f"r{uuid.uuid4().hex[:8]}"
    return AzureTableStore(connection_string=azurite.connection_string, prefix=prefix, transport=transport)


def test_an_azure_read_is_sent_once_and_its_failure_reported(azurite: Azurite) -> None:
    transport = FlakyTransport(failures=0)
    store = azure_store(azurite, transport)
    store.create_tables("tablea")
    transport.failures, transport.sends = 3, 0
    with pytest.raises(TransientError):
        store.read(RowRef("tablea", "p", "k"))
    assert transport.sends == 1  # azure-core's default policy sent it 4 times or more
    store.close()


def test_azure_table_creation_is_resent_by_the_store(azurite: Azurite) -> None:
    transport = FlakyTransport(failures=2)
    store = azure_store(azurite, transport)
    store.create_tables("tablea")
    assert "tablea" in store.tables()
    assert transport.sends >= 4  # two failures, then both tables and the listing
    store.commit([Increment(RowRef("tablea", "p", "dn"), 1)])
    store.close()


def test_a_callers_own_azure_retries_are_kept(azurite: Azurite) -> None:
    transport = FlakyTransport(failures=0)
    store = AzureTableStore(
        connection_string=azurite.connection_string,
        prefix=f"r{uuid.uuid4().hex[:8]}",
        transport=transport,
        retry_total=2,
        retry_backoff_factor=0.01,
    )
    store.create_tables("tablea")
    transport.failures, transport.sends = 2, 0
    assert store.read(RowRef("tablea", "p", "k")) is None  # the SDK's own two retries absorbed them
    assert transport.sends == 3
    store.close()


def test_a_failed_message_comes_back_after_a_doubling_delay() -> None:
    assert [redelivery_delay(n) for n in range(1, 11)] == pytest.approx(
        [
            0.2,
            0.4,
            0.8,
            1.6,
            3.2,
            6.4,
            12.8,
            25.6,
            30.0,
            30.0,
        ]
    )


def test_botocore_checks_every_request_in_the_suite_and_none_by_default() -> None:
    """Every request idemflow builds is checked against the service model here (the suite sets
    IDEMFLOW_VALIDATE_REQUESTS before idemflow's stores are imported); users' clients skip it."""
    from idemflow.stores._dynamodb_calls import CONFIG, client_config

    assert CONFIG.parameter_validation is True
    assert client_config(validate=False).parameter_validation is False
