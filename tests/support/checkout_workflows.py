"""An order checkout in two versions, as a new user writes it: debit a wallet,
``checkpoint()``, ship. Importable by worker processes
(``idemflow worker tests.support.checkout_workflows:V1``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, workflow


def debit(order: dict[str, Any]) -> Any:
    def body(tx: Tx) -> int:
        tx.increment("balance", -int(order["amount"]))
        return int(order["amount"])

    return body


def refund(tx: Tx, amount: int) -> None:
    tx.increment("balance", amount)


def ship(order: dict[str, Any]) -> Any:
    def body(tx: Tx) -> str:
        if order.get("explode"):  # a bug that only the step after the checkpoint meets
            raise KeyError("address")
        tx.put(order["id"], {"items": len(order.get("items", ""))})
        return "shipped"

    return body


def space_of(order: dict[str, Any]) -> str:
    return str(order["space"])


@workflow("checkout")
def checkout_v1(order: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """v1: debit -> checkpoint -> ship."""
    yield atomic("tablea", space_of(order) + "wallet", debit(order), compensate=refund, name="debit")
    yield checkpoint()
    shipped = yield atomic("tableb", space_of(order) + "shipments", ship(order), name="ship")
    return {"version": 1, "shipped": shipped}


@workflow("checkout", version=2)
def checkout_v2(order: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """v2 adds a fraud check before the debit: run on a v1 request it would debit twice."""
    yield atomic("tableb", space_of(order) + "fraud", lambda tx: tx.increment("checked"), name="fraud")
    yield atomic("tablea", space_of(order) + "wallet", debit(order), compensate=refund, name="debit")
    yield checkpoint()
    shipped = yield atomic("tableb", space_of(order) + "shipments", ship(order), name="ship")
    return {"version": 2, "shipped": shipped}


@workflow("checkout-refunding", on_failure="compensate")
def checkout_refunding(order: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """v1's steps, but a request whose shipping keeps failing is refunded."""
    yield atomic("tablea", space_of(order) + "wallet", debit(order), compensate=refund, name="debit")
    yield checkpoint()
    shipped = yield atomic("tableb", space_of(order) + "shipments", ship(order), name="ship")
    return {"shipped": shipped}


@workflow("checkout-noting")
def checkout_noting(order: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Changes its own input before its first step (a user's ``order.pop``)."""
    note = order.pop("note", None)
    yield atomic("tablea", space_of(order) + "wallet", debit(order), name="debit")
    yield checkpoint()
    yield atomic("tableb", space_of(order) + "shipments", ship(order), name="ship")
    return {"note": note}


V1 = [checkout_v1, checkout_refunding, checkout_noting]
V1_AND_V2 = [checkout_v1, checkout_v2, checkout_refunding, checkout_noting]
V2 = [checkout_v2, checkout_refunding, checkout_noting]
