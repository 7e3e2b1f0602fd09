"""How each built-in queue backend is opened from a parsed URL (the queue registry's openers).

The cloud classes are loaded on first use (:data:`OPTIONAL`), so opening a
``memory:`` or ``sqlite:`` URL imports no SDK, and a missing SDK is an error
naming the extra to install.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlencode

from idemflow.async_worklist.queues.async_adapters import AsyncQueue
from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.core.lazy import OptionalClasses, load_optional
from idemflow.core.urls import Url
from idemflow.stores.registry import LIBPQ_PARAMETERS

OPTIONAL: OptionalClasses = {
    "SqsQueue": ("idemflow.async_worklist.queues.sqs", "aws"),
    "AzureQueue": ("idemflow.async_worklist.queues.azure_queue", "azure"),
    "AsyncSqsQueue": ("idemflow.async_worklist.queues.sqs_async", "aio"),
    "AsyncAzureQueue": ("idemflow.async_worklist.queues.azure_queue_async", "aio"),
    "PostgresQueue": ("idemflow.async_worklist.queues.postgres", "postgres"),
}
"""The classes ``idemflow.async_worklist.queues`` gives on first use: ``{name: (module, extra)}``."""


def _optional(name: str) -> Any:
    return load_optional("idemflow.async_worklist.queues", name, OPTIONAL)


def _common(url: Url, create: bool = True) -> dict[str, Any]:
    """What every scheme takes: ``visibility_timeout``, and ``create`` where the scheme does (the
    URL's, unless the caller forbids creating: ``open_queue(create=False)``, read-only tools)."""
    options: dict[str, Any] = {}
    visibility_timeout = url.seconds("visibility_timeout")
    if visibility_timeout is not None:
        options["visibility_timeout"] = visibility_timeout
    wanted = url.flag("create")
    if wanted is not None or not create:
        options["create"] = bool(wanted) and create
    return options


def _target(url: Url, what: str) -> str:
    if not url.target:
        raise url.error(f"needs a {what}")
    return url.target


def open_memory(url: Url, *, create: bool = True) -> Queue:
    return MemoryQueue(**_common(url))


def open_sqlite(url: Url, *, create: bool = True) -> Queue:
    common = _common(url)
    path = _target(url, "path")
    if not create and not os.path.exists(path):  # a mistyped path: never an empty queue made there
        hint = " (sqlite://x names the absolute path /x; a relative path is sqlite:x)"
        raise url.error(f"no queue file at {path!r}" + (hint if path[:2] == "//" else ""))
    return SqliteQueue(path, name=url.params.get("name", "default"), **common)


def _sqs(url: Url, create: bool) -> tuple[str, dict[str, Any]]:
    common, name = _common(url, create), _target(url, "queue name")  # in this order: errors as before
    return name, {"endpoint_url": url.endpoint("endpoint"), "region_name": url.params.get("region"), **common}


def open_sqs(url: Url, *, create: bool = True) -> Queue:
    name, options = _sqs(url, create)
    queue: Queue = _optional("SqsQueue")(name, **options)
    return queue


def open_async_sqs(url: Url, *, create: bool = True) -> AsyncQueue:
    name, options = _sqs(url, create)
    queue: AsyncQueue = _optional("AsyncSqsQueue")(name, **options)
    return queue


def _azure(url: Url, create: bool) -> tuple[str, dict[str, Any]]:
    common, name = _common(url, create), _target(url, "queue name")
    conn = url.params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if not conn:
        raise url.error("needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING")
    return name, {"connection_string": conn, **common}


def open_azure(url: Url, *, create: bool = True) -> Queue:
    name, options = _azure(url, create)
    queue: Queue = _optional("AzureQueue")(name, **options)
    return queue


def open_async_azure(url: Url, *, create: bool = True) -> AsyncQueue:
    name, options = _azure(url, create)
    queue: AsyncQueue = _optional("AsyncAzureQueue")(name, **options)
    return queue


def open_postgres(url: Url, *, create: bool = True) -> Queue:
    """A :class:`~idemflow.async_worklist.queues.postgres.PostgresQueue` from
    ``postgresql://HOST:PORT/DATABASE?name=QUEUE&user=...`` (the tables are made if missing:
    ``create`` is not a PostgreSQL queue's concern, which creates nothing but its two tables)."""
    if not url.target.startswith("//"):
        raise url.error("needs //HOST[:PORT]/DATABASE after the scheme")
    libpq = {key: value for key, value in url.params.items() if key in LIBPQ_PARAMETERS}
    conninfo = f"postgresql:{url.target}" + (f"?{urlencode(libpq)}" if libpq else "")
    options: dict[str, Any] = {}
    visibility_timeout = url.seconds("visibility_timeout")
    if visibility_timeout is not None:
        options["visibility_timeout"] = visibility_timeout
    queue: Queue = _optional("PostgresQueue")(conninfo, name=url.params.get("name", "default"), **options)
    return queue


__all__ = [
    "OPTIONAL",
    "open_async_azure",
    "open_async_sqs",
    "open_azure",
    "open_memory",
    "open_postgres",
    "open_sqlite",
    "open_sqs",
]
