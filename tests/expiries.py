"""Every row's ``expires_at`` as the backend holds it, for tests of retention on every store.

The store protocol never returns a row's expiry (nothing on a step's path needs it), so this
reads each backend as its own tools would: SQLite's ``expires`` column, the memory store's map,
DynamoDB's ``expires_at`` attribute, Azure's ``expires_at`` property. Azure tombstones (a delete
of an absent row, expiring at once) are left out: they read as absent.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from idemflow.stores import MemoryStore, SqliteStore, Store
from idemflow.testing import StoreWrapper

Where = tuple[str, str, str]
"""A row as ``(physical or logical table, partition, key)``: enough to name it in a failure."""


def expiries(store: Store) -> dict[Where, float | None]:
    """Every row of ``store`` and its ``expires_at`` (None: kept until deleted, e.g. data rows)."""
    if isinstance(store, StoreWrapper):  # a wrapper holds the rows of the store it wraps
        return expiries(store.inner)
    if isinstance(store, MemoryStore):
        held: Any = store
        return {key: held._expires.get(key) for key in held._rows}
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            found = conn.execute("SELECT tbl, part, rk, expires FROM idemflow_rows").fetchall()
        return {(tbl, part, key): expires for tbl, part, key, expires in found}
    kind = type(store).__name__
    if kind == "DynamoDBStore":
        return _dynamodb(store)
    if kind == "AzureTableStore":
        return _azure(store)
    raise AssertionError(f"no way to read the expiry of {kind}'s rows")


def _dynamodb(store: Any) -> dict[Where, float | None]:
    rows: dict[Where, float | None] = {}
    for table in store.tables():
        name = store.table_name(table)
        pages = store.client.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
        for page in pages:
            for item in page["Items"]:
                expires = item.get("expires_at")
                where = (name, item["pk"]["S"], item["sk"]["S"])
                rows[where] = None if expires is None else float(expires["N"])
    return rows


def _azure(store: Any) -> dict[Where, float | None]:
    from idemflow.stores import _azure_entity as ent

    rows: dict[Where, float | None] = {}
    for table in store.tables():
        for entity in store.table_client(table).list_entities():
            if entity.get(ent.TOMB):
                continue
            expires = entity.get(ent.EXPIRES_AT)
            where = (table, ent.unescape_key(entity["PartitionKey"]), ent.unescape_key(entity["RowKey"]))
            rows[where] = None if expires is None else float(expires)
    return rows
