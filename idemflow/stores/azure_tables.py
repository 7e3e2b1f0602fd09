"""The Azure Table Storage store: one entity group transaction per commit.

Layout: logical table ``T`` is the Azure table ``prefix + T``; a row is the
entity ``(PartitionKey, RowKey)`` = the escaped partition and row key (see
:mod:`idemflow.stores._azure_entity`: ``/ \\ # ? % ~``, control characters and
U+2028/U+2029 become ``~XXXX``, injectively). The UTF-8 of its canonical
JSON text is split over binary properties ``v0``, ``v1``, … (``vn`` chunks;
binary because its size on the wire does not depend on the characters);
``expires_at`` is a float when set. The row version is the entity's ETag,
which changes on every write.

Azure batches are limited to one table and partition, 100 operations and
4 MiB, and have no pure "must be absent" condition. Why tombstones: a
``Check``/``Delete`` expecting an absent row must still fail if someone
creates the row before the batch lands, so it *creates* a tombstone entity
(``tomb`` = true, no value), which fails exactly then. Reads and scans treat a
tombstone as absent; an insert meeting one re-reads it and writes over it
under its ETag, so tombstones never cause false conflicts (the store
remembers the ETags of tombstones it has seen or written, so that usually
costs no extra round trip). A blind ``Delete`` deletes the entity, or writes
a tombstone if there was none to delete.

Azure cannot add server-side, so ``Increment`` reads the row inside
``commit`` and writes old + delta under its ETag, retrying itself when only
that row moved. Azure reports one failing operation per batch (the first);
the protocol allows that.

Rows expire by themselves (:mod:`idemflow.stores.expiry`): at most once per
``expire_every`` seconds a ``commit`` starts a sweep on a thread of the
store, off the caller's path. Azure has no secondary index, so a sweep reads
one page (``expires_at lt now``, at most 100 entities) of each table, resuming
where the last sweep stopped, and settles it; tombstones are deleted too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from azure.core.exceptions import ResourceExistsError
from azure.data.tables import TableClient, TableServiceClient

from idemflow.core.policy import DEFAULT_POLICY, pause
from idemflow.core.requests import Sleep
from idemflow.core.trampoline import trampoline
from idemflow.keys import RUNS_TABLE
from idemflow.stores._azure_batch import AZURE_CAPABILITIES
from idemflow.stores._azure_calls import (
    AzureCalls,
    Call,
    Calls,
    Page,
)
from idemflow.stores._azure_clients import table_client
from idemflow.stores._azure_commits import commit
from idemflow.stores._azure_layout import (
    assemble,
    logical_tables,
    open_service,
    read_jobs,
    sweep_order,
    table_range,
)
from idemflow.stores._azure_runs import KEY_ORDER, run_page
from idemflow.stores._cache_writer import CacheWriter
from idemflow.stores._expiring import EXPIRE_EVERY, LIMIT, swept
from idemflow.stores.base import NO_EXPIRY, CommitOutcome, ExpiryReport, Op, Row, RowRef, RunQuery, RunRow
from idemflow.stores.expiry import apply

__all__ = ["AZURE_CAPABILITIES", "AzureTableStore"]

logger = logging.getLogger("idemflow.stores.azure_tables")

T = TypeVar("T")


class AzureTableStore(AzureCalls):
    """A :class:`~idemflow.stores.base.Store` on Azure Table Storage (or Azurite).

    ``client_options`` go to ``TableServiceClient.from_connection_string``
    (``retry_total``, ``connection_timeout``, ``read_timeout``, …). Its
    per-call logic lives in :mod:`idemflow.stores._azure_calls`, shared with
    :class:`~idemflow.stores.azure_tables_async.AsyncAzureTableStore`; this
    class carries the calls out with the blocking SDK. ``expire_every``:
    seconds between two expiry sweeps (None: never; see the module docstring).
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
        # For AsyncAzureTableStore.twin_of; never shown (the string holds the account key).
        self._connection_string = connection_string
        self._client_options = dict(client_options)
        self._clients: dict[str, TableClient] = {}
        self._cache = CacheWriter("azure", self.commit, logger)
        self._readers: ThreadPoolExecutor | None = None  # read_many's concurrent groups
        self._sweeper: ThreadPoolExecutor | None = None  # one expiry sweep at a time, off the callers
        self._sweep: Future[None] | None = None
        self._sweeps_stopped = False
        self._closed = False

    # -- plumbing ---------------------------------------------------------------

    def table_client(self, table: str) -> TableClient:
        """The cached SDK client of logical ``table`` (one per table, shared by threads)."""
        with self._lock:
            client = self._clients.get(table)
            if client is None:
                client = self._clients[table] = table_client(self._service, self.physical(table))
            return client

    def _pool(self) -> ThreadPoolExecutor:
        """The lazily created executor for read_many's concurrent groups."""
        with self._lock:
            if self._closed:
                raise RuntimeError("store closed")
            if self._readers is None:
                self._readers = ThreadPoolExecutor(8, thread_name_prefix="idemflow-azure-read")
            return self._readers

    def _drive(self, steps: Calls[T]) -> T:
        """Carry out ``steps``' SDK calls on this thread, to their value."""
        return trampoline(steps, self._answer)

    def _answer(self, request: Call | Sleep | Page) -> Any:
        if isinstance(request, Sleep):  # a retry's wait
            return pause(request)
        client = self.table_client(request.table)
        self._count()
        if isinstance(request, Page):
            query = client.query_entities(
                request.query, parameters=dict(request.parameters), results_per_page=request.size
            )
            pages: Any = query.by_page(continuation_token=request.token)  # its token: after a page
            entities = list(next(pages, []))
            return entities, pages.continuation_token
        found = getattr(client, request.method)(*request.args, **request.kwargs)
        return list(found) if request.collect else found

    # -- the protocol -----------------------------------------------------------

    def read(self, ref: RowRef) -> Row | None:
        return self._drive(self._read(ref))

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """One call per (table, partition) group, the groups read concurrently.

        Azure has no read across tables; rows of one partition come back from
        one query (``RowKey eq`` alternatives, at most 14 per query: Azure
        allows 15 comparisons in a filter).
        """
        jobs = read_jobs(refs)
        if len(jobs) == 1:
            found = [self._drive(self._read_group([refs[i] for i in jobs[0]]))]
        else:
            pool = self._pool()
            found = list(pool.map(lambda job: self._drive(self._read_group([refs[i] for i in job])), jobs))
        return assemble(len(refs), jobs, found)

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        outcome = self._drive(commit(self, ops))
        if self._expiry.ticks() >= self._expiry.next_at and self._expiry.due():
            self._sweep_later()
        return outcome

    def expire(self, now: float | None = None, limit: int = LIMIT) -> ExpiryReport:
        """Settle one page (at most ``limit`` rows) of each table whose ``expires_at`` is before
        ``now`` (see :mod:`idemflow.stores.expiry`), on the caller's thread."""

        at = self._expiry.clock() if now is None else now
        report = NO_EXPIRY
        for table in sweep_order(self.tables()):
            report += apply(self, self._drive(self._expired_page(table, at, limit)), at)
        self._expiry.passes.note(report, report.found, self.expiry_pass_ended(), at)
        return report

    def _sweep_later(self) -> None:
        """Start the sweep :meth:`commit` found due on the store's sweep thread."""
        with self._lock:
            if not self._sweeps_stopped:
                if self._sweeper is None:
                    self._sweeper = ThreadPoolExecutor(1, thread_name_prefix="idemflow-azure-expiry")
                where = f"Azure tables {self.prefix or '(no prefix)'}"
                self._sweep = self._sweeper.submit(swept, self.expire, self._expiry, where, self.expiry_more)
                return
        self._expiry.done(None, LIMIT)

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self._cache.submit(ops)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        yield from self._drive(self._scan(table, partition))

    runs_order = KEY_ORDER

    def run_page(self, query: RunQuery) -> list[RunRow]:
        """Run records a page at a time, in key order (see :mod:`idemflow.stores._azure_runs`)."""
        return self._drive(run_page(self, query))

    def tables(self) -> list[str]:
        """Logical names of the Azure tables under this store's prefix (a range query on
        ``TableName``, so other prefixes sharing the account cost nothing); resent on a transient error."""
        return DEFAULT_POLICY.resend(self._tables)

    def _tables(self) -> list[str]:
        query = table_range(self.prefix)
        if query is None:
            found = self._service.list_tables()
        else:
            found = self._service.query_tables(query[0], parameters=query[1])
        names: list[str] = []
        try:
            for page in found.by_page():
                self._count()
                names.extend(item.name for item in page)
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise self._error(exc, "", "list tables", "list_tables") from exc
        return logical_tables(self.prefix, names)

    def create_tables(self, *names: str) -> None:
        """Create ``prefix + name`` for each name and for the run-record table (each resent on a
        transient error: creating a table that exists is no error)."""
        for name in dict.fromkeys((*names, RUNS_TABLE)):
            DEFAULT_POLICY.resend(self._create_table, name)

    def _create_table(self, name: str) -> None:
        self._count()
        try:
            self.table_client(name).create_table()
        except ResourceExistsError:
            pass
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise self._error(exc, name, "create table", "create_table") from exc

    def flush(self) -> None:
        """Wait until deferred cache writes and the expiry sweep under way are done."""
        self._cache.flush()
        sweep = self._sweep
        if sweep is not None:
            sweep.result()

    def close(self) -> None:
        self._cache.close()
        with self._lock:
            self._sweeps_stopped = True
            sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.shutdown(wait=True)  # before the clients it uses close
        with self._lock:
            self._closed = True
            readers, self._readers = self._readers, None
            clients, self._clients = list(self._clients.values()), {}
        if readers is not None:
            readers.shutdown(wait=True)
        for client in clients:
            client.close()
        self._service.close()
