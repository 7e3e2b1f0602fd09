"""What an Azure table store does per call, once for the blocking and the asyncio store.

Sans-IO: the logic of a read, a ``read_many`` group and a commit (entity
mapping, tombstone hints, error mapping; a commit's batch and its resolution loop
are :mod:`idemflow.stores._azure_commits`') is a
generator that *yields* a :class:`Call` (one SDK call on a logical table's
``TableClient``) or a :class:`~idemflow.core.requests.Sleep` (a retry's wait) and is sent
the answer, or has the SDK's exception thrown in at the ``yield``.
:class:`~idemflow.stores.azure_tables.AzureTableStore` carries the calls out
with the blocking ``TableClient``;
:class:`~idemflow.stores.azure_tables_async.AsyncAzureTableStore` awaits them
on ``azure.data.tables.aio`` clients. Retries are tenacity's (:mod:`idemflow.core.policy`). A call whose
``collect`` is set returns a query's pages: the driver answers with its
entities as a list (the aio client's are iterated asynchronously).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from azure.core.exceptions import (
    ResourceNotFoundError,
)

from idemflow.core.policy import DEFAULT_POLICY, retried
from idemflow.core.requests import Sleep
from idemflow.errors import (
    BackendError,
    ConfigurationError,
    ErrorCode,
    backend_error,
)
from idemflow.serialization import decode
from idemflow.stores import _azure_entity as ent
from idemflow.stores._azure_batch import (
    AZURE_CAPABILITIES,
    Raw,
    escaped,
)
from idemflow.stores._azure_errors import RETRYABLE, classify_exception, code_of
from idemflow.stores._call_count import CallCount
from idemflow.stores._expiring import Backlog, Schedule
from idemflow.stores.base import (
    Expired,
    Row,
    RowRef,
)

T = TypeVar("T")

BACKEND = "azure_tables"

_TABLE = re.compile(r"[A-Za-z][A-Za-z0-9]{2,62}")
_MAX_HINTS = 10_000
"""Tombstone ETags remembered, so writing over a tombstone costs no extra round trip."""


@dataclass(frozen=True, slots=True)
class Call:
    """``TableClient(prefix + table).method(*args, **kwargs)``: answered with its result,
    or (``collect``) with the entities of the query it returns, as a list."""

    table: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    collect: bool = False


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``TableClient(prefix + table).query_entities(query, parameters=...,
    results_per_page=size)``, from ``token`` (None: the first): answered with its
    entities, as a list, and the token of the next page (None after the last)."""

    table: str
    query: str
    parameters: Mapping[str, Any]
    size: int
    token: Any = None


Calls = Generator[Call | Sleep | Page, Any, T]
"""A computation of a store that yields SDK calls and returns a ``T``."""


class AzureCalls:
    """The state and per-call logic both Azure table stores share."""

    capabilities = AZURE_CAPABILITIES

    def __init__(self, prefix: str, expire_every: float | None) -> None:
        if prefix and not prefix.isalnum():
            raise ConfigurationError(f"Azure table prefix must be ASCII letters and digits, not {prefix!r}")
        self.prefix = prefix
        self._lock = threading.Lock()
        self._calls_made = CallCount()
        self._tombstones: dict[tuple[str, str, str], str] = {}  # (table, partition, key) -> ETag
        self._expiry = Schedule(expire_every)
        self._expiry_pages: dict[str, Any] = {}  # table -> where its next expiry query starts

    def expiry_more(self) -> bool:
        """Whether a table's last page had more after it: Azure may end a page short of ``limit``
        (a partition boundary, five seconds of scanning) with a continuation, and a sweep that
        waited ``expire_every`` for each such page would fall behind however few rows it found."""
        return bool(self._expiry_pages)

    @property
    def expiry_backlog(self) -> Backlog | None:
        """What the last complete pass of the sweeps met (see :class:`~idemflow.stores._expiring.Backlog`)."""
        return self._expiry.backlog

    def expiry_pass_ended(self) -> bool:
        """Whether the last sweep reached the end of every table (the next starts a new pass)."""
        return not self._expiry_pages

    def schedule_expiry(self, every: float | None, *, clock: Callable[[], float] = time.time) -> None:
        """Sweep (off the caller's path) after a ``commit`` at most once per ``every`` seconds
        (None: never), rows expiring by ``clock`` (wall time; tests pass a fixed one)."""
        self._expiry = Schedule(every, clock)

    def physical(self, table: str) -> str:
        """The Azure table name of logical ``table``, refused unless Azure accepts it."""
        physical = self.prefix + table
        if not _TABLE.fullmatch(physical):
            raise ConfigurationError(
                f"Azure table name {physical!r} (prefix {self.prefix!r} + table {table!r}) must be "
                "3-63 ASCII letters and digits, starting with a letter"
            )
        return physical

    def _hint(self, table: str, partition: str, key: str, raw: Raw | None) -> None:
        """Remember the ETag of a tombstone just seen (forget any other row), so an
        insert over it can go straight to "update If-Match" (a stale hint only
        costs the resolution a failed batch already pays)."""
        with self._lock:
            self._tombstones.pop((table, partition, key), None)
            if raw is not None and raw[1] is None:
                self._tombstones[(table, partition, key)] = raw[0]
                if len(self._tombstones) > _MAX_HINTS:
                    del self._tombstones[next(iter(self._tombstones))]

    def _tombstone_hints(self, table: str, partition: str, keys: Sequence[str]) -> list[str | None]:
        """The tombstone ETags remembered for ``keys`` of one partition (None: none known), for a
        commit's inserts to overwrite (:mod:`idemflow.stores._azure_commits`)."""
        with self._lock:
            return [self._tombstones.get((table, partition, key)) for key in keys]

    def _count(self) -> None:
        self._calls_made.add()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes), for tests and benchmarks.

        Counted without a lock (:class:`~idemflow.stores._call_count.CallCount`).
        """
        return self._calls_made.value

    def _error(self, exc: Exception, table: str, what: str, operation: str) -> BackendError:
        """The idemflow error for an SDK failure of ``operation`` on logical ``table``."""
        physical = self.prefix + table
        meant, said, status = classify_exception(exc)
        origin = {"backend": BACKEND, "operation": operation, "service_code": said}
        on = f"{what} on Azure table {physical!r}"
        if meant is ErrorCode.TRANSIENT and not status:
            message = (
                f"{on}: connection failed or its answer was lost ({said}); the outcome is unknown, retry"
            )
        elif not status:
            message = f"{on} failed: {said}"
        elif meant is ErrorCode.NOT_FOUND:
            message = (
                f"Azure table {physical!r} does not exist: create it with "
                f"`idemflow tables create --store URL {table}` or store.create_tables({table!r})"
            )
        elif meant is ErrorCode.CREDENTIALS_REFUSED:
            message = (
                f"{on} was refused (HTTP {status} {said}): check the AccountName and AccountKey "
                "(or SAS token) of the connection string"
            )
        elif meant in RETRYABLE:
            message = f"{on}: HTTP {status} {said}, retry"
        else:
            message = f"{on} failed: HTTP {status} {said}"
        return backend_error(message, meant, **origin)

    # -- reads ------------------------------------------------------------------

    def _get(self, ref: RowRef, partition: str, key: str) -> Calls[Raw | None]:
        """One point read of escaped keys: ETag and text, or None when absent."""
        try:
            entity = yield Call(ref.table, "get_entity", (partition, key))
        except ResourceNotFoundError as exc:
            if code_of(exc) == "TableNotFound":
                raise self._error(exc, ref.table, "read", "get_entity") from exc
            self._hint(ref.table, partition, key, None)
            return None
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise self._error(exc, ref.table, "read", "get_entity") from exc
        try:
            raw = str(entity.metadata["etag"]), ent.entity_text(entity)
        except (KeyError, ValueError) as exc:
            raise BackendError(
                f"entity {ref.table}/{ref.partition}/{ref.key[:40]!r} was not written by idemflow",
                backend=BACKEND,
                operation="get_entity",
            ) from exc
        self._hint(ref.table, partition, key, raw)
        return raw

    def _scan(self, table: str, partition: str | None) -> Calls[list[tuple[str, str, Row]]]:
        """Every row of a logical table (or one partition), sorted (tools and reads, not steps)."""
        if partition is None:
            call = Call(table, "list_entities", (), {}, collect=True)
        else:
            query = {"parameters": {"pk": ent.escape_key(partition)}}
            call = Call(table, "query_entities", ("PartitionKey eq @pk",), query, collect=True)
        resending = DEFAULT_POLICY.resending(DEFAULT_POLICY.until())
        entities = yield from retried(resending, lambda: self._list(call))
        rows: list[tuple[str, str, Row]] = []
        for entity in entities:
            text = ent.entity_text(entity)
            if text is not None:
                part, key = ent.unescape_key(entity["PartitionKey"]), ent.unescape_key(entity["RowKey"])
                rows.append((part, key, Row(decode(text), str(entity.metadata["etag"]))))
        rows.sort(key=lambda item: (item[0], item[1]))
        return rows

    def _list(self, call: Call) -> Calls[list[Any]]:
        """One listing call, its failure mapped (resent by :meth:`_scan` on a transient one)."""
        try:
            entities: list[Any] = yield call
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise self._error(exc, call.table, "scan", call.method) from exc
        return entities

    def _expired_page(self, table: str, now: float, limit: int) -> Calls[list[Expired]]:
        """At most ``limit`` rows of ``table`` whose ``expires_at`` is before ``now``: one query,
        resuming where the last one of this store stopped, so each sweep costs one call per
        table and successive sweeps cover the whole table (Azure has no index on it)."""
        token = self._expiry_pages.get(table)
        page = Page(table, "expires_at lt @now", {"now": float(now)}, limit, token)
        try:
            entities, self._expiry_pages[table] = yield page
            if self._expiry_pages[table] is None:
                self._expiry_pages.pop(table)
        except Exception as exc:  # every SDK failure becomes a BackendError
            self._expiry_pages.pop(table, None)
            raise self._error(exc, table, "expiry query", "query_entities") from exc
        found: list[Expired] = []
        for entity in entities:
            try:
                text = ent.entity_text(entity)
            except (KeyError, ValueError):
                continue  # not written by idemflow: not ours to delete
            part, key = ent.unescape_key(entity["PartitionKey"]), ent.unescape_key(entity["RowKey"])
            etag, expires = str(entity.metadata["etag"]), float(entity[ent.EXPIRES_AT])
            found.append(Expired(RowRef(table, part, key), etag, expires, text))
        found.sort(key=lambda item: item.expires_at)
        return found

    def _read(self, ref: RowRef) -> Calls[Row | None]:
        partition, key = escaped(ref)
        raw = yield from self._get(ref, partition, key)
        if raw is None or raw[1] is None:
            return None
        return Row(decode(raw[1]), raw[0])

    def _read_group(self, refs: list[RowRef]) -> Calls[list[Raw | None]]:
        """Rows of one table and partition in one round trip."""
        first = refs[0]
        partition, key = escaped(first)
        if len(refs) == 1:
            return [(yield from self._get(first, partition, key))]
        keys = [escaped(ref)[1] for ref in refs]
        params = {"pk": partition} | {f"k{i}": row_key for i, row_key in enumerate(keys)}
        # The SDK substitutes @names between spaces only, hence "( ... )" spaced out.
        query = " or ".join(f"RowKey eq @k{i}" for i in range(len(keys)))
        try:
            entities = yield Call(
                first.table,
                "query_entities",
                (f"PartitionKey eq @pk and ( {query} )",),
                {"parameters": params},
                collect=True,
            )
            found = {
                entity["RowKey"]: (str(entity.metadata["etag"]), ent.entity_text(entity))
                for entity in entities
            }
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise self._error(exc, first.table, "read", "query_entities") from exc
        for row_key in keys:
            self._hint(first.table, partition, row_key, found.get(row_key))
        return [found.get(row_key) for row_key in keys]
