"""Opening a store from a URL: the registered backend its scheme names, opened as it says.

Why apart from :mod:`idemflow.stores`: ``open_store`` is public from :mod:`idemflow` (what a
workflow's author reaches for first), while the store classes are :mod:`idemflow.stores`'.
"""

from __future__ import annotations

from idemflow.core.urls import Url, parse_url
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Store
from idemflow.stores.registry import STORES, Backend, load


def _parsed(url: str) -> tuple[Backend, Url]:
    """The registered backend a URL names, and the URL checked against it (nothing opened yet)."""
    parsed = parse_url(url, "store", STORES.parameters(), STORES.usage())
    return STORES.for_scheme(parsed.scheme), parsed


def open_store(url: str, *, create: bool = True) -> Store:
    """A store from a URL: ``memory:``, ``sqlite:PATH``,
    ``dynamodb:?endpoint=URL&region=R&prefix=P`` (for tests on DynamoDB Local or moto, add
    ``&conflicts=RATE`` to meet the service's transaction conflicts: see
    :mod:`idemflow.testing.conflicts`; ``&open_runs_index=1`` to create the runs table with
    an index of unfinished runs),
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


__all__ = ["open_async_store", "open_store"]
