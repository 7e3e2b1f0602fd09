"""Stores: the :class:`Store` protocol, its four backends and :func:`open_store`.

The cloud stores import their SDKs lazily, so ``import idemflow`` needs
neither boto3 nor the Azure SDK; using one without its extra installed says
which extra to install.

>>> store = open_store("memory:")
>>> type(store).__name__
'MemoryStore'
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from idemflow._lazy import load_optional
from idemflow._urls import parse_url
from idemflow.stores.async_adapters import InlineStore, ThreadedStore, to_async
from idemflow.stores.base import AsyncStore, Capabilities, Row, RowRef, Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.stores.azure_tables_async import AsyncAzureTableStore
    from idemflow.stores.dynamodb import DynamoDBStore
    from idemflow.stores.dynamodb_async import AsyncDynamoDBStore

__all__ = [
    "AsyncAzureTableStore",
    "AsyncDynamoDBStore",
    "AsyncStore",
    "AzureTableStore",
    "Capabilities",
    "DynamoDBStore",
    "MemoryStore",
    "Row",
    "RowRef",
    "SqliteStore",
    "Store",
    "open_async_store",
    "open_store",
    "to_async",
]

_LAZY = {
    "DynamoDBStore": ("idemflow.stores.dynamodb", "aws"),
    "AzureTableStore": ("idemflow.stores.azure_tables", "azure"),
    "AsyncDynamoDBStore": ("idemflow.stores.dynamodb_async", "aio"),
    "AsyncAzureTableStore": ("idemflow.stores.azure_tables_async", "aio"),
}
_PARAMETERS: dict[str, set[str]] = {
    "memory": set(),
    "sqlite": set(),
    "dynamodb": {"endpoint", "region", "prefix", "conflicts"},
    "azure": {"connection_string", "prefix"},
}
_USAGE = "memory:, sqlite:PATH, dynamodb:?region=R&endpoint=URL&prefix=P, azure:?connection_string=C&prefix=P"


def __getattr__(name: str) -> Any:
    return load_optional(__name__, name, _LAZY)


def open_store(url: str, *, create: bool = True) -> Store:
    """A store from a URL: ``memory:``, ``sqlite:PATH``,
    ``dynamodb:?endpoint=URL&region=R&prefix=P`` (for tests on DynamoDB Local or moto, add
    ``&conflicts=RATE`` to meet the service's transaction conflicts: see
    :mod:`idemflow.testing.conflicts`),
    ``azure:?connection_string=...&prefix=P`` (or ``AZURE_STORAGE_CONNECTION_STRING``).

    Query values are percent-decoded with ``+`` kept, as account keys contain
    it. An unknown scheme or parameter is a
    :class:`~idemflow.errors.StoreConfigError` naming the scheme and what is
    wrong; errors never quote the URL itself (its query, a path or connection
    string given in its place, credentials in an endpoint). With
    ``create=False`` (read-only tools) a SQLite file that does not exist is an
    error instead of a new empty database.

    >>> open_store("dynamodb:?regoin=eu-west-1&prefix=prod")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.StoreConfigError: store URL 'dynamodb:…': unknown parameter(s) ['regoin']; dynamodb: ...
    """
    parsed = parse_url(url, "store", _PARAMETERS, _USAGE)
    params = parsed.params
    if parsed.scheme == "memory":
        return MemoryStore()
    if parsed.scheme == "sqlite":
        if not parsed.target:
            raise parsed.error("needs a path: sqlite:PATH")
        if not create and not os.path.exists(parsed.target):
            hint = " (sqlite://x names the absolute path /x; a relative path is sqlite:x)"
            raise parsed.error("no database file at that path" + (hint if parsed.target[:2] == "//" else ""))
        return SqliteStore(parsed.target)
    if parsed.scheme == "dynamodb":
        endpoint = parsed.endpoint("endpoint")
        rate = parsed.seconds("conflicts")  # a number like seconds: the same parsing
        if rate is not None and not (endpoint and 0.0 <= rate <= 1.0):
            raise parsed.error("conflicts=RATE needs an endpoint (a local server) and a rate within [0, 1]")
        store_cls = __getattr__("DynamoDBStore")
        store: Store = store_cls(
            endpoint_url=endpoint, region_name=params.get("region"), prefix=params.get("prefix", "")
        )
        if rate is not None:
            from idemflow.testing.conflicts import DynamoDBConflicts

            DynamoDBConflicts(store.client, phantom_rate=rate).install()  # type: ignore[attr-defined]
        return store
    conn = params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if not conn:
        raise parsed.error("needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING")
    store_cls = __getattr__("AzureTableStore")
    return store_cls(connection_string=conn, prefix=params.get("prefix", ""))  # type: ignore[no-any-return]


def open_async_store(url: str, *, create: bool = True) -> AsyncStore:
    """The :class:`~idemflow.stores.base.AsyncStore` a URL names (the URLs of :func:`open_store`).

    DynamoDB and Azure get their SDKs' asynchronous clients
    (:class:`AsyncDynamoDBStore`, :class:`AsyncAzureTableStore`, the ``aio``
    extra); SQLite runs on threads of its own, memory on the loop. Create it
    on the event loop that uses it, and ``await store.close()`` when done.
    The test-only ``conflicts=`` emulator exists for the blocking DynamoDB client only.
    """
    parsed = parse_url(url, "store", _PARAMETERS, _USAGE)
    params = parsed.params
    if parsed.scheme == "dynamodb":
        if "conflicts" in params:
            return ThreadedStore(open_store(url, create=create))
        store_cls = __getattr__("AsyncDynamoDBStore")
        return store_cls(  # type: ignore[no-any-return]
            endpoint_url=parsed.endpoint("endpoint"),
            region_name=params.get("region"),
            prefix=params.get("prefix", ""),
        )
    if parsed.scheme == "azure":
        conn = params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if not conn:
            raise parsed.error("needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING")
        store_cls = __getattr__("AsyncAzureTableStore")
        return store_cls(connection_string=conn, prefix=params.get("prefix", ""))  # type: ignore[no-any-return]
    blocking = open_store(url, create=create)
    return InlineStore(blocking) if isinstance(blocking, MemoryStore) else ThreadedStore(blocking)
