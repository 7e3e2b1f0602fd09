"""Azure Queue Storage as the work queue (azure-storage-queue), ``<name>-dlq`` for dead letters.

Why Azure Queue: it is the plain at-least-once queue of an Azure storage
account, the same account the Azure Tables store uses. A receive hides a
message for its visibility timeout; ``deliveries`` is its ``dequeue_count``;
every update changes the pop receipt, so :meth:`AzureQueue.extend` returns
the message with its new receipt. There is no long poll: ``receive(wait=...)``
polls with a short backoff through an injectable ``sleep``.

Bodies go as plain text (the SDK's default ``NoEncodePolicy``; base64 would
cost a quarter of the 64 KiB), with the characters XML cannot carry escaped
reversibly (:func:`~idemflow.async_worklist.queues.base.encode_wire`).
Messages never expire (``time_to_live=-1``): a checkpointed workflow must not
silently vanish after Azure's default seven days. The connection string holds
the account key, so it never appears in an error message, log line or repr.

The per-call logic lives in :mod:`~idemflow.async_worklist.queues._azure_queue_calls`,
shared with :class:`~idemflow.async_worklist.queues.azure_queue_async.AsyncAzureQueue`
(the same queue on the SDK's asynchronous client); this class carries the
calls out with the blocking SDK.

>>> AzureQueue.check_name("jobs")
'jobs'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from azure.storage.queue import QueueClient

from idemflow.async_worklist.queues._azure_queue_calls import (
    AZURE_MAX_BODY_BYTES,
    MAX_SECONDS,
    AzureQueueCalls,
    Call,
    Calls,
    Pause,
    azure_error,
    connect,
)
from idemflow.async_worklist.queues.base import DeadLetter, Message, Queue
from idemflow.core.backlog import QueueStats
from idemflow.core.trampoline import trampoline

__all__ = ["AZURE_MAX_BODY_BYTES", "MAX_SECONDS", "AzureQueue", "azure_error"]

T = TypeVar("T")


class AzureQueue(AzureQueueCalls, Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` on an Azure storage queue.

    With ``create`` the queue and its ``<name>-dlq`` are created when
    missing; without it a missing queue is a
    :class:`~idemflow.errors.ConfigurationError` naming the fix. ``retry_total``
    bounds the SDK's own retries before a :class:`TransientError`.

    >>> AzureQueue("Jobs", connection_string="UseDevelopmentStorage=true")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidNameError: invalid Azure queue name 'Jobs': use 3-59 lowercase letters, ...
    """

    def __init__(
        self,
        name: str,
        *,
        connection_string: str,
        visibility_timeout: float = 30.0,
        create: bool = True,
        retry_total: int = 3,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(name, visibility_timeout, clock)
        self._sleep = sleep
        self._client, self._dlq = connect(
            lambda: (
                QueueClient.from_connection_string(connection_string, name, retry_total=retry_total),
                QueueClient.from_connection_string(connection_string, f"{name}-dlq", retry_total=retry_total),
            ),
            name,
        )
        # For AsyncAzureQueue.twin_of; never shown (the string holds the account key).
        self._connection_string = connection_string
        self._options: dict[str, Any] = {"create": create, "retry_total": retry_total}
        self._where = f"Azure queue {name!r} (account {self._client.account_name})"
        if create:
            self._drive(self._create())

    def __repr__(self) -> str:
        return f"AzureQueue({self.name!r})"

    def _drive(self, steps: Calls[T]) -> T:
        """Carry out ``steps``' SDK calls on this thread, to their value."""
        return trampoline(steps, self._answer)

    def _answer(self, request: Call | Pause) -> Any:
        if isinstance(request, Pause):
            self._sleep(request.seconds)
            return None
        client = self._dlq if request.which == "dlq" else self._client
        found = getattr(client, request.method)(*request.args, **request.kwargs)
        return list(found) if request.collect else found

    def send(self, body: str, *, delay: float = 0.0) -> None:
        self._drive(self._send(body, delay))

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``min(max_messages, 32)`` messages (Azure's per-call limit), polling up to ``wait``."""
        return self._drive(self._receive(max_messages, wait, visibility_timeout))

    def ack(self, message: Message) -> None:
        self._drive(self._ack(message))

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        self._drive(self._nack(message, delay))

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        return self._drive(self._extend(message, visibility_timeout))

    def dead_letter(self, message: Message, reason: str) -> None:
        """Send ``reason`` and the body to ``<name>-dlq`` (one text: reason line, then body), then delete.

        Ownership is checked first (an update needs the current pop receipt),
        so a holder that lost the message does not dead-letter a copy of it.
        """
        self._drive(self._dead_letter(message, reason))

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters, read by receiving them briefly and making them visible again at once.

        ``dead_at`` is when the dead letter reached ``<name>-dlq``.
        """
        return self._drive(self._list_dead_letters(limit))

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Receive each from ``<name>-dlq``, send its body to the queue, then delete it from the dlq.

        A dead letter being moved is hidden from other redrives and listings
        for 30 s. A crash between the send and the delete duplicates it (see
        :meth:`Queue.redrive`), harmless for idemflow's continuations.
        """
        return self._drive(self._redrive(ids))

    def approximate_size(self) -> int:
        return self._drive(self._approximate_size())

    def stats(self) -> QueueStats:
        """Azure's approximate total and a peek at the visible front (see ``_stats``)."""
        return self._drive(self._stats())

    def close(self) -> None:
        self._client.close()
        self._dlq.close()
