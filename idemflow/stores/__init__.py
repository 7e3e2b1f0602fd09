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
from urllib.parse import unquote

from idemflow.errors import StoreConfigError
from idemflow.stores.base import Capabilities, Row, RowRef, Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.stores.dynamodb import DynamoDBStore

__all__ = [
    "AzureTableStore",
    "Capabilities",
    "DynamoDBStore",
    "MemoryStore",
    "Row",
    "RowRef",
    "SqliteStore",
    "Store",
    "open_store",
]

_LAZY = {
    "DynamoDBStore": ("idemflow.stores.dynamodb", "aws"),
    "AzureTableStore": ("idemflow.stores.azure_tables", "azure"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, extra = _LAZY[name]
        import importlib

        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise StoreConfigError(
                f"{name} needs the '{extra}' extra: pip install 'idemflow[{extra}]' ({exc})"
            ) from exc
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(url: str) -> Store:
    """A store from a URL: ``memory:``, ``sqlite:PATH``,
    ``dynamodb:?endpoint=URL&region=R&prefix=P``,
    ``azure:?connection_string=...&prefix=P`` (or ``AZURE_STORAGE_CONNECTION_STRING``).
    """
    scheme, _, rest = url.partition(":")
    if not _:
        raise StoreConfigError(f"store URL {url!r} has no scheme (memory:, sqlite:PATH, dynamodb:, azure:)")
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        path = rest.split("?", 1)[0]
        if not path:
            raise StoreConfigError("sqlite store URL needs a path: sqlite:PATH")
        return SqliteStore(path)
    params = _query(url)
    if scheme == "dynamodb":
        store_cls = __getattr__("DynamoDBStore")
        return store_cls(  # type: ignore[no-any-return]
            endpoint_url=params.get("endpoint"),
            region_name=params.get("region"),
            prefix=params.get("prefix", ""),
        )
    if scheme == "azure":
        conn = params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if not conn:
            raise StoreConfigError(
                "azure store URL needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING"
            )
        store_cls = __getattr__("AzureTableStore")
        return store_cls(connection_string=conn, prefix=params.get("prefix", ""))  # type: ignore[no-any-return]
    raise StoreConfigError(f"unknown store scheme {scheme!r} in {url!r} (memory, sqlite, dynamodb, azure)")


def _query(url: str) -> dict[str, str]:
    """Query parameters, percent-decoded but with ``+`` kept (account keys contain it)."""
    query = url.split("?", 1)[1] if "?" in url else ""
    params: dict[str, str] = {}
    for part in query.split("&"):
        if part:
            key, _, value = part.partition("=")
            params[unquote(key)] = unquote(value)
    return params
