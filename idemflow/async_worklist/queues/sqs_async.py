"""Amazon SQS for event loops, on aiobotocore's asynchronous client.

:class:`AsyncSqsQueue` is an :class:`~idemflow.async_worklist.queues.async_adapters.AsyncQueue`:
the same queues, bodies, receipts, dead letters and errors as
:class:`~idemflow.async_worklist.queues.sqs.SqsQueue` (both run the calls of
:mod:`idemflow.async_worklist.queues._sqs_calls`), each call awaited instead of
blocking, ``asyncio.sleep`` between short polls. Needs the ``aio`` extra
(aiobotocore). Operators' calls (``list_dead_letters``, ``redrive``) stay on
the blocking queue: :meth:`AsyncSqsQueue.twin_of` gives the asynchronous twin of one.

No I/O happens before the first call: the client is created then, inside the
running loop (an aiohttp session belongs to its loop), and the queue's URL
resolved (with ``create``, the queue and its ``<name>-dlq`` created), once;
:meth:`AsyncSqsQueue.close` closes the client.

>>> queue = AsyncSqsQueue("jobs", region_name="eu-west-1", visibility_timeout=60)
>>> queue, queue.visibility_timeout
(AsyncSqsQueue('jobs'), 60.0)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from aiobotocore.session import get_session  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, NoRegionError

from idemflow.async_worklist.queues._sqs_calls import (
    CONFIG,
    SQS_MAX_BODY_BYTES,
    Calls,
    Open,
    Pause,
    SdkCall,
    SqsCalls,
    check_options,
    sqs_error,
)
from idemflow.async_worklist.queues.base import DeadLetter, Message
from idemflow.async_worklist.queues.sqs import SqsQueue
from idemflow.core.backlog import QueueStats
from idemflow.core.sdk_calls import adrive
from idemflow.errors import BackendError, ConfigurationError, ErrorCode
from idemflow.stores._aws_sessions import sharing_loader

__all__ = ["AsyncSqsQueue"]

T = TypeVar("T")


class AsyncSqsQueue:
    """An :class:`~idemflow.async_worklist.queues.async_adapters.AsyncQueue` on an SQS standard queue.

    Created like :class:`~idemflow.async_worklist.queues.sqs.SqsQueue` (``client_options``
    go to aiobotocore's ``create_client``: credentials, say), or as :meth:`twin_of` one.
    Use it on one event loop (its client belongs to the loop that first used it).
    """

    max_body_bytes = SQS_MAX_BODY_BYTES

    def __init__(
        self,
        name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        visibility_timeout: float = 30.0,
        create: bool = True,
        **client_options: Any,
    ) -> None:
        self.visibility_timeout = check_options(name, visibility_timeout)
        self.name = name
        self._session = sharing_loader(get_session())
        region = region_name or self._session.get_config_variable("region")
        if not region:
            raise ConfigurationError(
                f"cannot build an SQS client for queue {name!r}: {NoRegionError()}", backend="sqs"
            )
        self._options: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region_name": region,
            "config": CONFIG,
            **client_options,
        }
        self._calls = SqsCalls(name, create, functools.partial(sqs_error, name))
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._connecting = asyncio.Lock()  # the client, created once
        self._opening = asyncio.Lock()  # the queue's URL, resolved once
        self._closed = False

    @classmethod
    def twin_of(cls, queue: SqsQueue) -> AsyncSqsQueue:
        """An asynchronous queue on the same endpoint, region, queue and visibility timeout as ``queue``.

        It creates nothing: ``queue`` resolved (or created) its queues already.
        """
        meta = queue.client.meta
        return cls(
            queue.name,
            endpoint_url=meta.endpoint_url,
            region_name=meta.region_name,
            visibility_timeout=queue.visibility_timeout,
            create=False,
        )

    @property
    def client(self) -> Any:
        """The aiobotocore client, None before first use and after :meth:`close`."""
        return self._client

    def __repr__(self) -> str:
        return f"AsyncSqsQueue({self.name!r})"

    # -- the AsyncQueue protocol -------------------------------------------------------------------

    async def send(self, body: str, *, delay: float = 0.0) -> None:
        await self._run(self._calls.send(body, delay, self.max_body_bytes))

    async def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``min(max_messages, 10)`` messages (SQS's per-call limit), long-polling up to ``wait``."""
        vt = self.visibility_timeout if visibility_timeout is None else visibility_timeout
        return await self._run(self._calls.receive(max_messages, wait, vt))

    async def ack(self, message: Message) -> None:
        await self._run(self._calls.ack(message))

    async def nack(self, message: Message, *, delay: float = 0.0) -> None:
        await self._run(self._calls.nack(message, delay))

    async def extend(self, message: Message, visibility_timeout: float) -> Message:
        return await self._run(self._calls.extend(message, visibility_timeout))

    async def dead_letter(self, message: Message, reason: str) -> None:
        """Send body and reason (a message attribute) to ``<name>-dlq``, then delete the original."""
        await self._run(self._calls.dead_letter(message, reason, self.max_body_bytes))

    async def approximate_size(self) -> int:
        return await self._run(self._calls.approximate_size())

    async def stats(self) -> QueueStats:
        """As :meth:`SqsQueue.stats`, awaited."""
        return await self._run(self._calls.stats())

    async def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """As :meth:`SqsQueue.list_dead_letters`, awaited."""
        return await self._run(self._calls.list_dead_letters(limit))

    async def redrive(self, ids: Iterable[str] | None = None) -> int:
        """As :meth:`SqsQueue.redrive`, awaited."""
        return await self._run(self._calls.redrive(ids))

    async def close(self) -> None:
        """Close the client (and its aiohttp session). Closing again does nothing."""
        async with self._connecting:
            self._closed = True
            stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    # -- calls -------------------------------------------------------------------------------------

    async def _run(self, calls: Calls[T]) -> T:
        return await adrive(calls, self._invoke)

    async def _invoke(self, call: SdkCall) -> Any:
        if isinstance(call, Pause):
            await asyncio.sleep(call.seconds)
            return None
        if isinstance(call, Open):
            return await self._open()
        client = self._client or await self._connect()
        return await getattr(client, call.operation)(**call.kwargs)

    async def _open(self) -> str:
        """The queue's URL, resolved (and with ``create``, the queues created) by the first caller."""
        async with self._opening:
            url = self._calls.url
            if url is None:  # a failure leaves it None: the next call tries again
                url = await self._run(self._calls.open())
            return url

    async def _connect(self) -> Any:
        """The client, created on first use in the running loop."""
        async with self._connecting:
            if self._client is None:
                if self._closed:
                    raise BackendError(
                        f"SQS queue {self.name!r} is closed", code=ErrorCode.CLOSED, backend="sqs"
                    )
                stack = AsyncExitStack()
                try:
                    creating = self._session.create_client("sqs", **self._options)
                    self._client = await stack.enter_async_context(creating)
                except (BotoCoreError, ValueError) as exc:
                    await stack.aclose()
                    raise ConfigurationError(
                        f"cannot build an SQS client for queue {self.name!r}: {exc}", backend="sqs"
                    ) from exc
                self._stack = stack
            return self._client
