"""The three durable backends a benchmark runs on, with what both sides need.

``open_backend(kind)`` is a context manager yielding a :class:`Backend`: a
factory of idemflow stores and queues on fresh tables (a new table prefix per
call, so tables stay small — moto copies a table on every transaction, a cost
that grows with it) and the SDK handles the hand-written baselines use.

- ``sqlite``: files in a temporary folder, WAL with ``synchronous=FULL``
  for idemflow, its queue and the baselines alike;
- ``moto``: one moto server for DynamoDB and another for SQS, started when a
  queue is first asked for (a long poll would otherwise hold moto's single
  request thread);
- ``azurite``: one Azurite for Azure Tables and Queues;
- ``dynamodb-local``: AWS's own DynamoDB engine (DynamoDB Local, Java), SQS from a moto
  server started only if a queue is asked for. It serialises transactions like moto, so
  a benchmark that wants the service's transaction conflicts installs
  :class:`idemflow.testing.conflicts.DynamoDBConflicts` on the clients itself.

``KINDS`` lists every kind; ``DEFAULT_KINDS`` the ones the store-parametrized benchmarks
(calls, users, outbox) run when no ``--stores`` is given.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idemflow.async_worklist.queues.base import Queue  # these paths: the same in the revisions
from idemflow.async_worklist.queues.sqlite import SqliteQueue  # the A/B benchmarks compare
from idemflow.stores import SqliteStore, Store

KINDS = ("sqlite", "moto", "azurite", "dynamodb-local", "postgres")
DEFAULT_KINDS = ("sqlite", "moto", "azurite")
"""What calls, users and outbox run by default (``dynamodb-local`` only when named)."""
LABELS = {
    "sqlite": "SQLite (WAL, synchronous=FULL)",
    "postgres": "PostgreSQL 15 (fsync on)",
    "moto": "DynamoDB + SQS (moto server)",
    "azurite": "Azure Tables + Queues (Azurite)",
    "dynamodb-local": "DynamoDB (DynamoDB Local) + SQS (moto server)",
}

POOL = 64
"""HTTP connections per SDK client: more than the most concurrent users measured."""


def boto_config() -> Any:
    """The botocore config of the baselines: as the DynamoDB store's, with a larger pool."""
    from botocore.config import Config

    return Config(retries={"mode": "standard"}, connect_timeout=5, read_timeout=20, max_pool_connections=POOL)


PREWARM_PAGES = 1200
"""More than SQLite's default auto-checkpoint (1000 pages), so the WAL file is full-size."""


def prewarm_sqlite(path: Path) -> None:
    """Grow a new SQLite file towards its steady state before it is measured.

    A WAL file grows until the first checkpoint (1000 pages), then is reused
    from its start, and commits before that first checkpoint cost about twice
    as much (two plain transactions: 0.54 ms from empty, 0.26 ms after), so a
    variant writing more pages per request would leave the slow phase sooner
    and look cheaper. This grows the WAL and the main file with one large
    transaction in a scratch table, dropped again (its pages go to the free
    list); it is not enough alone, so the benchmarks also run each variant a
    few hundred requests untimed (``warmup``) before measuring.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE bench_prewarm (x BLOB)")
        conn.executemany("INSERT INTO bench_prewarm VALUES (zeroblob(3900))", [()] * PREWARM_PAGES)
        conn.execute("COMMIT")
        conn.execute("DROP TABLE bench_prewarm")
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    finally:
        conn.close()


def plain_sqlite(path: Path) -> sqlite3.Connection:
    """A connection as a careful engineer opens one: WAL, synchronous=FULL, explicit transactions.

    A new file is pre-warmed (:func:`prewarm_sqlite`) first, like every SQLite file measured."""
    if not path.exists():
        prewarm_sqlite(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


@dataclass
class Backend:
    """Factories for one backend; ``close`` releases whatever they made."""

    kind: str
    folder: Path
    make_store: Callable[[str, tuple[str, ...]], Store]
    make_queue: Callable[[str], Queue]
    dynamodb: Any = None
    """boto3 DynamoDB client (moto, DynamoDB Local) for baselines."""
    tables: Any = None
    """azure TableServiceClient (Azurite) for baselines."""
    make_url: Callable[[str], str] | None = None
    """The ``open_store`` / ``open_async_store`` URL of the stores ``make_store`` gives a tag."""
    conninfo: str | None = None
    """The PostgreSQL server's libpq URI, for the hand-written baselines."""
    connection_string: str | None = None
    """Azurite's connection string, for clients a benchmark builds itself (e.g. with its own policies)."""
    _counter: Iterator[int] = field(default_factory=itertools.count)
    _closers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def tag(self, hint: str) -> str:
        """A fresh lower-case alphanumeric prefix for tables, queues and files."""
        return f"{hint}{next(self._counter)}"

    def store(self, tag: str, *tables: str) -> Store:
        store = self.make_store(tag, tables)
        self._closers.append(store.close)
        return store

    def url(self, tag: str) -> str:
        """The URL reaching the tables (or file) of ``store(tag, ...)``, e.g. for ``open_async_store``."""
        if self.make_url is None:
            raise ValueError(f"{self.kind}: no store URL")
        return self.make_url(tag)

    def queue(self, tag: str) -> Queue:
        queue = self.make_queue(tag)
        self._closers.append(queue.close)
        return queue

    def sqlite(self, tag: str) -> sqlite3.Connection:
        """A plain connection to a fresh baseline file."""
        conn = plain_sqlite(self.folder / f"{tag}-plain.sqlite3")
        self._closers.append(conn.close)
        return conn

    def close(self) -> None:
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        self._closers.clear()


def _warm(path: Path) -> Path:
    prewarm_sqlite(path)
    return path


@contextlib.contextmanager
def open_backend(kind: str) -> Iterator[Backend]:
    """Start (or create) the backend ``kind``; stop it and remove its files afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"idemflow-bench-{kind}-"))
    try:
        if kind == "sqlite":
            backend = Backend(
                kind,
                folder,
                make_store=lambda tag, _tables: SqliteStore(_warm(folder / f"{tag}.sqlite3")),
                make_queue=lambda tag: SqliteQueue(
                    _warm(folder / f"{tag}-queue.sqlite3"), visibility_timeout=60
                ),
                make_url=lambda tag: f"sqlite:{folder / f'{tag}.sqlite3'}",
            )
            try:
                yield backend
            finally:
                backend.close()
        elif kind == "moto":
            with _moto_backend(folder) as backend:
                yield backend
        elif kind == "azurite":
            with _azurite_backend(folder) as backend:
                yield backend
        elif kind == "dynamodb-local":
            with _dynamodb_local_backend(folder) as backend:
                yield backend
        elif kind == "postgres":
            with _postgres_backend(folder) as backend:
                yield backend
        else:
            raise ValueError(f"unknown backend {kind!r}; one of {KINDS}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _moto_backend(folder: Path) -> Iterator[Backend]:
    from idemflow.testing.servers import moto_server

    with (
        moto_server() as dynamo,
        _dynamodb_backend("moto", folder, dynamo.endpoint, dynamo.region) as backend,
    ):
        yield backend


@contextlib.contextmanager
def _dynamodb_local_backend(folder: Path) -> Iterator[Backend]:
    from idemflow.testing.servers import dynamodb_local_server

    with (
        dynamodb_local_server() as dynamo,
        _dynamodb_backend("dynamodb-local", folder, dynamo.endpoint, dynamo.region) as backend,
    ):
        yield backend


@contextlib.contextmanager
def _dynamodb_backend(kind: str, folder: Path, endpoint: str, region: str) -> Iterator[Backend]:
    """Stores on the DynamoDB server at ``endpoint``; queues on SQS of a moto server of their own,
    started on demand (a long poll would otherwise hold moto's single request thread, and
    DynamoDB Local has no SQS)."""
    import boto3

    from idemflow.async_worklist.queues.sqs import SqsQueue
    from idemflow.stores.dynamodb import DynamoDBStore
    from idemflow.testing.servers import Moto, moto_server

    with contextlib.ExitStack() as later:
        sqs: list[Moto] = []

        def make_store(tag: str, tables: tuple[str, ...]) -> Store:
            store = DynamoDBStore(endpoint_url=endpoint, region_name=region, prefix=tag)
            store.create_tables(*tables)
            return store

        def make_queue(tag: str) -> Queue:
            if not sqs:
                sqs.append(later.enter_context(moto_server()))
            return SqsQueue(
                tag, endpoint_url=sqs[0].endpoint, region_name=sqs[0].region, visibility_timeout=60
            )

        def make_url(tag: str) -> str:
            return f"dynamodb:?endpoint={endpoint}&region={region}&prefix={tag}"

        client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region, config=boto_config())
        backend = Backend(kind, folder, make_store, make_queue, dynamodb=client, make_url=make_url)
        try:
            yield backend
        finally:
            backend.close()
            client.close()


@contextlib.contextmanager
def _postgres_backend(folder: Path) -> Iterator[Backend]:
    """A throwaway PostgreSQL server (fsync on, PostgreSQL's default); a schema per store."""
    from idemflow.stores.postgres import PostgresStore
    from idemflow.testing.servers import postgres_server

    with postgres_server(fsync=True) as server:

        def make_store(tag: str, tables: tuple[str, ...]) -> Store:
            return PostgresStore(server.conninfo, schema=tag)

        def make_queue(tag: str) -> Queue:
            raise NotImplementedError("no PostgreSQL queue yet")

        backend = Backend(
            "postgres",
            folder,
            make_store,
            make_queue,
            make_url=lambda tag: server.store_url(tag, folder),
            conninfo=server.conninfo,
        )
        try:
            yield backend
        finally:
            backend.close()


@contextlib.contextmanager
def _azurite_backend(folder: Path) -> Iterator[Backend]:
    from urllib.parse import quote

    from azure.data.tables import TableServiceClient

    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.testing.servers import azurite_server

    with azurite_server() as azurite:
        conn = azurite.connection_string

        def make_store(tag: str, tables: tuple[str, ...]) -> Store:
            store = AzureTableStore(connection_string=conn, prefix=tag)
            store.create_tables(*tables)
            return store

        def make_queue(tag: str) -> Queue:
            return AzureQueue(tag.lower(), connection_string=conn, visibility_timeout=60)

        def make_url(tag: str) -> str:
            return f"azure:?connection_string={quote(conn, safe='')}&prefix={tag}"

        service = TableServiceClient.from_connection_string(conn)
        backend = Backend(
            "azurite",
            folder,
            make_store,
            make_queue,
            tables=service,
            make_url=make_url,
            connection_string=conn,
        )
        try:
            yield backend
        finally:
            backend.close()
            service.close()


def create_dynamodb_table(client: Any, name: str) -> None:
    """A baseline table with the same key schema as the store's (``pk``, ``sk``)."""
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
