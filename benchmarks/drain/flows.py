"""The workflow the drain benchmark's workers run: an order answered at its checkpoint, then two
atomic steps in the worker (what a queue-backed service does per request).

Every row a batch writes is in partitions named after the batch (``order["batch"]``), so the
benchmark can check each batch's effects alone, on a store that earlier batches wrote to as well.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, workflow

SHARDS = 8
"""Stock and ledger rows per batch: concurrent requests add to the same few rows."""


def _add(amount: int) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        tx.increment("n", amount)
        return amount

    return body


@workflow("drained")
def drained(order: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
    yield atomic("orders", order["id"], _add(1))
    yield checkpoint()
    shard = order["n"] % SHARDS
    yield atomic("stock", f"{order['batch']}-s{shard}", _add(-1))
    yield atomic("ledger", f"{order['batch']}-l{shard}", _add(order["n"]))
    return "done"


WORKFLOWS = [drained]
TABLES = ("orders", "stock", "ledger")
