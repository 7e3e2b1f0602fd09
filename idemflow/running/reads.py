"""Reading data outside a workflow: for front ends, reports, checks and tools.

A read is not a step: nothing is memoized and it may see a request half way
through (after its first step, before its second). Reads are strongly
consistent on every store.

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> run(atomic("accounts", "alice", lambda tx: tx.put("balance", 5)), request_id="r", store=store)
>>> get(store, "accounts", "alice", "balance"), rows(store, "accounts")
(5, {('alice', 'balance'): 5})
"""

from __future__ import annotations

from typing import Any

from idemflow.core.policy import DEFAULT_POLICY, resent
from idemflow.core.requests import Read, Scan, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.keys import check_key, check_partition, check_table, data_key, user_key
from idemflow.serialization import JSON
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, RowRef, Store


def get(store: Store, table: str, partition: str, key: str, default: Any = None) -> Any:
    """The value of one data row, or ``default``."""
    return drive(_get(table, partition, key, default), store)


async def aget(store: Store | AsyncStore, table: str, partition: str, key: str, default: Any = None) -> Any:
    """:func:`get`, awaitable."""
    target = to_async(store)
    return await adrive(_get(table, partition, key, default), target)


def rows(store: Store, table: str, partition: str | None = None) -> dict[tuple[str, str], JSON]:
    """Every data row of a table (or of one partition) as ``{(partition, key): value}``."""
    return drive(_rows(table, partition), store)


async def arows(
    store: Store | AsyncStore, table: str, partition: str | None = None
) -> dict[tuple[str, str], JSON]:
    """:func:`rows`, awaitable."""
    target = to_async(store)
    return await adrive(_rows(table, partition), target)


def _get(table: str, partition: str, key: str, default: Any) -> Steps[Any]:
    ref = RowRef(check_table(table), check_partition(partition), data_key(check_key(key)))
    row = yield from resent(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), Read(ref))
    return default if row is None else row.value


def _rows(table: str, partition: str | None) -> Steps[dict[tuple[str, str], JSON]]:
    check_table(table)
    if partition is not None:
        check_partition(partition)
    found: dict[tuple[str, str], JSON] = {}
    for part, row_key, row in (yield Scan(table, partition)):
        key = user_key(row_key)
        if key is not None:
            found[(part, key)] = row.value
    return found
