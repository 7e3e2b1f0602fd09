"""idemflow's entity group transaction wire format against bodies recorded from Azurite.

The request idemflow encodes must stay the one Azurite accepted (``REQUEST``); the answers it
parses are Azurite's own (:mod:`tests.support.azure_egt_recorded`): which operation failed, with which
code, is what a commit's conflict resolution branches on. The Azure store tests and the
conformance suite run the same code against a live Azurite.
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.pipeline.transport import HttpTransport
from azure.data.tables import TableErrorCode, TableTransactionError, UpdateMode
from hypothesis import given
from hypothesis import strategies as st

from idemflow.errors import LimitExceededError
from idemflow.stores import _azure_egt as egt
from idemflow.stores._azure_clients import BatchTableClient, _answers, transaction_error
from idemflow.stores._azure_entity import MAX_BATCH_BYTES
from tests.support import azure_egt_recorded as recorded

ENDPOINT = "http://127.0.0.1:10002/devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def encoded(operations: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> egt.Request:
    return egt.encode(ENDPOINT, "rec", operations, version="2019-02-02", batch_id="b1", changeset_id="c1")


def test_the_request_is_the_one_azurite_accepted() -> None:
    request = encoded(
        [
            (
                "create",
                {"PartitionKey": "p", "RowKey": "a'b é", "v0": b"\x00hi", "vn": 1, "expires_at": 12.5},
                {},
            ),
            ("upsert", {"PartitionKey": "p", "RowKey": "u", "tomb": True}, {"mode": UpdateMode.REPLACE}),
            (
                "delete",
                {"PartitionKey": "p", "RowKey": "c"},
                {"etag": recorded.ETAG, "match_condition": MatchConditions.IfNotModified},
            ),
        ]
    )
    assert request.method == "POST" and request.url == f"{ENDPOINT}/$batch"
    assert request.headers["Content-Type"] == "multipart/mixed; boundary=batch_b1"
    assert request.body == recorded.REQUEST


def test_the_answer_of_a_committed_batch_gives_each_operation_its_etag() -> None:
    parts = egt.parse(*recorded.COMMITTED)
    assert [part.status for part in parts] == [204, 204, 204]
    found = egt.outcome(parts, 3)
    assert isinstance(found, list)
    assert found[0] == "W/\"datetime'2026-11-27T12%3A21%3A23.1575149Z'\""
    assert found[1] == "W/\"datetime'2026-11-27T12%3A21%3A23.1575159Z'\""
    assert found[2] is None  # a delete leaves no version


@pytest.mark.parametrize(
    ("answer", "index", "status", "code"),
    [
        (recorded.ENTITY_EXISTS_AT_1, 1, 409, "EntityAlreadyExists"),
        (recorded.CONDITION_FAILED_AT_2, 2, 412, "UpdateConditionNotSatisfied"),
        (recorded.NOT_FOUND_AT_0, 0, 404, "ResourceNotFound"),
        (recorded.TABLE_NOT_FOUND, 0, 404, "TableNotFound"),
    ],
)
def test_a_refused_batch_names_the_failing_operation_and_its_code(
    answer: tuple[str, bytes], index: int, status: int, code: str
) -> None:
    # Azurite's Content-ID is one past the index; the message's "N:" prefix is what Azure
    # documents and what the SDK reads.
    found = egt.outcome(egt.parse(*answer), 3)
    assert isinstance(found, egt.Failure)
    assert (found.index, found.status, found.code) == (index, status, code)
    error = transaction_error(found)
    assert isinstance(error, TableTransactionError)
    assert (error.index, error.status_code) == (index, status)
    assert getattr(error, "error_code") == TableErrorCode(code)  # noqa: B009 (set at run time)


def test_the_client_answers_as_the_sdk_does() -> None:
    content_type, body = recorded.COMMITTED
    response = SimpleNamespace(status_code=202, headers={"Content-Type": content_type})
    assert _answers(response, body, 3) == [
        {"etag": "W/\"datetime'2026-11-27T12%3A21%3A23.1575149Z'\""},
        {"etag": "W/\"datetime'2026-11-27T12%3A21%3A23.1575159Z'\""},
        {},
    ]
    content_type, body = recorded.ENTITY_EXISTS_AT_1
    refused = SimpleNamespace(status_code=202, headers={"Content-Type": content_type})
    with pytest.raises(TableTransactionError) as caught:
        _answers(refused, body, 2)
    assert caught.value.index == 1


def test_an_answer_missing_operations_is_not_taken_for_success() -> None:
    with pytest.raises(ValueError, match="2 responses for 3 operations"):
        egt.outcome(egt.parse(*recorded.COMMITTED)[:2], 3)


def test_keys_are_quoted_as_odata_then_percent_encoded() -> None:
    request = encoded([("upsert", {"PartitionKey": "it's", "RowKey": "a b/é"}, {"mode": UpdateMode.MERGE})])
    assert (
        b"PATCH http://127.0.0.1:10002/devstoreaccount1/rec(PartitionKey='it%27%27s',RowKey='a%20b%2F%C3%A9')"
        in (request.body)
    )
    assert b"If-Match" not in request.body  # an upsert has no condition


@pytest.mark.parametrize(
    ("options", "header"),
    [
        (
            {"mode": UpdateMode.REPLACE, "etag": "abc", "match_condition": MatchConditions.IfNotModified},
            'If-Match: "abc"',
        ),
        (
            {
                "mode": UpdateMode.REPLACE,
                "etag": recorded.ETAG,
                "match_condition": MatchConditions.IfNotModified,
            },
            f"If-Match: {recorded.ETAG}",
        ),
        ({"mode": UpdateMode.MERGE}, "If-Match: *"),
    ],
)
def test_an_update_carries_its_condition(options: dict[str, Any], header: str) -> None:
    request = encoded([("update", {"PartitionKey": "p", "RowKey": "r"}, options)])
    assert f"{header}\r\n".encode() in request.body


def test_a_batch_over_azures_limits_is_refused_before_it_is_encoded() -> None:
    row = {"PartitionKey": "p", "RowKey": "r"}
    with pytest.raises(LimitExceededError, match="101 operations"):
        encoded([("upsert", {**row, "RowKey": str(i)}, {}) for i in range(101)])
    big = b"x" * 60_000  # base64 makes 80,000 bytes a property; 53 of them pass 4 MiB
    with pytest.raises(LimitExceededError, match="bytes"):
        encoded([("upsert", {**row, "RowKey": str(i), "v0": big}, {}) for i in range(53)])
    assert len(encoded([("upsert", {**row, "RowKey": str(i), "v0": big}, {}) for i in range(50)]).body) < (
        MAX_BATCH_BYTES
    )


@pytest.mark.parametrize(
    ("operations", "error"),
    [
        (
            [
                ("upsert", {"PartitionKey": "p", "RowKey": "a"}, {}),
                ("upsert", {"PartitionKey": "q", "RowKey": "b"}, {}),
            ],
            ValueError,
        ),
        ([("merge", {"PartitionKey": "p", "RowKey": "a"}, {})], ValueError),
        (
            [
                (
                    "update",
                    {"PartitionKey": "p", "RowKey": "a"},
                    {"match_condition": MatchConditions.IfNotModified},
                )
            ],
            ValueError,
        ),
        ([("upsert", {"PartitionKey": "p", "RowKey": "a", "n": 2**40}, {})], TypeError),
        ([("upsert", {"PartitionKey": "p", "RowKey": "a", "x": object()}, {})], TypeError),
    ],
)
def test_what_azure_cannot_take_is_refused(operations: list[Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        encoded(operations)


class NoNetwork(HttpTransport):
    """A transport that records what reaches it and sends nothing."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, request: Any, **kwargs: Any) -> Any:
        self.sent.append(request)
        raise AssertionError("a refused batch reached the transport")

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> NoNetwork:
        return self

    def __exit__(self, *args: Any) -> None:
        pass


def test_the_client_refuses_a_batch_over_the_limits_without_sending_it() -> None:
    transport = NoNetwork()
    client = BatchTableClient(
        ENDPOINT,
        table_name="rec",
        credential=AzureNamedKeyCredential("devstoreaccount1", KEY),
        transport=transport,
    )
    operations: list[Any] = [("upsert", {"PartitionKey": "p", "RowKey": str(i)}) for i in range(101)]
    with pytest.raises(LimitExceededError):
        client.submit_transaction(operations)
    assert transport.sent == []


def test_a_lone_write_is_the_request_a_batch_part_holds() -> None:
    create = egt.single(
        ENDPOINT, "rec", ("create", {"PartitionKey": "p", "RowKey": "r", "n": 1}, {}), version="v"
    )
    assert (create.method, create.url) == ("POST", f"{ENDPOINT}/rec")
    assert create.headers["Prefer"] == "return-no-content" and create.headers["x-ms-version"] == "v"
    assert create.body == b'{"PartitionKey": "p", "RowKey": "r", "n": 1}'
    options = {"mode": UpdateMode.REPLACE, "etag": "e", "match_condition": MatchConditions.IfNotModified}
    update = egt.single(
        ENDPOINT, "rec", ("update", {"PartitionKey": "p", "RowKey": "r"}, options), version="v"
    )
    assert (update.method, update.headers["If-Match"]) == ("PUT", '"e"')
    assert update.url == f"{ENDPOINT}/rec(PartitionKey='p',RowKey='r')"


@given(
    st.dictionaries(
        st.text(st.characters(codec="ascii", categories=["L"]), min_size=1, max_size=8),
        st.one_of(
            st.binary(max_size=40),
            st.floats(),
            st.booleans(),
            st.text(max_size=20),
            st.integers(-(2**31), 2**31 - 1),
        ),
        max_size=6,
    )
)
def test_entity_json_carries_every_value_as_the_service_reads_it(entity: dict[str, Any]) -> None:
    text = egt.entity_json(entity)
    assert text.isascii()  # the batch size estimate counts non-ASCII as escapes
    wire = json.loads(text)
    for name, value in entity.items():
        if isinstance(value, bytes):
            assert wire[name + "@odata.type"] == "Edm.Binary" and base64.b64decode(wire[name]) == value
        elif isinstance(value, float):
            assert wire[name + "@odata.type"] == "Edm.Double"
            assert float(wire[name]) == value or value != value
        else:
            assert wire[name] == value and name + "@odata.type" not in wire


def test_a_cosmos_db_endpoint_keeps_the_sdks_own_batch() -> None:
    # Cosmos DB's Table API takes a merge as POST + X-HTTP-Method: MERGE, which the SDK writes.
    transport = NoNetwork()
    client = BatchTableClient(
        "https://acct.table.cosmos.azure.com",
        table_name="rec",
        credential=AzureNamedKeyCredential("acct", KEY),
        transport=transport,
    )
    options = {"mode": UpdateMode.MERGE, "etag": "e", "match_condition": MatchConditions.IfNotModified}
    with pytest.raises(AssertionError, match="reached the transport"):
        client.submit_transaction([("update", {"PartitionKey": "p", "RowKey": "r"}, options)])
    body = transport.sent[0].body
    assert b"X-HTTP-Method: MERGE" in body and b"PATCH " not in body
