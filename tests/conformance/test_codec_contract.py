"""Values beyond JSON (idemflow.codecs) and the number model, through whole workflows, on every store."""

from __future__ import annotations

from collections.abc import Generator
from decimal import Decimal
from typing import Any

import pytest

from idemflow import Idem, IdempotencyKeyReuseError, Tx, atomic, checkpoint, workflow
from idemflow.stores import Store
from idemflow.testing import FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import before_step, new_space
from tests.support.apis import Api
from tests.support.codec_types import Line, Order, Receipt, Tier, an_order

pytestmark = pytest.mark.every_bed  # a contract of the store itself: on every bed, moto too


def _charge(order: Order, space: str) -> Any:
    def body(tx: Tx) -> Receipt:
        tx.increment(f"{space}-charged", order.total)  # a Decimal counter stays a Decimal
        tx.put(f"{space}-order", order)
        return Receipt(order=order.id, charged=order.total, at=order.placed, notes=[order.tier.value])

    return body


def _read_back(space: str) -> Any:
    def body(tx: Tx) -> dict[str, Any]:
        return {"charged": tx.get(f"{space}-charged"), "order": tx.get(f"{space}-order")}

    return body


@workflow("codec-checkout")
def codec_checkout(order: Order, space: str) -> Generator[Idem[Any], Any, Any]:
    receipt = yield atomic("tablea", space + "wallet", _charge(order, space))
    assert isinstance(receipt, Receipt) and isinstance(order, Order)  # on replay too
    seen = yield atomic("tablea", space + "wallet", _read_back(space))
    return {"receipt": receipt, "seen": seen, "tier": order.tier}


@workflow("codec-checkout-async")
def codec_checkout_async(order: Order, space: str) -> Generator[Idem[Any], Any, Any]:
    receipt = yield atomic("tablea", space + "wallet", _charge(order, space))
    yield checkpoint()
    seen = yield atomic("tablea", space + "wallet", _read_back(space))
    return {"receipt": receipt, "seen": seen, "tier": order.tier}


def expected(order: Order) -> dict[str, Any]:
    receipt = Receipt(order=order.id, charged=Decimal("6.25"), at=order.placed, notes=["gold"])
    return {"receipt": receipt, "seen": {"charged": Decimal("6.25"), "order": order}, "tier": Tier.GOLD}


def assert_same_types(got: Any, want: Any) -> None:
    assert got == want
    assert type(got["receipt"]) is Receipt and type(got["tier"]) is Tier
    assert type(got["seen"]["charged"]) is Decimal and type(got["seen"]["order"]) is Order
    assert type(got["seen"]["order"].lines[0]) is Line


def test_codec_values_round_trip_through_inputs_steps_rows_and_results(store: Store, api: Api) -> None:
    space, order = new_space(), an_order()
    first = api.run(codec_checkout(order, space), request_id=space + "r", store=store)
    assert_same_types(first, expected(order))
    again = api.run(codec_checkout(order, space), request_id=space + "r", store=store)
    assert_same_types(again, expected(order))
    assert again["seen"]["charged"] == Decimal("6.25")  # charged once


def test_a_crashed_run_resumes_with_the_same_typed_step_results(store: Store, api: Api) -> None:
    space, order = new_space(), an_order(2)
    with pytest.raises(SimulatedCrash):
        api.run(
            codec_checkout(order, space), request_id=space + "r", store=FaultyStore(store, before_step(2))
        )
    resumed = api.run(codec_checkout(order, space), request_id=space + "r", store=store)
    assert_same_types(resumed, expected(order))


def test_numbers_count_by_value_in_the_input(store: Store, api: Api) -> None:
    """A client that sends ``10.0`` for ``10`` (or a Decimal) repeats the same request."""
    space = new_space()

    @workflow("codec-price")
    def priced(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        return (yield atomic("tablea", space + "p", lambda tx: tx.increment("sold", req["price"])))

    request_id = space + "r"
    assert api.run(priced({"price": 10}), request_id=request_id, store=store) is None
    for same in (10.0, Decimal("10.00")):
        assert api.run(priced({"price": same}), request_id=request_id, store=store) is None
    with pytest.raises(IdempotencyKeyReuseError):
        api.run(priced({"price": 10.5}), request_id=request_id, store=store)
    assert (
        api.run(atomic("tablea", space + "p", lambda tx: tx.get("sold")), request_id=space + "q", store=store)
        == 10
    )


def test_a_submitted_codec_input_is_resumed_by_a_worker(store: Store, api: Api) -> None:
    space, order, clock = new_space(), an_order(3), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(
        codec_checkout_async(order, space), request_id=space + "s", store=store, queue=queue, clock=clock
    )
    deliver_all(api.worker([codec_checkout_async], store=store, queue=queue, clock=clock), queue, clock)
    done = api.status(store, "codec-checkout-async", space + "s")
    assert_same_types(done.result, expected(order))
