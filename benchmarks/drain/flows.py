"""The workflow the drain benchmark's workers run: an order answered at its checkpoint, then two
atomic steps in the worker (what a queue-backed service does per request)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, workflow


def _add(amount: int) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        tx.increment("n", amount)
        return amount

    return body


@workflow("drained")
def drained(order: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
    yield atomic("orders", order["id"], _add(1))
    yield checkpoint()
    yield atomic("stock", f"s{order['n'] % 8}", _add(-1))
    yield atomic("ledger", f"l{order['n'] % 8}", _add(order["n"]))
    return "done"


WORKFLOWS = [drained]
TABLES = ("orders", "stock", "ledger")
