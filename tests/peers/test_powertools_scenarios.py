"""Powertools idempotency's behaviours, as a Powertools user expects them of idemflow.

Source: ``aws-powertools/powertools-lambda-python``, ``tests/functional/idempotency/``
(``_boto3/test_idempotency.py`` and ``_pydantic/test_idempotency_with_pydantic.py``,
abbreviated ``boto3/`` and ``pydantic/`` in the ``# peer:`` comments). Their
``@idempotent(persistence_store=..., config=IdempotencyConfig(...))`` becomes
``@idempotent_function(store, key=..., fingerprint=...)`` here (``@idempotent`` for a
handler whose writes are steps), as ``docs/migrating.md`` maps them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from idemflow import (
    BackendError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidValueError,
    Tx,
    atomic,
    idempotent,
    idempotent_function,
)
from idemflow.cli import main as idemflow_cli
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import Store
from idemflow.testing import Fault, FaultyStore, SimulatedCrash, data_rows
from idemflow.testing.servers import Moto


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "powertools.sqlite3")


class LambdaContext:
    """What Lambda passes as ``context``: not JSON, and new on every invocation (retries too)."""

    def __init__(self, request_id: str) -> None:
        self.aws_request_id = request_id
        self.function_name = "charge"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


API_EVENT = {
    "requestContext": {"requestId": "req-1", "accountId": "123456789012", "authorizer": {"sub": "ann"}},
    "body": '{"order_id": "o-1", "amount": 30}',
    "headers": {"X-Trace": "a"},
    "id": "evt-1",
}


# --- the first call and its duplicates ------------------------------------------------------


def test_a_first_call_runs_the_function_and_answers_its_result(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_first_execution
    calls: list[str] = []

    @idempotent_function(store, key="event.id")
    def charge(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(event["id"])
        return {"statusCode": 200, "body": "charged"}

    assert charge(dict(API_EVENT)) == {"statusCode": 200, "body": "charged"}
    assert calls == ["evt-1"]


def test_a_completed_key_answers_the_saved_response_without_calling_again(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_first_execution_cached
    calls: list[int] = []

    @idempotent_function(store, key="event.id")
    def charge(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200, "receipt": f"r-{len(calls)}"}

    first = charge(dict(API_EVENT))
    assert [charge(dict(API_EVENT)) for _ in range(3)] == [first] * 3
    assert calls == [1]


def test_a_handler_whose_writes_are_steps_changes_data_once(store: Store) -> None:
    """Powertools protects the whole call; idemflow's ``@idempotent`` makes each write exactly-once."""

    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed
    def charge_amount(amount: int) -> Any:
        def body(tx: Tx) -> int:
            balance = int(tx.get("balance", 100)) - amount
            tx.put("balance", balance)
            return balance

        return body

    @idempotent(store, key="event.id")
    def pay(event: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
        left = yield atomic("accounts", "ann", charge_amount(30))
        return {"left": left}

    assert pay({"id": "p-1"}) == pay({"id": "p-1"}) == {"left": 70}
    assert data_rows(store, "accounts") == {("accounts", "ann", "balance"): 70}


def test_two_decorated_functions_keep_their_own_records_for_the_same_data(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function_duplicates
    # peer: boto3/test_idempotency.py::test_idempotent_function_and_lambda_handler
    @idempotent_function(store, key="data.id")
    def one(data: dict[str, Any]) -> str:
        return "one"

    @idempotent_function(store, key="data.id")
    def two(data: dict[str, Any]) -> str:
        return "two"

    assert one({"id": "d"}) == "one"
    assert two({"id": "d"}) == "two"  # not one's saved answer
    assert one({"id": "d"}) == "one"


def test_a_function_answering_none_replays_none(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function_serialization_no_response
    calls: list[int] = []

    @idempotent_function(store, key="record.id")
    def record_handler(record: dict[str, Any]) -> None:
        calls.append(1)

    assert record_handler({"id": "r"}) is None
    assert record_handler({"id": "r"}) is None
    assert calls == [1]


def test_the_same_data_in_another_key_order_is_a_duplicate(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_data_sorting
    calls: list[int] = []

    @idempotent_function(store, key="payload.id")
    def dummy(payload: dict[str, Any]) -> dict[str, str]:
        calls.append(1)
        return {"message": "hello"}

    assert dummy({"id": "x", "data": "m1", "more_data": "m2"}) == {"message": "hello"}
    assert dummy({"more_data": "m2", "data": "m1", "id": "x"}) == {"message": "hello"}
    assert calls == [1]


def test_a_function_that_mutates_its_event_is_still_keyed_on_the_event_as_sent(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_first_execution_event_mutation
    calls: list[int] = []

    @idempotent_function(store, key="event.body")
    def handler(event: dict[str, Any]) -> str:
        calls.append(1)
        event.pop("body")  # the very field the key comes from
        return "done"

    assert handler(dict(API_EVENT)) == "done"
    assert handler(dict(API_EVENT)) == "done"  # a duplicate of the event as sent
    assert calls == [1]


# --- keys -------------------------------------------------------------------------------------


def test_the_key_is_a_jmespath_into_the_data_argument(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_first_execution (event_key_jmespath)
    calls: list[str] = []

    @idempotent_function(store, key="event.requestContext.requestId")
    def handler(event: dict[str, Any]) -> str:
        calls.append(event["id"])
        return event["id"]

    assert handler(event=dict(API_EVENT)) == "evt-1"
    assert handler(event=dict(API_EVENT)) == "evt-1"
    assert handler(event={**API_EVENT, "requestContext": {"requestId": "req-2"}}) == "evt-1"
    assert calls == ["evt-1", "evt-1"]


def test_without_payload_validation_a_changed_payload_under_a_used_key_is_refused(store: Store) -> None:
    """Powertools validates no payload unless ``payload_validation_jmespath`` is set: the same key
    with another payload gets the saved answer. idemflow compares the whole input by default
    (``IdempotencyKeyReuseError``); ``fingerprint=`` set to the key itself is Powertools' default."""

    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed (no validation configured)
    @idempotent_function(store, key="event.requestContext.requestId")
    def strict(event: dict[str, Any]) -> str:
        return event["id"]

    assert strict(dict(API_EVENT)) == "evt-1"
    with pytest.raises(IdempotencyKeyReuseError):
        strict({**API_EVENT, "id": "evt-2"})

    @idempotent_function(
        store, key="event.requestContext.requestId", fingerprint="event.requestContext.requestId"
    )
    def lenient(event: dict[str, Any]) -> str:
        return event["id"]

    assert lenient(dict(API_EVENT)) == "evt-1"
    assert lenient({**API_EVENT, "id": "evt-2"}) == "evt-1"


def test_the_data_argument_may_sit_among_other_positional_and_keyword_arguments(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function_arbitrary_args_kwargs
    calls: list[int] = []

    @idempotent_function(store, key="record.id", fingerprint="record")
    def record_handler(arg_one: str, arg_two: str, record: dict[str, Any], is_record: bool) -> dict[str, str]:
        calls.append(1)
        return {"message": "Foo"}

    assert record_handler("foo", "bar", record={"id": "r"}, is_record=True) == {"message": "Foo"}
    assert record_handler("baz", "qux", record={"id": "r"}, is_record=False) == {"message": "Foo"}
    assert calls == [1]


def test_the_data_argument_passed_positionally_is_the_same_request(store: Store) -> None:
    """Powertools raises ``RuntimeError`` when the data argument is passed positionally;
    idemflow binds arguments to the signature, so ``f(x)`` and ``f(record=x)`` are one request."""
    # peer: boto3/test_idempotency.py::test_idempotent_function_arg_instead_of_kwarg
    calls: list[int] = []

    @idempotent_function(store, key="record.id")
    def record_handler(record: dict[str, Any]) -> dict[str, str]:
        calls.append(1)
        return {"message": "Foo"}

    assert record_handler({"id": "r"}) == record_handler(record={"id": "r"}) == {"message": "Foo"}
    assert calls == [1]


def test_a_key_path_naming_no_parameter_finds_no_key(store: Store) -> None:
    """Powertools raises ``RuntimeError("Unable to extract 'payload'")``; idemflow's path finds
    nothing, so the call has no key and is refused before the function runs."""
    # peer: boto3/test_idempotency.py::test_idempotent_function_invalid_data_kwarg
    calls: list[int] = []

    @idempotent_function(store, key="payload.id")
    def record_handler(record: dict[str, Any]) -> str:
        calls.append(1)
        return "Foo"

    with pytest.raises(InvalidInputError, match="no key"):
        record_handler(record={"id": "r"})
    assert calls == []


def test_a_call_without_a_key_is_refused_by_default(store: Store) -> None:
    """idemflow's default is Powertools' ``raise_on_no_idempotency_key=True``: a call without
    a key would silently lose its protection, so it is refused unless ``key_required=False``."""
    # peer: boto3/test_idempotency.py::test_handler_raise_idempotency_key_error
    # peer: boto3/test_idempotency.py::test_raise_on_no_idempotency_key
    calls: list[int] = []

    @idempotent_function(store, key="event.idemKey")
    def handler(event: dict[str, Any]) -> str:
        calls.append(1)
        raise ValueError("Should not be raised")

    with pytest.raises(InvalidInputError, match="no key"):
        handler({})
    assert calls == []


@pytest.mark.parametrize("data", [None, 0, False])
def test_falsy_data_without_the_key_field_is_refused(store: Store, data: object) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function_falsy_values_with_raise_on_no_idempotency_key
    @idempotent_function(store, key="record.idemKey")
    def record_handler(record: object) -> str:
        raise AssertionError("must not run")

    with pytest.raises(InvalidInputError, match="no key"):
        record_handler(record=data)


def test_falsy_keys_that_are_keys_are_used(store: Store) -> None:
    """Powertools hashes any data that is not "missing"; idemflow keys are ``str`` or ``int``:
    ``0`` is the key ``"0"``; ``False`` is refused (a ``bool`` key is almost always a bug)."""
    # peer: boto3/test_idempotency.py::test_idempotent_function_falsy_values
    # peer: boto3/test_idempotency.py::test_is_missing_idempotency_key
    calls: list[object] = []

    @idempotent_function(store, key=lambda record: record)
    def record_handler(record: object) -> dict[str, str]:
        calls.append(record)
        return {"message": "Foo"}

    assert record_handler(0) == record_handler(0) == {"message": "Foo"}
    assert calls == [0]
    with pytest.raises(InvalidInputError, match="a str, an int or a UUID"):
        record_handler(False)
    assert calls == [0]


def test_without_raise_on_missing_key_a_keyless_call_runs_undeduplicated_with_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # peer: boto3/test_idempotency.py::test_default_no_raise_on_missing_idempotency_key
    calls: list[int] = []

    @idempotent_function(store, key="event.body", key_required=False)
    def handler(event: dict[str, Any]) -> int:
        calls.append(1)
        return len(calls)

    with caplog.at_level("WARNING", logger="idemflow.handlers"):
        assert handler({}) == 1
        assert handler({}) == 2  # no key: no deduplication
    assert "no idempotency key: running without deduplication" in caplog.text
    assert handler({"body": "b"}) == handler({"body": "b"}) == 3


def test_a_compound_key_path_is_refused_and_a_key_function_joins_the_parts(store: Store) -> None:
    """Powertools hashes a list-valued ``event_key_jmespath``; an idemflow key is one ``str`` or
    ``int`` (it is the request id an operator looks up), so a compound key is a function."""
    # peer: boto3/test_idempotency.py::test_idempotency_payload_validation_with_tampering_nested_object
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_compound_already_completed
    with pytest.raises(InvalidInputError, match="a str, an int or a UUID"):
        idempotent_function(store, key="refund.[refund_id, customer_id]")(lambda refund: "r")(
            {"refund_id": "r-1", "customer_id": "c-1"}
        )
    calls: list[int] = []

    @idempotent_function(store, key=lambda refund: f"{refund['refund_id']}#{refund['customer_id']}")
    def refund_handler(refund: dict[str, Any]) -> str:
        calls.append(1)
        return "refunded"

    assert refund_handler({"refund_id": "r-1", "customer_id": "c-1"}) == "refunded"
    assert refund_handler({"refund_id": "r-1", "customer_id": "c-1"}) == "refunded"
    assert refund_handler({"refund_id": "r-1", "customer_id": "c-2"}) == "refunded"
    assert calls == [1, 1]


def test_a_key_path_may_decode_a_json_body(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_jmespath_with_powertools_json
    @idempotent_function(store, key="event.powertools_json(body).order_id")
    def handler(event: dict[str, Any]) -> str:
        return "ok"

    assert handler(dict(API_EVENT)) == "ok"


# --- payload validation -----------------------------------------------------------------------


def test_a_duplicate_differing_outside_the_validated_part_gets_the_saved_answer(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_first_execution_with_validation
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_with_validator_util
    calls: list[int] = []

    @idempotent_function(store, key="event.id", fingerprint="event.requestContext")
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200}

    assert handler(dict(API_EVENT)) == {"statusCode": 200}
    assert handler({**API_EVENT, "headers": {"X-Trace": "b"}}) == {"statusCode": 200}
    assert calls == [1]


def test_a_duplicate_with_a_tampered_validated_field_is_refused(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed_with_validation_bad_payload
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed_with_validation_bad_payload_from_local_cache  # noqa: E501
    calls: list[int] = []

    @idempotent_function(store, key="event.id", fingerprint="event.requestContext")
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200}

    handler(dict(API_EVENT))
    tampered = {**API_EVENT, "requestContext": {**API_EVENT["requestContext"], "accountId": "1234567890121"}}
    with pytest.raises(IdempotencyKeyReuseError):
        handler(tampered)
    assert calls == [1]


def test_tampering_deep_inside_the_validated_part_is_refused(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotency_payload_validation_with_tampering_nested_object
    @idempotent_function(store, key="txn.refund_id", fingerprint="txn.details")
    def refund(txn: dict[str, Any]) -> str:
        return "refunded"

    txn = {"refund_id": "r-1", "details": [{"company_name": "Parker", "currency": "Turkish Lira"}]}
    assert refund(txn) == "refunded"
    with pytest.raises(IdempotencyKeyReuseError):
        refund({**txn, "details": [{"company_name": "Parker", "currency": "Euro"}]})


def test_a_refused_tampered_duplicate_leaves_the_saved_answer_intact(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotency_cache_with_payload_tampering
    calls: list[int] = []

    @idempotent_function(store, key="txn.refund_id", fingerprint="txn.amount")
    def refund(txn: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"refunded": txn["amount"]}

    txn = {"refund_id": "r-1", "amount": 100}
    assert refund(txn) == {"refunded": 100}
    with pytest.raises(IdempotencyKeyReuseError):
        refund({**txn, "amount": 10_000})
    assert refund(txn) == {"refunded": 100}
    assert calls == [1]


# --- failures, races, expiry ------------------------------------------------------------------


def test_a_function_that_raises_saves_nothing_and_its_retry_runs_again(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_exception
    calls: list[int] = []

    @idempotent_function(store, key="event.id")
    def handler(event: dict[str, Any]) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Something went wrong!")
        return "second time lucky"

    with pytest.raises(RuntimeError, match="Something went wrong!"):  # the function's own error
        handler(dict(API_EVENT))
    assert handler(dict(API_EVENT)) == "second time lucky"
    assert handler(dict(API_EVENT)) == "second time lucky"
    assert calls == [1, 1]


def test_a_concurrent_duplicate_is_not_refused_and_both_get_one_answer(store: Store) -> None:
    """Powertools raises ``IdempotencyAlreadyInProgressError`` for a duplicate arriving while
    the first call runs. idemflow takes no lock (docs/migrating.md): the racing duplicate runs
    too, the first result stored wins, and both callers, like every later one, get it."""
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_in_progress
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_in_progress_with_cache
    inside, release = threading.Event(), threading.Event()
    calls: list[str] = []

    @idempotent_function(store, key="event.id")
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            inside.set()
            release.wait(10)
        return {"answered_by": threading.current_thread().name}

    answers: dict[str, Any] = {}
    first = threading.Thread(target=lambda: answers.update(first=handler(dict(API_EVENT))), name="first")
    first.start()
    assert inside.wait(10)
    answers["second"] = handler(dict(API_EVENT))  # while the first is still in its function
    release.set()
    first.join(10)
    assert answers["first"] == answers["second"] == {"answered_by": "MainThread"}
    assert handler(dict(API_EVENT)) == {"answered_by": "MainThread"}
    assert len(calls) == 2


def test_a_call_that_died_in_progress_never_blocks_its_retry(store: Store) -> None:
    """Powertools' retry waits for the in-progress record to expire (the Lambda's remaining time);
    idemflow keeps no in-progress record: the retry finishes at once, its steps exactly once."""
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_expires_in_progress_after_expire
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_expires_in_progress_before_expire
    crashing = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)

    @idempotent(crashing, key="event.id")
    def handler(event: dict[str, Any]) -> Generator[Any, Any, str]:
        yield atomic("accounts", "ann", lambda tx: tx.increment("charged", 30))
        yield atomic("ledger", "ann", lambda tx: tx.increment("entries"))
        return "charged"

    with pytest.raises(SimulatedCrash):
        handler(dict(API_EVENT))  # died right after its first write
    assert handler(dict(API_EVENT)) == "charged"
    assert data_rows(store, "accounts") == {("accounts", "ann", "charged"): 30}
    assert data_rows(store, "ledger") == {("ledger", "ann", "entries"): 1}


def test_an_expired_record_lets_the_key_run_again(tmp_path: Path) -> None:
    """Powertools' ``expires_after_seconds``: idemflow's ``RetryPolicy(retention=)`` is DynamoDB's TTL;
    on SQLite and Azure ``idemflow gc --older-than`` collects finished requests."""
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_expired
    path = tmp_path / "expiry.sqlite3"
    store = SqliteStore(path)
    calls: list[int] = []

    # No answer cache: collecting a request ahead of its retention is what one cannot see.
    @idempotent_function(store, key="event.id", cache=None)
    def handler(event: dict[str, Any]) -> int:
        calls.append(1)
        return len(calls)

    assert handler(dict(API_EVENT)) == handler(dict(API_EVENT)) == 1
    assert idemflow_cli(["gc", "--store", f"sqlite:{path}", "--older-than", "0s"]) == 0
    assert handler(dict(API_EVENT)) == 2  # expired: a new request
    assert handler(dict(API_EVENT)) == 2
    store.close()


def test_a_result_that_cannot_be_saved_is_refused_and_nothing_is_kept(store: Store) -> None:
    """Powertools refuses at decoration a serializer without a model; idemflow refuses a result
    that is not JSON when it is stored, and keeps nothing, so the retry runs again."""
    # peer: boto3/test_idempotency.py::test_idempotent_function_serialization_dataclass_failure_no_return_type
    # peer: pydantic/test_idempotency_with_pydantic.py::test_idempotent_function_serialization_pydantic_failure_no_return_type  # noqa: E501
    calls: list[int] = []

    @idempotent_function(store, key="payment.id")
    def collect(payment: dict[str, Any]) -> object:
        calls.append(1)
        return {"at": object()} if len(calls) == 1 else {"at": "now"}

    with pytest.raises(InvalidValueError, match="not JSON"):
        collect({"id": "p"})
    assert collect({"id": "p"}) == {"at": "now"}
    assert calls == [1, 1]


# --- response hook ----------------------------------------------------------------------------


def test_the_response_hook_is_not_called_on_a_first_execution(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_responsehook_lambda_first_execution
    seen: list[Any] = []

    @idempotent_function(store, key="event.id", on_replay=lambda answer: seen.append(answer) or answer)
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        return {"statusCode": 200}

    assert handler(dict(API_EVENT)) == {"statusCode": 200}
    assert seen == []


def test_the_response_hook_changes_a_replayed_answer(store: Store) -> None:
    """Powertools' hook also gets the data record (its expiry); ``on_replay`` gets the answer only."""

    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed_response_hook_is_called
    def mark(response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "idempotent_response": True}

    @idempotent_function(store, key="event.id", on_replay=mark)
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        return {"statusCode": 200}

    assert handler(dict(API_EVENT)) == {"statusCode": 200}
    assert handler(dict(API_EVENT)) == {"statusCode": 200, "idempotent_response": True}


def test_the_response_hook_is_called_with_a_saved_none(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed_response_hook_is_called_with_none  # noqa: E501
    @idempotent_function(store, key="event.id", on_replay=lambda response: {"response": response})
    def handler(event: dict[str, Any]) -> None:
        return None

    assert handler(dict(API_EVENT)) is None
    assert handler(dict(API_EVENT)) == {"response": None}


# --- Lambda handlers ----------------------------------------------------------------------------


def test_a_lambda_handler_passes_its_event_to_an_idempotent_function(store: Store) -> None:
    """Powertools' ``@idempotent`` wraps ``handler(event, context)`` and hashes the event only.
    In idemflow every argument of a decorated function is stored with the request, so the
    Lambda context (not JSON, new on each retry) stays outside: the handler calls a decorated
    function of the event."""
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_event_source
    calls: list[int] = []

    @idempotent_function(store, key="event.requestContext.requestId")
    def handle(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200, "body": "ok"}

    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return dict(handle(event))

    assert lambda_handler(dict(API_EVENT), LambdaContext("lambda-1")) == {"statusCode": 200, "body": "ok"}
    assert lambda_handler(dict(API_EVENT), LambdaContext("lambda-2")) == {"statusCode": 200, "body": "ok"}
    assert calls == [1]


def test_a_lambda_handler_decorated_as_the_migration_table_says(store: Store) -> None:
    """The Lambda context is not JSON and differs per retry: ``fingerprint="event"`` compares the
    event only, so the context need not be JSON (docs/migrating.md)."""
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_already_completed
    calls: list[int] = []

    @idempotent_function(store, key="event.requestContext.requestId", fingerprint="event")
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200}

    assert lambda_handler(dict(API_EVENT), LambdaContext("lambda-1")) == {"statusCode": 200}
    assert lambda_handler(dict(API_EVENT), LambdaContext("lambda-2")) == {"statusCode": 200}
    assert calls == [1]


def test_without_fingerprint_a_lambda_context_is_refused_before_the_handler_runs(store: Store) -> None:
    """idemflow: the whole input is compared by default, and a context object is not JSON."""
    calls: list[int] = []

    @idempotent_function(store, key="event.requestContext.requestId")
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200}

    with pytest.raises(InvalidValueError, match="LambdaContext"):
        lambda_handler(dict(API_EVENT), LambdaContext("lambda-1"))
    assert calls == []


# --- dataclass and pydantic arguments and results (codecs) ----------------------------------


@dataclasses.dataclass
class PaymentInput:
    customer_id: str
    transaction_id: str


@dataclasses.dataclass
class PaymentOutput:
    customer_id: str
    transaction_id: str


class PaymentModel(BaseModel):  # at module level: a stored model is found by its module and name
    customer_id: str
    transaction_id: str


class PaymentResultModel(BaseModel):
    customer_id: str
    transaction_id: str


def test_a_dataclass_argument_is_keyed_by_a_path_into_its_fields(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function_dataclass_with_jmespath
    # peer: boto3/test_idempotency.py::test_idempotent_function_dataclasses
    calls: list[int] = []

    @idempotent_function(store, key="payment.transaction_id")
    def collect_payment(payment: PaymentInput) -> str:
        calls.append(1)
        return payment.transaction_id

    payment = PaymentInput(customer_id="fake", transaction_id="fake-id")
    assert collect_payment(payment=payment) == collect_payment(payment) == "fake-id"
    assert calls == [1]


def test_a_dataclass_result_is_replayed_as_the_dataclass(store: Store) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_function_serialization_dataclass
    @idempotent_function(store, key=lambda payment: payment.transaction_id)
    def collect_payment(payment: PaymentInput) -> PaymentOutput:
        return PaymentOutput(**dataclasses.asdict(payment))

    payment = PaymentInput(customer_id="fake", transaction_id="fake-id")
    first = collect_payment(payment=payment)
    second = collect_payment(payment=payment)
    assert isinstance(first, PaymentOutput) and isinstance(second, PaymentOutput)
    assert first == second == PaymentOutput("fake", "fake-id")


def test_a_pydantic_argument_is_keyed_by_a_path_into_its_fields(store: Store) -> None:
    # peer: pydantic/test_idempotency_with_pydantic.py::test_idempotent_function_pydantic_with_jmespath
    # peer: pydantic/test_idempotency_with_pydantic.py::test_idempotent_function_pydantic
    calls: list[int] = []

    @idempotent_function(store, key="payment.transaction_id")
    def collect_payment(payment: PaymentModel) -> str:
        calls.append(1)
        return payment.transaction_id

    payment = PaymentModel(customer_id="fake", transaction_id="fake-id")
    assert collect_payment(payment=payment) == collect_payment(payment) == "fake-id"
    assert calls == [1]


def test_a_pydantic_result_is_replayed_as_the_model(store: Store) -> None:
    # peer: pydantic/test_idempotency_with_pydantic.py::test_idempotent_function_serialization_pydantic
    @idempotent_function(store, key=lambda payment: payment.transaction_id)
    def collect_payment(payment: PaymentModel) -> PaymentResultModel:
        return PaymentResultModel(**payment.model_dump())

    payment = PaymentModel(customer_id="fake", transaction_id="fake-id")
    first = collect_payment(payment=payment)
    second = collect_payment(payment=payment)
    assert isinstance(first, PaymentResultModel) and isinstance(second, PaymentResultModel)
    assert first == second


# --- DynamoDB (moto server) -----------------------------------------------------------------


@pytest.mark.cloud
@pytest.mark.parametrize(
    ("cache", "expected"), [(True, []), (False, ["GetItem"])], ids=["cached", "no cache"]
)
def test_on_dynamodb_a_duplicate_costs_one_read_and_no_call(
    moto: Moto, cache: bool, expected: list[str]
) -> None:
    """docs/migrating.md's table: a duplicate of an ``@idempotent_function`` call is one ``GetItem``,
    or nothing in the process that answered it (its answer cache)."""
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_first_execution_cached
    from idemflow.stores.dynamodb import DynamoDBStore

    store = DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix=f"ptdup{int(cache)}")
    store.create_tables()
    sent: list[str] = []
    store.client.meta.events.register("before-call.dynamodb.*", lambda model, **_: sent.append(model.name))
    calls: list[int] = []
    options: dict[str, Any] = {} if cache else {"cache": None}

    @idempotent_function(store, key="event.id", **options)
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"statusCode": 200}

    assert handler(dict(API_EVENT)) == {"statusCode": 200}
    sent.clear()
    assert handler(dict(API_EVENT)) == {"statusCode": 200}
    store.flush()
    assert sent == expected
    assert calls == [1]
    store.close()


@pytest.mark.cloud
def test_on_dynamodb_a_missing_table_is_a_store_error_and_the_function_never_answers(moto: Moto) -> None:
    # peer: boto3/test_idempotency.py::test_idempotent_lambda_save_inprogress_error
    from idemflow.stores.dynamodb import DynamoDBStore

    store = DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix="ptnotables")
    answered: list[int] = []

    @idempotent_function(store, key="event.id")
    def handler(event: dict[str, Any]) -> dict[str, Any]:
        return {"statusCode": 200}

    with pytest.raises(BackendError):
        answered.append(len(handler(dict(API_EVENT))))
    assert answered == []
    store.close()
