"""``@idempotent`` handlers and workflow inputs: names that never collide, one fingerprint per input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import (
    Idem,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidValueError,
    Tx,
    atomic,
    idempotent,
    idempotent_function,
    run,
    workflow,
)
from idemflow.engine.monad import Call
from idemflow.keys import check_workflow_name
from idemflow.running.handlers import NAME_LIMIT, _derived_name
from idemflow.running.runner import run_status
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import Store
from idemflow.testing import data_rows

LONG = "handle_the_payment_event_of_a_customer_subscription_or_a_one_time_purchase_in_the_billing_service_"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "handlers.sqlite3")


def named(qualname: str, body: Callable[[dict[str, Any]], Generator[Any, Any, str]]) -> Any:
    body.__qualname__ = qualname
    return body


def test_two_handlers_whose_long_names_share_a_prefix_keep_records_of_their_own(store: Store) -> None:
    def one_time(event: dict[str, Any]) -> Generator[Any, Any, str]:
        yield atomic("payments", event["customer"], lambda tx: tx.increment("paid"))
        return "payment fulfilled"

    def subscription(event: dict[str, Any]) -> Generator[Any, Any, str]:
        yield atomic("subscriptions", event["customer"], lambda tx: tx.put("active", True))
        return "subscription activated"

    key = idempotent(store, key=lambda event: event["id"])
    first = key(named(LONG + "one_time", one_time))
    second = key(named(LONG + "subscription", subscription))
    event = {"id": "evt-1", "customer": "ann"}
    assert first(event) == "payment fulfilled"
    assert second(event) == "subscription activated"  # not the other handler's cached answer
    assert data_rows(store, "subscriptions") == {("subscriptions", "ann", "active"): True}


def test_a_long_derived_name_is_a_valid_name_that_keeps_a_hash_of_the_whole() -> None:
    def handler() -> None: ...

    handler.__qualname__ = "Billing.<locals>.handler"
    assert _derived_name(handler) == f"{__name__}.Billing._locals_.handler"  # short: unchanged
    names = set()
    for suffix in ("a", "b", "c"):
        handler.__qualname__ = LONG + suffix
        name = _derived_name(handler)
        assert len(name) == NAME_LIMIT
        assert check_workflow_name(name) == name
        names.add(name)
    assert len(names) == 3


def test_positional_and_keyword_arguments_are_one_input(store: Store) -> None:
    @workflow("greet")
    def greet(name: str, greeting: str = "hello") -> Generator[Any, Any, str]:
        yield atomic("visits", name, lambda tx: tx.increment("n"))
        return f"{greeting}, {name}"

    assert run(greet("ann"), request_id="g-1", store=store) == "hello, ann"
    assert run(greet(name="ann"), request_id="g-1", store=store) == "hello, ann"
    assert run(greet("bob", greeting="hi"), request_id="g-2", store=store) == "hi, bob"
    assert run(greet(name="bob", greeting="hi"), request_id="g-2", store=store) == "hi, bob"
    assert data_rows(store, "visits") == {("visits", "ann", "n"): 1, ("visits", "bob", "n"): 1}
    with pytest.raises(IdempotencyKeyReuseError):
        run(greet("ann", "hi"), request_id="g-1", store=store)  # another input: still refused
    with pytest.raises(TypeError):
        greet("ann", shout=True)  # type: ignore[call-arg]  # refused before anything is written


def test_a_handler_called_with_keywords_is_the_same_request(store: Store) -> None:
    def five(tx: Tx) -> int:
        tx.increment("charged", 5)
        return 5

    @idempotent(store, key=lambda event: event["id"])
    def charge(event: dict[str, Any]) -> Generator[Any, Any, int]:
        total = yield atomic("accounts", event["customer"], five)
        return int(total)

    event = {"id": "evt-9", "customer": "ann"}
    assert charge(event) == 5
    assert charge(event=event) == 5
    assert data_rows(store, "accounts") == {("accounts", "ann", "charged"): 5}


def test_a_duplicate_of_a_request_fingerprinted_as_written_still_matches(store: Store) -> None:
    """0.1.0 fingerprinted ``f(name="ann")`` as written (no positional arguments); a duplicate
    sent after the upgrade binds it to ``f("ann")`` and must still be recognised."""

    @workflow("greet")
    def greet(name: str) -> Generator[Any, Any, str]:
        yield atomic("visits", name, lambda tx: tx.increment("n"))
        return f"hello, {name}"

    as_written: Idem[str] = Idem(Call("greet", greet.function, (), {"name": "ann"}, 1))
    assert run(as_written, request_id="old", store=store) == "hello, ann"
    assert run(greet(name="ann"), request_id="old", store=store) == "hello, ann"
    assert data_rows(store, "visits") == {("visits", "ann", "n"): 1}


@pytest.mark.parametrize(("key", "request_id"), [(42, "42"), ("o-42", "o-42")])
def test_a_handler_key_may_be_a_str_or_an_int(store: Store, key: object, request_id: str) -> None:
    @idempotent(store, key=lambda order: order["key"], name="place")
    def place(order: dict[str, Any]) -> Generator[Any, Any, str]:
        yield atomic("orders", "o", lambda tx: tx.increment("placed"))
        return "placed"

    assert place({"key": key}) == place({"key": key}) == "placed"
    assert data_rows(store, "orders") == {("orders", "o", "placed"): 1}
    recorded = run_status(store, "place", request_id)
    assert recorded is not None and recorded.result == "placed"


@pytest.mark.parametrize("key", [True, 4.5, b"o-1", ["o-1"]])
def test_other_keys_are_refused_before_anything_is_written(store: Store, key: object) -> None:
    def count(tx: Tx) -> None:
        tx.increment("placed")

    @idempotent(store, key=lambda order: order["key"])
    def place(order: dict[str, Any]) -> Generator[Any, Any, str]:
        yield atomic("orders", "o", count)
        return "placed"

    with pytest.raises(InvalidInputError, match="a str, an int or a UUID"):
        place({"key": key})
    assert data_rows(store, "orders") == {}


def test_an_async_handler_takes_an_int_key_and_keywords_alike() -> None:
    store = MemoryStore()

    @idempotent(store, key=lambda order: order["n"])
    async def place(order: dict[str, Any]) -> str:
        await atomic("orders", "o", lambda tx: tx.increment("placed"))
        return "placed"

    async def main() -> list[str]:
        return [await place({"n": 7}), await place(order={"n": 7})]

    assert asyncio.run(main()) == ["placed", "placed"]
    assert data_rows(store, "orders") == {("orders", "o", "placed"): 1}


def test_a_key_and_a_fingerprint_may_be_paths_into_the_arguments(store: Store) -> None:
    @idempotent(store, key="order.id", fingerprint="order.[customer, amount]", name="place")
    def place(order: dict[str, Any], channel: str = "web") -> Generator[Any, Any, str]:
        yield atomic("accounts", order["customer"], lambda tx: tx.increment("charged", order["amount"]))
        return f"charged {order['amount']} via {channel}"

    first = {"id": "o-1", "customer": "ann", "amount": 30, "sent_at": "10:00:00"}
    assert place(first) == "charged 30 via web"
    again = {**first, "sent_at": "10:00:05"}  # a retry stamped anew: the same request
    assert place(again, channel="app") == "charged 30 via web"
    with pytest.raises(IdempotencyKeyReuseError):
        place({**first, "amount": 31})  # the compared part differs
    assert data_rows(store, "accounts") == {("accounts", "ann", "charged"): 30}


def test_a_fingerprint_function_compares_duplicates_on_what_it_returns(store: Store) -> None:
    @idempotent(store, key=lambda event: event["id"], fingerprint=lambda event: event["body"])
    def handle(event: dict[str, Any]) -> Generator[Any, Any, int]:
        total = yield atomic("accounts", "ann", lambda tx: tx.increment("n") or 1)
        return int(total)

    assert handle({"id": "e-1", "body": {"n": 1}, "trace": "a"}) == 1
    assert handle({"id": "e-1", "body": {"n": 1}, "trace": "b"}) == 1
    assert data_rows(store, "accounts") == {("accounts", "ann", "n"): 1}


def test_a_call_without_a_key_is_refused_or_run_without_deduplication(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def count(tx: Tx) -> None:
        tx.increment("placed")

    def place(order: dict[str, Any]) -> Generator[Any, Any, str]:
        yield atomic("orders", "o", count)
        return "placed"

    strict = idempotent(store, key="order.id", name="strict")(place)
    with pytest.raises(InvalidInputError, match="no key"):
        strict({"customer": "ann"})
    assert data_rows(store, "orders") == {}
    lenient = idempotent(store, key="order.id", key_required=False, name="lenient")(place)
    with caplog.at_level("WARNING", logger="idemflow.handlers"):
        assert lenient({"customer": "ann"}) == lenient({"customer": "ann"}) == "placed"
    assert data_rows(store, "orders") == {("orders", "o", "placed"): 2}  # no key: no deduplication
    assert [r.getMessage() for r in caplog.records].count(
        "no idempotency key: running without deduplication"
    ) == 2
    assert lenient({"id": "o-1"}) == lenient({"id": "o-1"}) == "placed"
    assert data_rows(store, "orders") == {("orders", "o", "placed"): 3}


@pytest.mark.parametrize("path", ["order.[", "", "order..id"])
def test_a_path_that_is_not_jmespath_is_refused_when_decorating(path: str) -> None:
    def place(order: dict[str, Any]) -> Generator[Any, Any, None]:
        yield atomic("orders", "o", lambda tx: None)

    with pytest.raises(InvalidInputError, match="JMESPath"):
        idempotent(MemoryStore(), key=path)(place)


def test_a_plain_function_is_called_once_per_key_and_duplicates_get_its_result(store: Store) -> None:
    calls: list[str] = []

    @idempotent_function(store, key="order.id")
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        calls.append(order["id"])
        return {"charged": order["amount"], "receipt": f"r-{len(calls)}"}

    first = charge({"id": "o-1", "amount": 5})
    assert charge({"id": "o-1", "amount": 5}) == charge(order={"id": "o-1", "amount": 5}) == first
    assert charge({"id": "o-2", "amount": 7}) == {"charged": 7, "receipt": "r-2"}
    assert calls == ["o-1", "o-2"]
    assert charge.__name__ == "charge"
    with pytest.raises(IdempotencyKeyReuseError):
        charge({"id": "o-1", "amount": 6})
    assert calls == ["o-1", "o-2"]


def test_a_plain_function_whose_result_is_not_json_is_refused_and_nothing_is_kept(store: Store) -> None:
    @idempotent_function(store, key=lambda n: n)
    def now_ish(n: int) -> object:
        return object()

    with pytest.raises(InvalidValueError):
        now_ish(1)
    recorded = run_status(store, _derived_name(now_ish), "1")
    assert recorded is None or not recorded.status.final


def test_an_async_plain_function_is_awaited_once_per_key() -> None:
    store = MemoryStore()
    calls: list[int] = []

    @idempotent_function(store, key=lambda n: n)
    async def square(n: int) -> int:
        calls.append(n)
        await asyncio.sleep(0)
        return n * n

    async def main() -> list[int]:
        return [await square(3), await square(3), await square(n=3)]

    assert asyncio.run(main()) == [9, 9, 9]
    assert calls == [3]


def test_idempotent_on_a_def_that_returns_a_plain_value_points_to_idempotent_function() -> None:
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        return order

    with pytest.raises(InvalidInputError, match="idempotent_function"):
        idempotent(MemoryStore(), key="order.id")(charge)
    with pytest.raises(InvalidInputError, match="generator is a workflow"):
        idempotent_function(MemoryStore(), key="order.id")(lambda order: (yield order))


def test_the_first_answer_and_a_duplicates_serialise_to_the_same_bytes(store: Store) -> None:
    @idempotent_function(store, key="order.id")
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        return {"status": "paid", "order": order["id"], "lines": [{"sku": "b", "qty": 1}]}

    first = charge({"id": "o-1"})
    again = charge({"id": "o-1"})
    assert json.dumps(first) == json.dumps(again)  # the same keys in the same order, nested too


def test_on_replay_sees_and_may_change_only_answers_of_earlier_calls(store: Store) -> None:
    seen: list[Any] = []

    def replayed(result: dict[str, Any]) -> dict[str, Any]:
        seen.append(result)
        return {**result, "replayed": True}

    @idempotent_function(store, key="order.id", on_replay=replayed)
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        return {"charged": order["amount"]}

    assert charge({"id": "o-1", "amount": 5}) == {"charged": 5}
    assert seen == []
    assert charge({"id": "o-1", "amount": 5}) == {"charged": 5, "replayed": True}
    assert seen == [{"charged": 5}]


def test_on_replay_is_not_told_when_this_call_finished_a_crashed_one(store: Store) -> None:
    seen: list[Any] = []
    crash = [True]

    def second(tx: Tx) -> str:
        if crash[0]:
            raise RuntimeError("the first call died here")
        tx.increment("n")
        return "done"

    @idempotent(store, key=lambda n: n, on_replay=lambda result: seen.append(result) or result)
    def two_steps(n: int) -> Generator[Any, Any, str]:
        yield atomic("accounts", "a", lambda tx: tx.increment("n"))
        return str((yield atomic("accounts", "b", second)))

    with pytest.raises(RuntimeError):
        two_steps(1)
    crash[0] = False
    assert two_steps(1) == "done"  # step 1 replayed, step 2 committed by this call: not a replay
    assert seen == []
    assert two_steps(1) == "done"
    assert seen == ["done"]


def test_on_replay_on_an_async_handler() -> None:
    store = MemoryStore()

    @idempotent(store, key=lambda n: n, on_replay=lambda result: f"{result} (again)")
    async def place(n: int) -> str:
        await atomic("orders", "o", lambda tx: tx.increment("placed"))
        return "placed"

    async def main() -> list[str]:
        return [await place(1), await place(1)]

    assert asyncio.run(main()) == ["placed", "placed (again)"]
