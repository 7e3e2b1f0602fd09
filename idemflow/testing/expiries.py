"""Every row's ``expires_at`` as each built-in backend holds it, for tests of retention.

The store protocol never returns a row's expiry (nothing on a step's path needs it), so these
read each backend as its own tools would: the memory store's map, SQLite's ``expires`` column,
DynamoDB's ``expires_at`` attribute, Azure's ``expires_at`` property (tombstones, a delete of an
absent row expiring at once, are left out: they read as absent). A backend's registry entry
names its reader (:attr:`~idemflow.stores.registry.Backend.row_expiries`), so the retention
and collection suites check a new backend with no edit of their own.
"""

from __future__ import annotations

import sqlite3
from typing import Any

Where = tuple[str, str, str]
"""A row as ``(physical or logical table, partition, key)``: enough to name it in a failure."""


def memory(store: Any) -> dict[Where, float | None]:
    """The memory store's rows and expiries."""
    return {key: store._expires.get(key) for key in store._rows}


def sqlite(store: Any) -> dict[Where, float | None]:
    """The SQLite file's rows and their ``expires`` column."""
    with sqlite3.connect(store.path) as conn:
        found = conn.execute("SELECT tbl, part, rk, expires FROM idemflow_rows").fetchall()
    return {(tbl, part, key): expires for tbl, part, key, expires in found}


def postgres(store: Any) -> dict[Where, float | None]:
    """The PostgreSQL schema's rows and their ``expires`` column."""
    with store._pool.connection() as conn:
        found = conn.execute(f"SELECT tbl, part, rk, expires FROM {store.sql.schema_table}").fetchall()
    return {(tbl, part, key): expires for tbl, part, key, expires in found}


def dynamodb(store: Any) -> dict[Where, float | None]:
    """Every item of the store's tables (consistent scans) and its ``expires_at``."""
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


def azure_tables(store: Any) -> dict[Where, float | None]:
    """Every entity of the store's tables but tombstones, and its ``expires_at``."""
    from idemflow.stores import _azure_entity as ent  # the [azure] extra

    rows: dict[Where, float | None] = {}
    for table in store.tables():
        for entity in store.table_client(table).list_entities():
            if entity.get(ent.TOMB):
                continue
            expires = entity.get(ent.EXPIRES_AT)
            where = (table, ent.unescape_key(entity["PartitionKey"]), ent.unescape_key(entity["RowKey"]))
            rows[where] = None if expires is None else float(expires)
    return rows


__all__ = ["Where", "azure_tables", "dynamodb", "memory", "sqlite"]
