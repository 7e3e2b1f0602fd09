"""The DynamoDB store: every commit is one ``TransactWriteItems`` call.

Why DynamoDB fits: a transaction applies up to 100 conditional writes across
tables and partitions all-or-nothing; when it is cancelled it names every
failing item and can return the old item, so a memo hit costs no extra read.

Item layout. Physical table = ``prefix`` + logical table; one item per row:

- ``pk`` (S, hash key) the partition, ``sk`` (S, range key) the encoded row key;
  DynamoDB takes any non-empty UTF-8 there, so nothing needs escaping;
- ``v`` (S) the canonical JSON text of the value, **or** ``n`` (N) for an
  int, float or ``Decimal`` that fits DynamoDB's number type, so that ``ADD``
  increments it server-side. N has no kind, so ``f`` (BOOL) marks a float and
  ``d`` (BOOL) a ``Decimal``; an increment sets the mark of its delta, and the
  row reads back as the widest kind it holds (:mod:`idemflow.number_model`). A row
  without a mark (all of them before 0.2) is an int when integral, else a float;
- ``ver`` (N) the version: random on creation and on every blind write (a
  ``PutItem`` that replaces the whole item), +1 on a conditional Put and on an
  Increment (a row deleted and created again must not repeat an old version, and
  DynamoDB keeps nothing of a deleted item; see :mod:`idemflow.stores._op_rules`).
  An increment that may create the row sends the random first version along with
  its ``+1`` (``if_not_exists``), so this costs no extra request;
- ``expires_at`` (N, epoch seconds) when set: the tables' TTL attribute.

Limits (100 operations, 400 KB per item, 4 MB per transaction, 2048/1024-byte
keys) are checked before sending: an oversize step fails with
:class:`LimitExceededError` and nothing is sent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import boto3.session
import botocore.session
from botocore.exceptions import BotoCoreError

from idemflow.core.policy import pause
from idemflow.core.requests import Sleep
from idemflow.core.sdk_calls import SdkCall, drive
from idemflow.errors import ConfigurationError
from idemflow.stores._aws_sessions import LOADER, LOCK, sharing_loader
from idemflow.stores._cache_writer import CacheWriter
from idemflow.stores._call_count import CallCount
from idemflow.stores._dynamodb_calls import CONFIG, Calls, DynamoDBCalls
from idemflow.stores._dynamodb_items import DYNAMODB_CAPABILITIES, ITEM_LIMIT, PARTITION_LIMIT
from idemflow.stores._dynamodb_runs import KEY_ORDER, run_page
from idemflow.stores._dynamodb_tables import DynamoDBTables
from idemflow.stores.base import CommitOutcome, Op, Row, RowRef, RunQuery, RunRow

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DYNAMODB_CAPABILITIES", "ITEM_LIMIT", "PARTITION_LIMIT", "DynamoDBStore", "store_url"]

log = logging.getLogger("idemflow.stores.dynamodb")
T = TypeVar("T")

_CONFIG = CONFIG
"""The botocore configuration of the client (shared with the asyncio store)."""


def store_url(
    endpoint_url: str | None, region_name: str | None, prefix: str, open_runs_index: bool = False
) -> str:
    """The :func:`~idemflow.open_store` URL of a DynamoDB store."""
    index = "1" if open_runs_index else None
    params = (
        ("endpoint", endpoint_url),
        ("region", region_name),
        ("prefix", prefix),
        ("open_runs_index", index),
    )
    return "dynamodb:?" + "&".join(f"{name}={value}" for name, value in params if value)


def boto3_session() -> boto3.session.Session:
    """A new boto3 session on the process's one botocore loader (:mod:`idemflow.stores._aws_sessions`):
    its credentials and hooks its own, the service models parsed once."""
    with LOCK:  # boto3 adds its own folder to the loader's search path: once is enough
        session = boto3.session.Session(botocore_session=sharing_loader(botocore.session.get_session()))
        paths: list[str] = LOADER.search_paths
        paths[:] = list(dict.fromkeys(paths))
    return session


class DynamoDBStore:
    """A :class:`~idemflow.stores.base.Store` on DynamoDB (or moto server).

    One boto3 low-level client serves every thread (boto3 clients are
    thread-safe). Cache writes go to one background thread, off the caller's path.
    Requests and responses are built and read in :mod:`idemflow.stores._dynamodb_calls`,
    shared with :class:`~idemflow.stores.dynamodb_async.AsyncDynamoDBStore`.
    """

    capabilities = DYNAMODB_CAPABILITIES

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        prefix: str = "",
        client: Any | None = None,
        open_runs_index: bool = False,
    ) -> None:
        self.prefix = prefix
        self._own_client = client is None
        if client is None:
            try:
                client = boto3_session().client(
                    "dynamodb", endpoint_url=endpoint_url, region_name=region_name, config=_CONFIG
                )
            except BotoCoreError as exc:
                raise ConfigurationError(
                    f"cannot create a DynamoDB client ({exc}); give a region", backend="dynamodb"
                ) from exc
        self.client: DynamoDBClient = client
        """The boto3 client (for tools, and fault injection through its event hooks)."""
        self.url = store_url(client.meta.endpoint_url, client.meta.region_name, prefix, open_runs_index)
        """A URL for :func:`~idemflow.open_store` reaching the same tables."""
        self._calls = DynamoDBCalls(prefix, self.url)
        self._tables = DynamoDBTables(self._calls, open_runs_index=open_runs_index)
        self._calls_made = CallCount()
        self._cache = CacheWriter("dynamodb", self.commit, log)

    def table_name(self, table: str) -> str:
        """The physical table of a logical one."""
        return self._calls.table_name(table)

    def read(self, ref: RowRef) -> Row | None:
        return self._run(self._calls.read(ref))

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """One strongly consistent ``BatchGetItem`` per 100 distinct rows (a single row: ``GetItem``).

        Not ``TransactGetItems``: the service cancels a transactional read
        that meets a commit in flight, and a step's reads need no snapshot
        (its commit's conditions check every version read; see
        :mod:`idemflow.engine.tx`). Keys the service leaves unprocessed (throttling)
        are asked again while it makes progress, else the read fails
        transiently and the caller's retry layer backs off.
        """
        return self._run(self._calls.read_many(refs))

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        return self._run(self._calls.commit(ops))

    def commit_cache(self, ops: Sequence[Op]) -> None:
        """Queue the write on the background thread: the caller never waits for it."""
        self._cache.submit(ops)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        yield from self._run(self._calls.scan(table, partition))

    runs_order = KEY_ORDER

    def run_page(self, query: RunQuery) -> list[RunRow]:
        """Run records a page at a time, in key order (see :mod:`idemflow.stores._dynamodb_runs`)."""
        return self._run(run_page(self._tables, query))

    def tables(self) -> list[str]:
        """Logical tables under this prefix: ``ListTables``, keeping valid logical names.

        A prefix that begins another store's prefix (``t`` and ``tx``) sees that store's tables too.
        """
        return self._run(self._tables.names())

    def create_tables(self, *names: str) -> None:
        """Create each table and the runs table (existing ones are fine), wait until ACTIVE, enable TTL."""
        self._run(self._tables.create(*names))

    @property
    def open_runs_index(self) -> bool:
        """Whether :meth:`create_tables` gives the runs table a sparse index of unfinished runs
        (``open_runs_index=1`` in a URL; off by default): 2 index write units per request that
        does not finish in one write, against a scan of every run record when an operator lists
        the open ones. A table that has the index is read through it whatever this says."""
        return self._tables.open_runs_index

    def flush(self) -> None:
        self._cache.flush()

    def close(self) -> None:
        self._cache.close()
        if self._own_client:
            self.client.close()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes), for tests and benchmarks.

        Counted without a lock (:class:`~idemflow.stores._call_count.CallCount`).
        """
        return self._calls_made.value

    def _run(self, calls: Calls[T]) -> T:
        return drive(calls, self._invoke)

    def _invoke(self, call: SdkCall | Sleep) -> Any:
        """Count one backend call and make it (its failure is mapped where it was asked for)."""
        if isinstance(call, Sleep):  # a retry's wait (idemflow.core.policy)
            return pause(call)
        self._calls_made.add()
        if call.waiter:
            return self.client.get_waiter(call.operation).wait(**call.kwargs)  # type: ignore[call-overload]
        return getattr(self.client, call.operation)(**call.kwargs)
