"""The DynamoDB store for event loops, on aiobotocore's asynchronous client.

:class:`AsyncDynamoDBStore` is an :class:`~idemflow.stores.base.AsyncStore`:
the same tables, items, limits and errors as
:class:`~idemflow.stores.dynamodb.DynamoDBStore` (both run the calls of
:mod:`idemflow.stores._dynamodb_calls`), each call awaited instead of blocking.
Needs the ``aio`` extra (aiobotocore).

The client is created on first use, inside the running loop (an aiohttp
session belongs to its loop), and closed by :meth:`AsyncDynamoDBStore.close`.
Cache writes run as tasks of that loop: the caller never waits for them.

>>> store = AsyncDynamoDBStore(region_name="eu-west-1", prefix="prod")
>>> store.url
'dynamodb:?region=eu-west-1&prefix=prod'
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from aiobotocore.session import get_session  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, NoRegionError

from idemflow.core.policy import apause
from idemflow.core.requests import Sleep
from idemflow.core.sdk_calls import SdkCall, adrive
from idemflow.errors import BackendError, ConfigurationError, ErrorCode
from idemflow.stores._async_cache import AsyncCacheWriter
from idemflow.stores._aws_sessions import sharing_loader
from idemflow.stores._dynamodb_calls import CONFIG, Calls, DynamoDBCalls
from idemflow.stores._dynamodb_items import DYNAMODB_CAPABILITIES
from idemflow.stores._dynamodb_tables import DynamoDBTables
from idemflow.stores.base import CommitOutcome, Op, Row, RowRef
from idemflow.stores.dynamodb import DynamoDBStore, store_url

log = logging.getLogger("idemflow.stores.dynamodb")
T = TypeVar("T")


class AsyncDynamoDBStore:
    """An :class:`~idemflow.stores.base.AsyncStore` on DynamoDB (or moto server, DynamoDB Local).

    Created like :class:`~idemflow.stores.dynamodb.DynamoDBStore`, or as :meth:`twin_of` one.
    Use it on one event loop (its client belongs to the loop that first used it).
    """

    capabilities = DYNAMODB_CAPABILITIES

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        prefix: str = "",
        open_runs_index: bool = False,
        **client_options: Any,
    ) -> None:
        self.prefix = prefix
        self._session = sharing_loader(get_session())
        region = region_name or self._session.get_config_variable("region")
        if not region:
            raise ConfigurationError(
                f"cannot create a DynamoDB client ({NoRegionError()}); give a region", backend="dynamodb"
            )
        self._options: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region_name": region,
            "config": CONFIG,
            **client_options,
        }
        self.url = store_url(endpoint_url, region, prefix, open_runs_index)
        """A URL for :func:`~idemflow.open_store` reaching the same tables."""
        self._calls = DynamoDBCalls(prefix, self.url)
        self._tables = DynamoDBTables(self._calls, open_runs_index=open_runs_index)
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._opening = asyncio.Lock()
        self._round_trips = 0
        self._cache = AsyncCacheWriter("dynamodb", self, log)

    @classmethod
    def twin_of(cls, store: DynamoDBStore) -> AsyncDynamoDBStore:
        """An asynchronous store on the same endpoint, region and tables as ``store``."""
        meta = store.client.meta
        return cls(
            endpoint_url=meta.endpoint_url,
            region_name=meta.region_name,
            prefix=store.prefix,
            open_runs_index=store.open_runs_index,
        )

    def table_name(self, table: str) -> str:
        """The physical table of a logical one."""
        return self._calls.table_name(table)

    @property
    def client(self) -> Any:
        """The aiobotocore client, None before first use and after :meth:`close`."""
        return self._client

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (see :attr:`DynamoDBStore.round_trips`)."""
        return self._round_trips

    # -- the AsyncStore protocol -------------------------------------------------------------------

    async def read(self, ref: RowRef) -> Row | None:
        return await self._run(self._calls.read(ref))

    async def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """One strongly consistent ``BatchGetItem`` per 100 distinct rows (see
        :meth:`DynamoDBStore.read_many`)."""
        return await self._run(self._calls.read_many(refs))

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        return await self._run(self._calls.commit(ops))

    async def commit_cache(self, ops: Sequence[Op]) -> None:
        """Start the write as a task and return: the caller never waits for it
        (see :mod:`idemflow.stores._async_cache`)."""
        self._cache.submit(ops)

    async def flush(self) -> None:
        """Wait until every cache write started before this call is done."""
        await self._cache.flush()

    async def close(self) -> None:
        """Finish the cache writes, then close the client. Closing again does nothing."""
        await self._cache.close()
        async with self._opening:
            stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    # -- tools (the blocking store's, awaited) -----------------------------------------------------

    async def scan(self, table: str, partition: str | None = None) -> list[tuple[str, str, Row]]:
        """Every row of a logical table as ``(partition, key, row)``, sorted (a list: tools only)."""
        return await self._run(self._calls.scan(table, partition))

    async def tables(self) -> list[str]:
        """Logical tables under this prefix (see :meth:`DynamoDBStore.tables`)."""
        return await self._run(self._tables.names())

    async def create_tables(self, *names: str) -> None:
        """Create the tables and the runs table, wait until ACTIVE, enable TTL."""
        await self._run(self._tables.create(*names))

    # -- calls -------------------------------------------------------------------------------------

    async def _run(self, calls: Calls[T]) -> T:
        return await adrive(calls, self._invoke)

    async def _invoke(self, call: SdkCall | Sleep) -> Any:
        if isinstance(call, Sleep):  # a retry's wait (idemflow.core.policy)
            return await apause(call)
        client = self._client or await self._open()
        self._round_trips += 1
        if call.waiter:
            return await client.get_waiter(call.operation).wait(**call.kwargs)
        return await getattr(client, call.operation)(**call.kwargs)

    async def _open(self) -> Any:
        """The client, created on first use in the running loop."""
        async with self._opening:
            if self._client is None:
                if self._cache.closed and not self._cache.pending:
                    raise BackendError(
                        f"{self.url}: the store is closed", code=ErrorCode.CLOSED, backend="dynamodb"
                    )
                stack = AsyncExitStack()
                try:
                    creating = self._session.create_client("dynamodb", **self._options)
                    self._client = await stack.enter_async_context(creating)
                except BotoCoreError as exc:
                    await stack.aclose()
                    raise ConfigurationError(
                        f"cannot create a DynamoDB client ({exc}); give a region"
                    ) from exc
                self._stack = stack
            return self._client

    def __repr__(self) -> str:
        return f"AsyncDynamoDBStore({self.url!r})"
