"""The Azure Table Storage store for event loops, on the SDK's own ``azure.data.tables.aio`` clients.

The same rows, batches, tombstones, errors and increments as
:class:`~idemflow.stores.azure_tables.AzureTableStore`: both carry out the
per-call logic of :mod:`idemflow.stores._azure_calls`, this one awaiting
each SDK call (and ``asyncio.sleep`` between an increment's attempts), so
nothing blocks the loop. Tools' calls (``scan``, ``create_tables``) stay on
the blocking store: :meth:`AsyncAzureTableStore.twin_of` gives the
asynchronous twin of one. Rows expire as on the blocking store: a ``commit``
starts the expiry sweep, when due, as a task of the loop (:meth:`flush` and
:meth:`close` wait for it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from azure.data.tables.aio import TableClient, TableServiceClient

from idemflow.core.policy import DEFAULT_POLICY, apause
from idemflow.core.requests import Sleep
from idemflow.core.trampoline import atrampoline
from idemflow.stores._async_cache import AsyncCacheWriter
from idemflow.stores._azure_calls import (
    AzureCalls,
    Call,
    Calls,
    Page,
)
from idemflow.stores._azure_clients import async_table_client
from idemflow.stores._azure_commits import commit
from idemflow.stores._azure_layout import (
    assemble,
    logical_tables,
    open_service,
    read_jobs,
    sweep_order,
    table_range,
)
from idemflow.stores._expiring import EXPIRE_EVERY, LIMIT, aswept
from idemflow.stores.azure_tables import AzureTableStore
from idemflow.stores.base import NO_EXPIRY, CommitOutcome, ExpiryReport, Op, Row, RowRef
from idemflow.stores.expiry import aapply

logger = logging.getLogger("idemflow.stores.azure_tables")

T = TypeVar("T")


class AsyncAzureTableStore(AzureCalls):
    """An :class:`~idemflow.stores.base.AsyncStore` on Azure Table Storage (or Azurite).

    ``client_options`` go to the aio ``TableServiceClient.from_connection_string``
    (``retry_total``, ``connection_timeout``, ``read_timeout``, …). Use it on
    one event loop: its table clients are created there, on first use.
    """

    def __init__(
        self,
        *,
        connection_string: str,
        prefix: str = "",
        expire_every: float | None = EXPIRE_EVERY,
        **client_options: Any,
    ) -> None:
        super().__init__(prefix, expire_every)
        self._service = open_service(
            TableServiceClient.from_connection_string, connection_string, client_options
        )
        self._clients: dict[str, TableClient] = {}
        self._cache = AsyncCacheWriter("azure", self, logger)
        self._sweep: asyncio.Task[None] | None = None

    @classmethod
    def twin_of(cls, store: AzureTableStore) -> AsyncAzureTableStore:
        """The asynchronous store on the same account, prefix and client options as ``store``."""
        return cls(
            connection_string=store._connection_string,  # kept on the blocking store for its twin
            prefix=store.prefix,
            expire_every=store._expiry.every,
            **store._client_options,
        )

    # -- plumbing ---------------------------------------------------------------

    def table_client(self, table: str) -> TableClient:
        """The cached aio client of logical ``table`` (created on first use, on the loop)."""
        client = self._clients.get(table)
        if client is None:
            client = self._clients[table] = async_table_client(self._service, self.physical(table))
        return client

    async def _drive(self, steps: Calls[T]) -> T:
        """Carry out ``steps``' SDK calls on the loop, to their value."""
        return await atrampoline(steps, self._answer)

    async def _answer(self, request: Call | Sleep | Page) -> Any:
        if isinstance(request, Sleep):  # a retry's wait
            return await apause(request)
        client = self.table_client(request.table)
        self._count()
        if isinstance(request, Page):
            query = client.query_entities(
                request.query, parameters=dict(request.parameters), results_per_page=request.size
            )
            pages: Any = query.by_page(continuation_token=request.token)  # its token: after a page
            page = await anext(pages, None)
            entities = [] if page is None else [entity async for entity in page]
            return entities, pages.continuation_token
        found = getattr(client, request.method)(*request.args, **request.kwargs)
        return [item async for item in found] if request.collect else await found

    # -- the protocol -----------------------------------------------------------

    async def read(self, ref: RowRef) -> Row | None:
        return await self._drive(self._read(ref))

    async def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """One call per (table, partition) group (at most 14 rows a query), the groups awaited together."""
        jobs = read_jobs(refs)
        found = await asyncio.gather(*(self._drive(self._read_group([refs[i] for i in job])) for job in jobs))
        return assemble(len(refs), jobs, found)

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        outcome = await self._drive(commit(self, ops))
        if self._expiry.ticks() >= self._expiry.next_at and self._expiry.due():
            if self._cache.closed:
                self._expiry.done(None, LIMIT)
            else:
                where = f"Azure tables {self.prefix or '(no prefix)'}"
                self._sweep = asyncio.create_task(aswept(self.expire, self._expiry, where, self.expiry_more))
        return outcome

    async def expire(self, now: float | None = None, limit: int = LIMIT) -> ExpiryReport:
        """Settle one page (at most ``limit`` rows) of each table whose ``expires_at`` is before
        ``now`` (see :mod:`idemflow.stores.expiry`)."""

        at = self._expiry.clock() if now is None else now
        report = NO_EXPIRY
        for table in sweep_order(await self.tables()):
            report += await aapply(self, await self._drive(self._expired_page(table, at, limit)), at)
        self._expiry.passes.note(report, report.found, self.expiry_pass_ended(), at)
        return report

    async def tables(self) -> list[str]:
        """Logical names of the Azure tables under this store's prefix (as the blocking store's)."""
        return await DEFAULT_POLICY.aresend(self._tables)

    async def _tables(self) -> list[str]:
        query = table_range(self.prefix)
        if query is None:
            found = self._service.list_tables()
        else:
            found = self._service.query_tables(query[0], parameters=query[1])
        names: list[str] = []
        try:
            async for page in found.by_page():
                self._count()
                names.extend([item.name async for item in page])
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise self._error(exc, "", "list tables", "list_tables") from exc
        return logical_tables(self.prefix, names)

    async def scan(self, table: str, partition: str | None = None) -> list[tuple[str, str, Row]]:
        """Every row of a logical table (or one partition) as ``(partition, key, row)``, sorted."""
        return await self._drive(self._scan(table, partition))

    async def commit_cache(self, ops: Sequence[Op]) -> None:
        """Start the write as a task and return at once (see :mod:`idemflow.stores._async_cache`)."""
        self._cache.submit(ops)

    async def flush(self) -> None:
        """Wait until every cache write started before this call, and the expiry sweep under way,
        are done."""
        await self._cache.flush()
        if self._sweep is not None:
            await self._sweep

    async def close(self) -> None:
        """Finish the cache writes under way, then close the clients; a second call does nothing."""
        if self._cache.closed:
            return
        await self._cache.close()
        if self._sweep is not None:
            await self._sweep  # before the clients it uses close
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
        await self._service.close()
