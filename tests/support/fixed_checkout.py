"""``checkout`` v1 after a fix: the same steps, but shipping no longer raises
(for ``idemflow retry`` after a deploy). Importable by worker processes."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow import Idem, atomic, checkpoint, workflow
from tests.support.checkout_workflows import debit, refund, space_of


@workflow("checkout")
def checkout_fixed(order: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", space_of(order) + "wallet", debit(order), compensate=refund, name="debit")
    yield checkpoint()

    def ship(tx: Any) -> str:
        tx.put(order["id"], {"items": len(order.get("items", ""))})
        return "shipped"

    shipped = yield atomic("tableb", space_of(order) + "shipments", ship, name="ship")
    return {"version": 1, "shipped": shipped}


FIXED = [checkout_fixed]
