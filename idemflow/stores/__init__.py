"""Stores: the :class:`Store` protocol, its backends and :func:`open_store`.

Each backend is an entry of the store registry (:mod:`idemflow.stores.registry`):
its URL schemes, how it opens, its asyncio twin and its test beds. The cloud
stores import their SDKs lazily, so ``import idemflow`` needs neither boto3
nor the Azure SDK; using one without its extra installed says which extra to
install.

>>> store = open_store("memory:")
>>> type(store).__name__
'MemoryStore'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from idemflow._lazy import load_optional
from idemflow._urls import Url, parse_url
from idemflow.stores._moved import alias
from idemflow.stores._openers import OPTIONAL
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Capabilities, Row, RowRef, Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.registry import STORES, Backend, load
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
    "async_twin",
    "open_async_store",
    "open_store",
    "to_async",
]


for _old, _new in (
    ("aio", "async_adapters"),
    ("dynamodb_aio", "dynamodb_async"),
    ("azure_tables_aio", "azure_tables_async"),
):
    alias(__name__, _old, _new)

_LAZY = OPTIONAL
"""The optional classes, as ``idemflow`` re-exports them."""


def __getattr__(name: str) -> Any:
    return load_optional(__name__, name, OPTIONAL)


def _parsed(url: str) -> tuple[Backend, Url]:
    """The registered backend a URL names, and the URL checked against it (nothing opened yet)."""
    parsed = parse_url(url, "store", STORES.parameters(), STORES.usage())
    return STORES.for_scheme(parsed.scheme), parsed


def open_store(url: str, *, create: bool = True) -> Store:
    """A store from a URL: ``memory:``, ``sqlite:PATH``,
    ``dynamodb:?endpoint=URL&region=R&prefix=P`` (for tests on DynamoDB Local or moto, add
    ``&conflicts=RATE`` to meet the service's transaction conflicts: see
    :mod:`idemflow.testing.conflicts`; ``&open_runs_index=0`` to create the runs table without
    its index of unfinished runs),
    ``azure:?connection_string=...&prefix=P`` (or ``AZURE_STORAGE_CONNECTION_STRING``),
    or the scheme of any backend added to :data:`~idemflow.stores.registry.STORES`.

    Query values are percent-decoded with ``+`` kept, as account keys contain
    it. An unknown scheme or parameter is a
    :class:`~idemflow.errors.ConfigurationError` naming the scheme and what is
    wrong; errors never quote the URL itself (its query, a path or connection
    string given in its place, credentials in an endpoint). With
    ``create=False`` (read-only tools) a SQLite file that does not exist is an
    error instead of a new empty database.

    >>> open_store("dynamodb:?regoin=eu-west-1&prefix=prod")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.ConfigurationError: store URL 'dynamodb:…': unknown parameter(s) ['regoin']; dynamodb: ...
    """
    entry, parsed = _parsed(url)
    hooks = [load(hook)(parsed) for name, hook in entry.test_parameters.items() if name in parsed.params]
    store: Store = load(entry.opener, entry.extra)(parsed, create=create)
    for install in hooks:
        install(store)
    return store


def open_async_store(url: str, *, create: bool = True) -> AsyncStore:
    """The :class:`~idemflow.stores.base.AsyncStore` a URL names (the URLs of :func:`open_store`).

    DynamoDB and Azure get their SDKs' asynchronous clients
    (:class:`AsyncDynamoDBStore`, :class:`AsyncAzureTableStore`, the ``aio``
    extra); SQLite runs on threads of its own, memory on the loop. Create it
    on the event loop that uses it, and ``await store.close()`` when done.
    A URL with a test-only parameter (``conflicts=``, which hooks the blocking
    DynamoDB client) gets the blocking store on threads.
    """
    entry, parsed = _parsed(url)
    if entry.async_opener is None or set(entry.test_parameters) & set(parsed.params):
        return to_async(open_store(url, create=create))
    store: AsyncStore = load(entry.async_opener, "aio")(parsed, create=create)
    return store


def async_twin(store: Store) -> AsyncStore:
    """The asyncio store on the same tables as blocking ``store``: on its SDK's asynchronous
    client where its backend has one (:attr:`~idemflow.stores.registry.Backend.twin`), else
    ``store`` itself on threads of its own (or on the loop, for memory).

    A twin on an SDK client has clients of its own: ``await twin.close()`` when done.

    >>> async_twin(MemoryStore())  # doctest: +ELLIPSIS
    InlineStore(<idemflow.stores.memory.MemoryStore object at ...>)
    """
    entry = STORES.for_blocking(store)
    if entry is None or entry.twin is None:
        return to_async(store)
    twin: AsyncStore = load(entry.twin, "aio")(store)
    return twin
