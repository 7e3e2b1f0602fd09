"""How idemflow's logical tables and reads map onto an Azure Tables account (both clients).

Table names under a prefix, the order a sweep visits them, point reads grouped into filtered
queries, and the service client opened from a connection string without ever showing its key.
Shared by :class:`~idemflow.stores.azure_tables.AzureTableStore` and its asyncio twin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from idemflow.errors import ConfigurationError
from idemflow.keys import RUNS_TABLE
from idemflow.serialization import decode
from idemflow.stores._azure_batch import Raw
from idemflow.stores.base import Row, RowRef

S = TypeVar("S")

_KEYS_PER_QUERY = 14


def open_service(from_connection_string: Callable[..., S], connection_string: str, options: Any) -> S:
    """The SDK's service client (blocking or aio), a malformed string reported without its key.

    azure-core's retries are off (``retry_total=0``) unless ``options`` set them: idemflow
    retries every call itself (:mod:`idemflow.core.policy`), and the two layers would multiply."""
    try:
        return from_connection_string(connection_string, **{"retry_total": 0, **options})
    except ValueError as exc:
        # The SDK's message is generic; the string itself (it holds the key) is never shown.
        raise ConfigurationError(
            "malformed Azure connection string (expected AccountName=...;AccountKey=...;"
            "TableEndpoint=... or UseDevelopmentStorage=true)"
        ) from exc


def table_range(prefix: str) -> tuple[str, dict[str, str]] | None:
    """The ``query_tables`` filter and parameters naming the tables under ``prefix`` (a range
    on ``TableName``, so other prefixes sharing the account cost nothing); None: every table."""
    if not prefix:
        return None
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return "TableName ge @lo and TableName lt @hi", {"lo": prefix, "hi": upper}


def logical_tables(prefix: str, names: Sequence[str]) -> list[str]:
    """Logical names of the Azure tables ``names`` under ``prefix``, sorted."""
    cut = len(prefix)
    return sorted(name[cut:] for name in names if name.startswith(prefix) and len(name) > cut)


def sweep_order(tables: Sequence[str]) -> list[str]:
    """The run-record table last: a sweep removes a finished request's memos before its
    record where it meets both (Azure has no order by expiry to do it for it)."""
    return sorted(tables, key=lambda table: table == RUNS_TABLE)


def read_jobs(refs: Sequence[RowRef]) -> list[list[int]]:
    """Indexes of ``refs`` by (table, partition) group, at most 14 per query (Azure
    allows 15 comparisons in a filter): one round trip each."""
    groups: dict[tuple[str, str], list[int]] = {}
    for index, ref in enumerate(refs):
        groups.setdefault((ref.table, ref.partition), []).append(index)
    return [
        indexes[start : start + _KEYS_PER_QUERY]
        for indexes in groups.values()
        for start in range(0, len(indexes), _KEYS_PER_QUERY)
    ]


def assemble(count: int, jobs: list[list[int]], found: Sequence[list[Raw | None]]) -> list[Row | None]:
    """``read_many``'s answer from each job's entities (tombstones are absent rows)."""
    rows: list[Row | None] = [None] * count
    for job, raws in zip(jobs, found, strict=True):
        for index, raw in zip(job, raws, strict=True):
            rows[index] = None if raw is None or raw[1] is None else Row(decode(raw[1]), raw[0])
    return rows
