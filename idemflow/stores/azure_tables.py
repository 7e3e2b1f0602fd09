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
"""

from __future__ import annotations

import http.client
import logging
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import TableClient, TableServiceClient, TableTransactionError

from idemflow.errors import StoreConfigError, StoreError, TransientStoreError
from idemflow.keys import RUNS_TABLE
from idemflow.serialization import decode
from idemflow.stores import _azure_entity as ent
from idemflow.stores._azure_batch import Learned, Operation, Raw, escaped, expects_absent, operation, plan
from idemflow.stores._cache_writer import CacheWriter
from idemflow.stores.base import (
    COMMITTED,
    Capabilities,
    CommitOutcome,
    Cond,
    Conflict,
    Delete,
    Increment,
    Insert,
    Op,
    OpFailure,
    Row,
    RowRef,
)

logger = logging.getLogger("idemflow.stores.azure_tables")

AZURE_CAPABILITIES = Capabilities(
    cross_partition_commit=False,
    max_ops_per_commit=ent.MAX_BATCH_OPS,
    max_value_bytes=450_000,
    max_commit_bytes=3_000_000,  # values travel as base64 (4/3) and a batch body is capped at 4 MiB
    max_key_bytes=ent.MAX_KEY_BYTES // 2,  # 1 KiB of UTF-16: 512 bytes of ASCII; escaping may need more
)

_TABLE = re.compile(r"[A-Za-z][A-Za-z0-9]{2,62}")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_CONDITION_CODES = frozenset({"UpdateConditionNotSatisfied", "EntityAlreadyExists", "ResourceNotFound"})
_KEYS_PER_QUERY = 14
_MAX_ATTEMPTS = 20
"""Batches one commit may send while resolving tombstones and increments."""
_MAX_HINTS = 10_000
"""Tombstone ETags remembered, so writing over a tombstone costs no extra round trip."""


class AzureTableStore:
    """A :class:`~idemflow.stores.base.Store` on Azure Table Storage (or Azurite).

    ``client_options`` go to ``TableServiceClient.from_connection_string``
    (``retry_total``, ``connection_timeout``, ``read_timeout``, …).
    """

    capabilities = AZURE_CAPABILITIES

    def __init__(self, *, connection_string: str, prefix: str = "", **client_options: Any) -> None:
        if prefix and not prefix.isalnum():
            raise StoreConfigError(f"Azure table prefix must be ASCII letters and digits, not {prefix!r}")
        try:
            self._service = TableServiceClient.from_connection_string(connection_string, **client_options)
        except ValueError as exc:
            # The SDK's message is generic; the string itself (it holds the key) is never shown.
            raise StoreConfigError(
                "malformed Azure connection string (expected AccountName=...;AccountKey=...;"
                "TableEndpoint=... or UseDevelopmentStorage=true)"
            ) from exc
        self.prefix = prefix
        self._clients: dict[str, TableClient] = {}
        self._lock = threading.Lock()
        self._round_trips = 0
        self._cache = CacheWriter("azure", self.commit, logger)
        self._readers: ThreadPoolExecutor | None = None  # read_many's concurrent groups
        self._tombstones: dict[tuple[str, str, str], str] = {}  # (table, partition, key) -> ETag
        self._closed = False

    # -- plumbing ---------------------------------------------------------------

    def table_client(self, table: str) -> TableClient:
        """The cached SDK client of logical ``table`` (one per table, shared by threads)."""
        with self._lock:
            client = self._clients.get(table)
            if client is None:
                physical = self.prefix + table
                if not _TABLE.fullmatch(physical):
                    raise StoreConfigError(
                        f"Azure table name {physical!r} (prefix {self.prefix!r} + table {table!r}) must be "
                        "3-63 ASCII letters and digits, starting with a letter"
                    )
                client = self._clients[table] = self._service.get_table_client(physical)
            return client

    def _pool(self) -> ThreadPoolExecutor:
        """The lazily created executor for read_many's concurrent groups."""
        with self._lock:
            if self._closed:
                raise RuntimeError("store closed")
            if self._readers is None:
                self._readers = ThreadPoolExecutor(8, thread_name_prefix="idemflow-azure-read")
            return self._readers

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

    def _count(self) -> None:
        with self._lock:
            self._round_trips += 1

    def _error(self, exc: Exception, table: str, what: str) -> StoreError:
        """The idemflow error for an SDK failure on logical ``table``."""
        physical = self.prefix + table
        if isinstance(exc, (ServiceRequestError, ServiceResponseError, http.client.HTTPException, OSError)):
            return TransientStoreError(
                f"{what} on Azure table {physical!r}: connection failed or its answer was lost "
                f"({type(exc).__name__}); the outcome is unknown, retry"
            )
        if not isinstance(exc, HttpResponseError):
            return StoreError(f"{what} on Azure table {physical!r} failed: {type(exc).__name__}")
        status, code = exc.status_code, _code(exc)
        if code == "TableNotFound":
            return StoreError(
                f"Azure table {physical!r} does not exist: create it with "
                f"`idemflow tables create --store URL {table}` or store.create_tables({table!r})"
            )
        if status in (401, 403) or code in ("AuthenticationFailed", "AuthorizationFailure"):
            return StoreError(
                f"{what} on Azure table {physical!r} was refused (HTTP {status} {code}): check the "
                "AccountName and AccountKey (or SAS token) of the connection string"
            )
        if status in _TRANSIENT_STATUS:
            return TransientStoreError(f"{what} on Azure table {physical!r}: HTTP {status} {code}, retry")
        return StoreError(f"{what} on Azure table {physical!r} failed: HTTP {status} {code}")

    def _get(self, ref: RowRef, partition: str, key: str) -> Raw | None:
        """One point read of escaped keys: ETag and text, or None when absent."""
        client = self.table_client(ref.table)
        self._count()
        try:
            entity = client.get_entity(partition, key)
        except ResourceNotFoundError as exc:
            if _code(exc) == "TableNotFound":
                raise self._error(exc, ref.table, "read") from exc
            self._hint(ref.table, partition, key, None)
            return None
        except Exception as exc:  # every SDK failure becomes a StoreError
            raise self._error(exc, ref.table, "read") from exc
        try:
            raw = str(entity.metadata["etag"]), ent.entity_text(entity)
        except (KeyError, ValueError) as exc:
            raise StoreError(
                f"entity {ref.table}/{ref.partition}/{ref.key[:40]!r} was not written by idemflow"
            ) from exc
        self._hint(ref.table, partition, key, raw)
        return raw

    def _submit(self, table: str, batch: list[Operation]) -> None:
        client = self.table_client(table)
        self._count()
        kind = batch[0][0]
        if len(batch) == 1 and kind in _SINGLE:
            # One write needs no entity group transaction: the plain call is
            # atomic by itself and about 3x cheaper (the run-record insert).
            answers: list[Mapping[str, Any]] = [_single(client, batch[0])]
        else:
            answers = client.submit_transaction(batch)
        for (_, entity, _), answer in zip(batch, answers, strict=False):
            etag = answer.get("etag") if entity.get(ent.TOMB) else None
            raw = None if etag is None else (str(etag), None)
            self._hint(table, entity["PartitionKey"], entity["RowKey"], raw)

    # -- the protocol -----------------------------------------------------------

    def read(self, ref: RowRef) -> Row | None:
        partition, key = escaped(ref)
        raw = self._get(ref, partition, key)
        if raw is None or raw[1] is None:
            return None
        return Row(decode(raw[1]), raw[0])

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """One call per (table, partition) group, the groups read concurrently.

        Azure has no read across tables; rows of one partition come back from
        one query (``RowKey eq`` alternatives, at most 14 per query: Azure
        allows 15 comparisons in a filter).
        """
        groups: dict[tuple[str, str], list[int]] = {}
        for index, ref in enumerate(refs):
            groups.setdefault((ref.table, ref.partition), []).append(index)
        jobs = [
            indexes[start : start + _KEYS_PER_QUERY]
            for indexes in groups.values()
            for start in range(0, len(indexes), _KEYS_PER_QUERY)
        ]
        if len(jobs) == 1:
            found = [self._read_group([refs[i] for i in jobs[0]])]
        else:
            pool = self._pool()
            found = list(pool.map(lambda job: self._read_group([refs[i] for i in job]), jobs))
        rows: list[Row | None] = [None] * len(refs)
        for job, raws in zip(jobs, found, strict=True):
            for index, raw in zip(job, raws, strict=True):
                rows[index] = None if raw is None or raw[1] is None else Row(decode(raw[1]), raw[0])
        return rows

    def _read_group(self, refs: list[RowRef]) -> list[Raw | None]:
        """Rows of one table and partition in one round trip."""
        first = refs[0]
        partition, key = escaped(first)
        if len(refs) == 1:
            return [self._get(first, partition, key)]
        keys = [escaped(ref)[1] for ref in refs]
        params = {"pk": partition} | {f"k{i}": row_key for i, row_key in enumerate(keys)}
        # The SDK substitutes @names between spaces only, hence "( ... )" spaced out.
        query = " or ".join(f"RowKey eq @k{i}" for i in range(len(keys)))
        client = self.table_client(first.table)
        self._count()
        try:
            found = {
                entity["RowKey"]: (str(entity.metadata["etag"]), ent.entity_text(entity))
                for entity in client.query_entities(f"PartitionKey eq @pk and ( {query} )", parameters=params)
            }
        except Exception as exc:  # every SDK failure becomes a StoreError
            raise self._error(exc, first.table, "read") from exc
        for row_key in keys:
            self._hint(first.table, partition, row_key, found.get(row_key))
        return [found.get(row_key) for row_key in keys]

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        if not ops:
            return COMMITTED
        planned = plan(ops)
        partition, keys, first = planned.partition, planned.keys, ops[0].ref
        learned = Learned()
        with self._lock:
            for index, op in enumerate(ops):
                hint = self._tombstones.get((first.table, partition, keys[index]))
                if hint is not None and expects_absent(op):
                    learned.tomb_etags[index] = hint
        for index, op in enumerate(ops):
            if isinstance(op, Increment):
                learned.counters[index] = self._get(op.ref, partition, keys[index])
        for attempt in range(_MAX_ATTEMPTS):
            now = time.time()
            entries = [(index, operation(op, index, planned, learned, now)) for index, op in enumerate(ops)]
            batch = [entry for _, entry in entries if entry is not None]
            positions = [index for index, entry in entries if entry is not None]
            if not batch:
                return COMMITTED
            try:
                self._submit(first.table, batch)
                return COMMITTED
            except TableTransactionError as exc:
                code = _code(exc)
                if code not in _CONDITION_CODES or not 0 <= exc.index < len(positions):
                    raise self._error(exc, first.table, "commit") from exc
                index = positions[exc.index]
            except _SingleFailed:
                index = positions[0]
            except Exception as exc:  # every SDK failure becomes a StoreError
                raise self._error(exc, first.table, "commit") from exc
            op = ops[index]
            if isinstance(op, Increment):  # no read dependency of the caller: read again, retry
                learned.counters[index] = self._get(op.ref, partition, keys[index])
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))  # let the other writer finish
            elif isinstance(op, Delete) and op.expect is Cond.ANY:
                learned.blind_absent.add(index)  # nothing to delete: make it absent with a tombstone
            elif expects_absent(op):
                raw = self._get(op.ref, partition, keys[index])
                if raw is not None and raw[1] is not None:
                    existing = Row(decode(raw[1]), raw[0]) if isinstance(op, Insert) else None
                    return Conflict((OpFailure(index, existing),))
                if raw is None:
                    learned.tomb_etags.pop(index, None)
                else:  # a tombstone: absent all the same, overwrite it under its ETag
                    learned.tomb_etags[index] = raw[0]
            else:
                return Conflict((OpFailure(index),))
        raise TransientStoreError(
            f"commit on Azure table {self.prefix + first.table!r} partition {first.partition!r}: rows kept "
            f"changing under it for {_MAX_ATTEMPTS} attempts, retry"
        )

    def commit_cache(self, ops: Sequence[Op]) -> None:
        self._cache.submit(ops)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        client = self.table_client(table)
        if partition is None:
            found = client.list_entities()
        else:
            found = client.query_entities("PartitionKey eq @pk", parameters={"pk": ent.escape_key(partition)})
        rows: list[tuple[str, str, Row]] = []
        try:
            for page in found.by_page():
                self._count()
                for entity in page:
                    text = ent.entity_text(entity)
                    if text is not None:
                        part, key = (
                            ent.unescape_key(entity["PartitionKey"]),
                            ent.unescape_key(entity["RowKey"]),
                        )
                        rows.append((part, key, Row(decode(text), str(entity.metadata["etag"]))))
        except Exception as exc:  # every SDK failure becomes a StoreError
            raise self._error(exc, table, "scan") from exc
        rows.sort(key=lambda item: (item[0], item[1]))
        yield from rows

    def tables(self) -> list[str]:
        """Logical names of the Azure tables under this store's prefix (a range query on
        ``TableName``, so other prefixes sharing the account cost nothing)."""
        if self.prefix:
            upper = self.prefix[:-1] + chr(ord(self.prefix[-1]) + 1)
            found = self._service.query_tables(
                "TableName ge @lo and TableName lt @hi", parameters={"lo": self.prefix, "hi": upper}
            )
        else:
            found = self._service.list_tables()
        names: list[str] = []
        try:
            for page in found.by_page():
                self._count()
                names.extend(item.name for item in page)
        except Exception as exc:  # every SDK failure becomes a StoreError
            raise self._error(exc, "", "list tables") from exc
        cut = len(self.prefix)
        return sorted(name[cut:] for name in names if name.startswith(self.prefix) and len(name) > cut)

    def create_tables(self, *names: str) -> None:
        """Create ``prefix + name`` for each name and for the run-record table."""
        for name in dict.fromkeys((*names, RUNS_TABLE)):
            client = self.table_client(name)
            self._count()
            try:
                client.create_table()
            except ResourceExistsError:
                pass
            except Exception as exc:  # every SDK failure becomes a StoreError
                raise self._error(exc, name, "create table") from exc

    def flush(self) -> None:
        self._cache.flush()

    def close(self) -> None:
        self._cache.close()
        with self._lock:
            self._closed = True
            readers, self._readers = self._readers, None
            clients, self._clients = list(self._clients.values()), {}
        if readers is not None:
            readers.shutdown(wait=True)
        for client in clients:
            client.close()
        self._service.close()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes), for tests and benchmarks.

        This store's own count, not part of the Store protocol: code given any Store must not use it.
        """
        with self._lock:
            return self._round_trips


_SINGLE = frozenset({"create", "upsert", "update"})


class _SingleFailed(Exception):
    """A single-entity write's condition failed (as a batch's would have, at index 0)."""


def _single(client: TableClient, operation: Operation) -> dict[str, Any]:
    kind, entity, options = operation
    try:
        if kind == "create":
            answer: dict[str, Any] = client.create_entity(entity)
        elif kind == "upsert":
            answer = client.upsert_entity(entity, **options)
        else:
            answer = client.update_entity(entity, **options)
    except ResourceExistsError as exc:
        raise _SingleFailed("EntityAlreadyExists") from exc
    except ResourceNotFoundError as exc:
        if _code(exc) == "TableNotFound":
            raise
        raise _SingleFailed("ResourceNotFound") from exc
    except HttpResponseError as exc:
        if exc.status_code == 412:
            raise _SingleFailed("UpdateConditionNotSatisfied") from exc
        raise
    return answer


def _code(exc: HttpResponseError) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code))
