"""Work queues for the asynchronous worklist: the :class:`Queue` protocol, four backends, :func:`open_queue`.

The cloud queues import their SDKs lazily, so ``import idemflow`` needs
neither boto3 nor the Azure SDK; using one without its extra installed says
which extra to install.

>>> queue = open_queue("memory:?visibility_timeout=5")
>>> type(queue).__name__, queue.visibility_timeout
('MemoryQueue', 5.0)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from idemflow.async_worklist.queues.base import Message, MessageLostError, Queue
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.errors import StoreConfigError
from idemflow.stores import _query

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.async_worklist.queues.sqs import SqsQueue

__all__ = [
    "AzureQueue",
    "MemoryQueue",
    "Message",
    "MessageLostError",
    "Queue",
    "SqliteQueue",
    "SqsQueue",
    "open_queue",
]

_LAZY = {
    "SqsQueue": ("idemflow.async_worklist.queues.sqs", "aws"),
    "AzureQueue": ("idemflow.async_worklist.queues.azure_queue", "azure"),
}
_PARAMETERS = {
    "memory": {"visibility_timeout"},
    "sqlite": {"visibility_timeout", "name"},
    "sqs": {"visibility_timeout", "endpoint", "region", "create"},
    "azure-queue": {"visibility_timeout", "connection_string", "create"},
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


def open_queue(url: str) -> Queue:
    """A queue from a URL, so workers and the CLI take their queue as configuration.

    ``memory:``, ``sqlite:PATH?name=N``, ``sqs:NAME?endpoint=URL&region=R``,
    ``azure-queue:NAME?connection_string=...`` (or the
    ``AZURE_STORAGE_CONNECTION_STRING`` environment variable); every scheme
    takes ``visibility_timeout=SECONDS``, the cloud ones ``create=false`` to
    require an existing queue. Query values are percent-decoded with ``+``
    kept, as account keys contain it. Errors never quote the query string.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "q.sqlite3")
    >>> queue = open_queue(f"sqlite:{path}?name=jobs&visibility_timeout=60")
    >>> queue.name, queue.visibility_timeout
    ('jobs', 60.0)
    """
    scheme, colon, rest = url.partition(":")
    shown = url.split("?", 1)[0] + ("?…" if "?" in url else "")  # the query may hold an account key
    if not colon or scheme not in _PARAMETERS:
        raise StoreConfigError(
            f"queue URL {shown!r}: unknown scheme (memory:, sqlite:PATH, sqs:NAME, azure-queue:NAME)"
        )
    target = rest.split("?", 1)[0]
    params = _query(url)
    unknown = sorted(set(params) - _PARAMETERS[scheme])
    if unknown:
        raise StoreConfigError(
            f"queue URL {shown!r}: unknown parameter(s) {unknown}; "
            f"{scheme}: takes {sorted(_PARAMETERS[scheme])}"
        )
    options: dict[str, Any] = {}
    if "visibility_timeout" in params:
        try:
            options["visibility_timeout"] = float(params["visibility_timeout"])
        except ValueError:
            raise StoreConfigError(f"queue URL {shown!r}: visibility_timeout must be a number") from None
    if "create" in params:
        if params["create"].lower() not in ("true", "false", "1", "0"):
            raise StoreConfigError(f"queue URL {shown!r}: create must be true or false")
        options["create"] = params["create"].lower() in ("true", "1")
    if scheme == "memory":
        return MemoryQueue(**options)
    if not target:
        raise StoreConfigError(
            f"queue URL {shown!r} needs a {'path' if scheme == 'sqlite' else 'queue name'}"
        )
    if scheme == "sqlite":
        return SqliteQueue(target, name=params.get("name", "default"), **options)
    if scheme == "sqs":
        queue_cls = __getattr__("SqsQueue")
        return queue_cls(  # type: ignore[no-any-return]
            target, endpoint_url=params.get("endpoint"), region_name=params.get("region"), **options
        )
    conn = params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if not conn:
        raise StoreConfigError(
            f"queue URL {shown!r} needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING"
        )
    queue_cls = __getattr__("AzureQueue")
    return queue_cls(target, connection_string=conn, **options)  # type: ignore[no-any-return]
