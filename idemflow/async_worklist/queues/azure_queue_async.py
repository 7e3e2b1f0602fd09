"""Azure Queue Storage for event loops, on the SDK's own ``azure.storage.queue.aio`` clients.

The same bodies, receipts, dead letters and errors as
:class:`~idemflow.async_worklist.queues.azure_queue.AzureQueue`: both carry
out the per-call logic of :mod:`~idemflow.async_worklist.queues._azure_queue_calls`,
this one awaiting each SDK call (and ``asyncio.sleep`` between the polls of
a waiting receive), so nothing blocks the loop. Operators' calls
(``list_dead_letters``, ``redrive``) stay on the blocking queue:
:meth:`AsyncAzureQueue.twin_of` gives the asynchronous twin of one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from azure.storage.queue.aio import QueueClient, QueueServiceClient

from idemflow.async_worklist.queues._azure_queue_calls import AzureQueueCalls, Call, Calls, Pause, connect
from idemflow.async_worklist.queues.azure_queue import AzureQueue
from idemflow.async_worklist.queues.base import DeadLetter, Message
from idemflow.core.backlog import QueueStats
from idemflow.core.trampoline import atrampoline

T = TypeVar("T")


class AsyncAzureQueue(AzureQueueCalls):
    """An :class:`~idemflow.async_worklist.queues.async_adapters.AsyncQueue` on an Azure storage queue.

    The arguments are :class:`~idemflow.async_worklist.queues.azure_queue.AzureQueue`'s,
    ``sleep`` awaited. Use it on one event loop: its queue clients are made
    there, on first use, and with ``create`` the first call creates the queue
    and its ``<name>-dlq`` when missing (once; again after a failure).
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
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        super().__init__(name, visibility_timeout, clock)
        self._sleep = sleep
        # No I/O yet: the service client holds the account and the pipeline; its aiohttp
        # session opens on the first call, on the running loop.
        self._service = connect(
            lambda: QueueServiceClient.from_connection_string(connection_string, retry_total=retry_total),
            name,
        )
        self._where = f"Azure queue {name!r} (account {self._service.account_name})"
        self._clients: dict[str, QueueClient] = {}
        self._created = not create
        self._creating = asyncio.Lock()
        self._closed = False

    @classmethod
    def twin_of(cls, queue: AzureQueue) -> AsyncAzureQueue:
        """The asynchronous queue on the same account, name, visibility timeout and options as ``queue``."""
        return cls(
            queue.name,
            connection_string=queue._connection_string,  # kept on the blocking queue for its twin
            visibility_timeout=queue.visibility_timeout,
            **queue._options,
        )

    def __repr__(self) -> str:
        return f"AsyncAzureQueue({self.name!r})"

    # -- plumbing -----------------------------------------------------------------------------------

    def _client(self, which: str) -> QueueClient:
        """The aio client of the queue or its dlq (made on first use, on the loop)."""
        client = self._clients.get(which)
        if client is None:
            name = f"{self.name}-dlq" if which == "dlq" else self.name
            client = self._clients[which] = self._service.get_queue_client(name)
        return client

    async def _ready(self) -> None:
        """Create the queues, once, whoever calls first (again after a failure)."""
        async with self._creating:
            if not self._created:
                await self._drive(self._create(), creating=True)
                self._created = True

    async def _drive(self, steps: Calls[T], *, creating: bool = False) -> T:
        """Carry out ``steps``' SDK calls on the loop, to their value.

        The queues are created before the first call reaches Azure, so the
        argument checks that precede it fail as on the blocking queue.
        """

        async def answer(request: Call | Pause) -> Any:
            if isinstance(request, Pause):
                await self._sleep(request.seconds)
                return None
            if not (self._created or creating):
                await self._ready()  # its errors are mapped already: no call's handler catches them
            found = getattr(self._client(request.which), request.method)(*request.args, **request.kwargs)
            return [item async for item in found] if request.collect else await found

        return await atrampoline(steps, answer)

    # -- the protocol -------------------------------------------------------------------------------

    async def send(self, body: str, *, delay: float = 0.0) -> None:
        await self._drive(self._send(body, delay))

    async def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``min(max_messages, 32)`` messages (Azure's per-call limit), polling up to ``wait``."""
        return await self._drive(self._receive(max_messages, wait, visibility_timeout))

    async def ack(self, message: Message) -> None:
        await self._drive(self._ack(message))

    async def nack(self, message: Message, *, delay: float = 0.0) -> None:
        await self._drive(self._nack(message, delay))

    async def extend(self, message: Message, visibility_timeout: float) -> Message:
        return await self._drive(self._extend(message, visibility_timeout))

    async def dead_letter(self, message: Message, reason: str) -> None:
        """As :meth:`AzureQueue.dead_letter`: ownership checked, then to ``<name>-dlq``, then deleted."""
        await self._drive(self._dead_letter(message, reason))

    async def approximate_size(self) -> int:
        return await self._drive(self._approximate_size())

    async def stats(self) -> QueueStats:
        """As :meth:`AzureQueue.stats`, awaited."""
        return await self._drive(self._stats())

    async def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """As :meth:`AzureQueue.list_dead_letters`, awaited."""
        return await self._drive(self._list_dead_letters(limit))

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        """As :meth:`AzureQueue.redrive`, awaited."""
        return await self._drive(self._redrive(ids))

    async def close(self) -> None:
        """Close the clients (and the aiohttp session); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
        await self._service.close()
