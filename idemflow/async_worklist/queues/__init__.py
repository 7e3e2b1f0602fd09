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

from idemflow._lazy import load_optional
from idemflow._urls import parse_url
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, ThreadedQueue
from idemflow.async_worklist.queues.base import DeadLetter, Message, MessageLostError, Queue
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.async_worklist.queues.azure_queue_async import AsyncAzureQueue
    from idemflow.async_worklist.queues.sqs import SqsQueue
    from idemflow.async_worklist.queues.sqs_async import AsyncSqsQueue

__all__ = [
    "AsyncAzureQueue",
    "AsyncQueue",
    "AsyncSqsQueue",
    "AzureQueue",
    "DeadLetter",
    "MemoryQueue",
    "Message",
    "MessageLostError",
    "Queue",
    "SqliteQueue",
    "SqsQueue",
    "ThreadedQueue",
    "open_async_queue",
    "open_queue",
]

_LAZY = {
    "SqsQueue": ("idemflow.async_worklist.queues.sqs", "aws"),
    "AzureQueue": ("idemflow.async_worklist.queues.azure_queue", "azure"),
    "AsyncSqsQueue": ("idemflow.async_worklist.queues.sqs_async", "aio"),
    "AsyncAzureQueue": ("idemflow.async_worklist.queues.azure_queue_async", "aio"),
}
_PARAMETERS = {
    "memory": {"visibility_timeout"},
    "sqlite": {"visibility_timeout", "name"},
    "sqs": {"visibility_timeout", "endpoint", "region", "create"},
    "azure-queue": {"visibility_timeout", "connection_string", "create"},
}
_USAGE = "memory:, sqlite:PATH, sqs:NAME, azure-queue:NAME"


def __getattr__(name: str) -> Any:
    return load_optional(__name__, name, _LAZY)


def open_queue(url: str) -> Queue:
    """A queue from a URL, so workers and the CLI take their queue as configuration.

    ``memory:``, ``sqlite:PATH?name=N``, ``sqs:NAME?endpoint=URL&region=R``,
    ``azure-queue:NAME?connection_string=...`` (or the
    ``AZURE_STORAGE_CONNECTION_STRING`` environment variable); every scheme
    takes ``visibility_timeout=SECONDS``, the cloud ones ``create=false`` to
    require an existing queue. Query values are percent-decoded with ``+``
    kept, as account keys contain it. Errors name the scheme and what is
    wrong, never the URL itself (its query, a connection string given in its
    place, credentials in an endpoint).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "q.sqlite3")
    >>> queue = open_queue(f"sqlite:{path}?name=jobs&visibility_timeout=60")
    >>> queue.name, queue.visibility_timeout
    ('jobs', 60.0)
    """
    kind, args, options = _parsed(url)
    if kind in ("MemoryQueue", "SqliteQueue"):
        return MemoryQueue(**options) if kind == "MemoryQueue" else SqliteQueue(*args, **options)
    queue_cls = __getattr__(kind)
    return queue_cls(*args, **options)  # type: ignore[no-any-return]


def open_async_queue(url: str) -> AsyncQueue:
    """The :class:`~idemflow.async_worklist.queues.async_adapters.AsyncQueue` a URL names.

    It takes the URLs of :func:`open_queue`.

    SQS and Azure Queue get their SDKs' asynchronous clients (the ``aio``
    extra); SQLite and memory queues run on threads of their own. Create it on
    the event loop that uses it; ``await queue.close()`` when done.
    """
    kind, args, options = _parsed(url)
    if kind in ("MemoryQueue", "SqliteQueue"):
        return ThreadedQueue(open_queue(url))
    queue_cls = __getattr__("Async" + kind)
    return queue_cls(*args, **options)  # type: ignore[no-any-return]


def _parsed(url: str) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """The queue class a URL names, with its arguments (checked before anything is opened)."""
    parsed = parse_url(url, "queue", _PARAMETERS, _USAGE)
    scheme, target, params = parsed.scheme, parsed.target, parsed.params
    options: dict[str, Any] = {}
    visibility_timeout = parsed.seconds("visibility_timeout")
    if visibility_timeout is not None:
        options["visibility_timeout"] = visibility_timeout
    create = parsed.flag("create")
    if create is not None:
        options["create"] = create
    if scheme == "memory":
        return "MemoryQueue", (), options
    if not target:
        raise parsed.error(f"needs a {'path' if scheme == 'sqlite' else 'queue name'}")
    if scheme == "sqlite":
        return "SqliteQueue", (target,), {"name": params.get("name", "default"), **options}
    if scheme == "sqs":
        return (
            "SqsQueue",
            (target,),
            {
                "endpoint_url": parsed.endpoint("endpoint"),
                "region_name": params.get("region"),
                **options,
            },
        )
    conn = params.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if not conn:
        raise parsed.error("needs ?connection_string=... or AZURE_STORAGE_CONNECTION_STRING")
    return "AzureQueue", (target,), {"connection_string": conn, **options}
