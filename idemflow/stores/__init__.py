"""Stores: the :class:`Store` protocol and its backends (:func:`idemflow.open_store` opens one
from a URL).

Each backend is an entry of the store registry (:mod:`idemflow.stores.registry`):
its URL schemes, how it opens, its asyncio twin and its test beds. The cloud
stores import their SDKs lazily, so ``import idemflow`` needs neither boto3
nor the Azure SDK; using one without its extra installed says which extra to
install.

Names hold on every backend: a table is 3-40 ASCII letters and digits starting
with a letter (Azure's rule, the strictest), a workflow name 1-100 of
``A-Z a-z 0-9 _ . -``, a request id or partition 1-255 characters of unicode, a
key 1-512; anything else is refused before a write (``docs/operations.md``,
*Tables and names*, has the prefixes of the cloud stores).

>>> from idemflow import open_store
>>> type(open_store("memory:")).__name__
'MemoryStore'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from idemflow.core.lazy import load_optional
from idemflow.core.moved import Moves as _Moves
from idemflow.core.moved import alias
from idemflow.core.moved import resolve as _resolve
from idemflow.stores._openers import OPTIONAL
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Capabilities, Row, RowRef, Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.registry import STORES, load
from idemflow.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.stores.azure_tables_async import AsyncAzureTableStore
    from idemflow.stores.dynamodb import DynamoDBStore
    from idemflow.stores.dynamodb_async import AsyncDynamoDBStore
    from idemflow.stores.postgres import PostgresStore
    from idemflow.stores.postgres_async import AsyncPostgresStore

__all__ = [
    "AsyncAzureTableStore",
    "AsyncDynamoDBStore",
    "AsyncPostgresStore",
    "AsyncStore",
    "AzureTableStore",
    "Capabilities",
    "DynamoDBStore",
    "MemoryStore",
    "PostgresStore",
    "Row",
    "RowRef",
    "SqliteStore",
    "Store",
    "async_twin",
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


_MOVES: _Moves = {"open_store": "idemflow", "open_async_store": "idemflow"}
"""Names this module gave before 1.0, and where they live now (docs/upgrading.md)."""


def __getattr__(name: str) -> Any:
    if name in _MOVES:
        return _resolve(__name__, name, _MOVES)
    return load_optional(__name__, name, OPTIONAL)


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
