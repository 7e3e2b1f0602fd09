"""Work queues for the asynchronous worklist: the :class:`Queue` protocol, its backends, :func:`open_queue`.

The cloud queues import their SDKs lazily, so ``import idemflow`` needs
neither boto3 nor the Azure SDK; using one without its extra installed says
which extra to install.

>>> queue = open_queue("memory:?visibility_timeout=5")
>>> type(queue).__name__, queue.visibility_timeout
('MemoryQueue', 5.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from idemflow.async_worklist.queues._openers import OPTIONAL
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, ThreadedQueue, to_async_queue
from idemflow.async_worklist.queues.base import DeadLetter, Message, Queue
from idemflow.async_worklist.queues.lanes import LANES, AsyncLanedQueue, LanedQueue, lane_url
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.registry import QUEUES
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.core.lazy import load_optional
from idemflow.core.moved import alias
from idemflow.core.urls import Url, parse_url
from idemflow.errors import MessageLostError
from idemflow.stores.registry import Backend, load

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.async_worklist.queues.azure_queue_async import AsyncAzureQueue
    from idemflow.async_worklist.queues.postgres import PostgresQueue
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
    "PostgresQueue",
    "Queue",
    "SqliteQueue",
    "SqsQueue",
    "ThreadedQueue",
    "async_queue_twin",
    "open_async_queue",
    "open_queue",
]

for _old, _new in (
    ("aio", "async_adapters"),
    ("sqs_aio", "sqs_async"),
    ("azure_queue_aio", "azure_queue_async"),
):
    alias(__name__, _old, _new)

_LAZY = OPTIONAL
"""The optional classes, as ``idemflow.async_worklist`` re-exports them."""


def __getattr__(name: str) -> Any:
    return load_optional(__name__, name, OPTIONAL)


def open_queue(url: str, *, create: bool = True) -> Queue:
    """A queue from a URL, so workers and the CLI take their queue as configuration.

    ``memory:``, ``sqlite:PATH?name=N``, ``sqs:NAME?endpoint=URL&region=R``,
    ``azure-queue:NAME?connection_string=...`` (or the
    ``AZURE_STORAGE_CONNECTION_STRING`` environment variable); every scheme
    takes ``visibility_timeout=SECONDS`` and ``lanes=true`` (priority lanes: a
    :class:`~idemflow.async_worklist.queues.lanes.LanedQueue` of ``<name>-high``,
    ``<name>`` and ``<name>-low``), the cloud ones ``create=false`` to
    require an existing queue. Query values are percent-decoded with ``+``
    kept, as account keys contain it. Errors name the scheme and what is
    wrong, never the URL itself (its query, a connection string given in its
    place, credentials in an endpoint). ``create=False`` (read-only tools, and those that
    only feed an existing queue) never creates one: a SQLite path with no file is an
    :class:`~idemflow.errors.InvalidInputError` naming it, and a cloud queue must exist.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "q.sqlite3")
    >>> queue = open_queue(f"sqlite:{path}?name=jobs&visibility_timeout=60")
    >>> queue.name, queue.visibility_timeout
    ('jobs', 60.0)
    """
    entry, parsed = _parsed(url)
    if parsed.flag("lanes"):  # priority lanes: <name>-high, <name>, <name>-low
        opener = load(entry.opener, entry.extra)
        return LanedQueue({lane: opener(lane_url(parsed, lane), create=create) for lane in LANES})
    queue: Queue = load(entry.opener, entry.extra)(parsed, create=create)
    return queue


def open_async_queue(url: str, *, create: bool = True) -> AsyncQueue:
    """The :class:`~idemflow.async_worklist.queues.async_adapters.AsyncQueue` a URL names.

    It takes the URLs (and ``create``) of :func:`open_queue`.

    SQS and Azure Queue get their SDKs' asynchronous clients (the ``aio``
    extra); SQLite and memory queues run on threads of their own. Create it on
    the event loop that uses it; ``await queue.close()`` when done.
    """
    entry, parsed = _parsed(url)
    if entry.async_opener is None:
        return to_async_queue(open_queue(url, create=create))
    if parsed.flag("lanes"):
        opener = load(entry.async_opener, "aio")
        return AsyncLanedQueue({lane: opener(lane_url(parsed, lane), create=create) for lane in LANES})
    queue: AsyncQueue = load(entry.async_opener, "aio")(parsed, create=create)
    return queue


def async_queue_twin(queue: Queue) -> AsyncQueue:
    """The asyncio queue on the same queue as blocking ``queue``: on its SDK's asynchronous
    client where its backend has one, else ``queue`` itself on threads of its own.

    A twin on an SDK client has clients of its own: ``await twin.close()`` when done.
    """
    if isinstance(queue, LanedQueue):  # lanes on SDK clients of their own, else on threads as one
        twins = {lane: async_queue_twin(inner) for lane, inner in queue.lanes.items()}
        if all(isinstance(twin, ThreadedQueue) for twin in twins.values()):
            return to_async_queue(queue)
        return AsyncLanedQueue(twins)
    entry = QUEUES.for_blocking(queue)
    if entry is None or entry.twin is None:
        return to_async_queue(queue)
    twin: AsyncQueue = load(entry.twin, "aio")(queue)
    return twin


def _parsed(url: str) -> tuple[Backend, Url]:
    """The registered backend a URL names, and the URL checked against it (nothing opened yet)."""
    parsed = parse_url(url, "queue", QUEUES.parameters(), QUEUES.usage())
    return QUEUES.for_scheme(parsed.scheme), parsed
