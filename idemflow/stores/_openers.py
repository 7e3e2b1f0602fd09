"""How each built-in store backend is opened from a parsed URL (the registry's openers).

The cloud classes are loaded on first use (:data:`OPTIONAL`), so opening a
``memory:`` or ``sqlite:`` URL imports no SDK, and a missing SDK is an error
naming the extra to install.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlencode

from idemflow.core.lazy import OptionalClasses, load_optional
from idemflow.core.urls import Url
from idemflow.stores.base import AsyncStore, Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.sqlite import SqliteStore

OPTIONAL: OptionalClasses = {
    "DynamoDBStore": ("idemflow.stores.dynamodb", "aws"),
    "AzureTableStore": ("idemflow.stores.azure_tables", "azure"),
    "AsyncDynamoDBStore": ("idemflow.stores.dynamodb_async", "aio"),
    "AsyncAzureTableStore": ("idemflow.stores.azure_tables_async", "aio"),
    "PostgresStore": ("idemflow.stores.postgres", "postgres"),
    "AsyncPostgresStore": ("idemflow.stores.postgres_async", "postgres"),
}
"""The classes ``idemflow.stores`` gives on first use: ``{name: (module, extra)}``."""


def _optional(name: str) -> type:
    cls: type = load_optional("idemflow.stores", name, OPTIONAL)
    return cls


def open_memory(url: Url, *, create: bool = True) -> Store:
    return MemoryStore()


def open_sqlite(url: Url, *, create: bool = True) -> Store:
    if not url.target:
        raise url.error("needs a path: sqlite:PATH")
    if not create and not os.path.exists(url.target):
        hint = " (sqlite://x names the absolute path /x; a relative path is sqlite:x)"
        raise url.error("no database file at that path" + (hint if url.target[:2] == "//" else ""))
    return SqliteStore(url.target)


def _dynamodb_options(url: Url) -> dict[str, Any]:
    return {
        "endpoint_url": url.endpoint("endpoint"),
        "region_name": url.params.get("region"),
        "prefix": url.params.get("prefix", ""),
        "open_runs_index": url.flag("open_runs_index") is True,
    }


def open_dynamodb(url: Url, *, create: bool = True) -> Store:
    store: Store = _optional("DynamoDBStore")(**_dynamodb_options(url))
    return store


def open_async_dynamodb(url: Url, *, create: bool = True) -> AsyncStore:
    store: AsyncStore = _optional("AsyncDynamoDBStore")(**_dynamodb_options(url))
    return store


def _connection_string(url: Url) -> str:
    conn = url.params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if not conn:
        raise url.error("needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING")
    return conn


def open_azure(url: Url, *, create: bool = True) -> Store:
    cls = _optional("AzureTableStore")
    store: Store = cls(connection_string=_connection_string(url), prefix=url.params.get("prefix", ""))
    return store


def open_async_azure(url: Url, *, create: bool = True) -> AsyncStore:
    cls = _optional("AsyncAzureTableStore")
    store: AsyncStore = cls(connection_string=_connection_string(url), prefix=url.params.get("prefix", ""))
    return store


POSTGRES_OWN = frozenset({"schema", "pool_size"})
"""The ``postgresql:`` URL parameters that are idemflow's; the others (the libpq parameters the
registry accepts) go to libpq as they are."""


def _postgres_options(url: Url, create: bool) -> tuple[str, dict[str, Any]]:
    """The libpq conninfo of a store URL (idemflow's own parameters taken out) and the options."""
    if not url.target.startswith("//"):
        raise url.error("needs a server: postgresql://HOST[:PORT]/DATABASE?user=U")
    libpq = [(name, value) for name, value in url.params.items() if name not in POSTGRES_OWN]
    conninfo = f"{url.scheme}:{url.target}" + ("?" + urlencode(libpq) if libpq else "")
    size = url.params.get("pool_size", "10")
    if not size.isdigit() or int(size) < 1:
        raise url.error("pool_size must be a whole number of connections, at least 1")
    return conninfo, {"schema": url.params.get("schema", "public"), "pool_size": int(size), "create": create}


def open_postgres(url: Url, *, create: bool = True) -> Store:
    conninfo, options = _postgres_options(url, create)
    store: Store = _optional("PostgresStore")(conninfo, **options)
    return store


def open_async_postgres(url: Url, *, create: bool = True) -> AsyncStore:
    conninfo, options = _postgres_options(url, create)
    store: AsyncStore = _optional("AsyncPostgresStore")(conninfo, **options)
    return store


__all__ = [
    "OPTIONAL",
    "POSTGRES_OWN",
    "open_async_azure",
    "open_async_dynamodb",
    "open_async_postgres",
    "open_azure",
    "open_dynamodb",
    "open_memory",
    "open_postgres",
    "open_sqlite",
]
