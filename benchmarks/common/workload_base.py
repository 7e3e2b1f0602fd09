"""What a workload of ``calls`` and ``users`` is made of (:class:`Workload`, :class:`Baseline`),
and the helpers the hand-written baselines share: one plain SQLite connection per thread, an
Azure read-modify-write under an ETag, compact JSON.

Why apart: the survey and the auction workloads, and ``contention``'s and
:mod:`benchmarks.common.exactly_once`'s hand-written versions, all build on these; keeping them here
lets each workload's module hold its application alone.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks.common.backends import Backend
from benchmarks.common.counting import Tally
from idemflow import Idem, Workflow
from idemflow.stores import Store


class Baseline(Protocol):
    tally: Tally

    def __call__(self, i: int) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Workload:
    """A workflow with its input generator, setup and baselines per backend."""

    name: str
    tables: tuple[str, ...]
    workflows: list[Workflow[Any, Any]]
    prepare: Callable[[Store], None]
    request: Callable[[int], Idem[Any]]
    baselines: dict[str, Callable[[Backend, str], Baseline]]

    def baseline(self, backend: Backend, tag: str) -> Baseline:
        return self.baselines[backend.kind](backend, tag)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class _PerThread:
    """One SQLite connection per thread (sqlite3 connections are not shared)."""

    def __init__(self, backend: Backend, tag: str, schema: list[str]) -> None:
        self.path = backend.folder / f"{tag}-plain.sqlite3"
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        conn = self.conn()
        for statement in schema:
            conn.execute(statement)

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            from benchmarks.common.backends import plain_sqlite

            conn = plain_sqlite(self.path)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def _etag_update(
    table: Any, partition: str, row: str, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]
) -> tuple[int, int]:
    """Read-modify-write of one entity under its ETag (Azure has no conditional expressions);
    ``change`` returns the new properties or None to leave it. Returns the (reads, writes) made."""
    from azure.core import MatchConditions
    from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
    from azure.data.tables import UpdateMode

    reads = writes = 0
    while True:
        reads += 1
        try:
            entity = table.get_entity(partition, row)
        except ResourceNotFoundError:
            entity = None
        new = change(None if entity is None else dict(entity))
        if new is None:
            return reads, writes
        writes += 1
        try:
            if entity is None:
                table.create_entity({"PartitionKey": partition, "RowKey": row, **new})
            else:
                table.update_entity(
                    {"PartitionKey": partition, "RowKey": row, **new},
                    mode=UpdateMode.REPLACE,
                    etag=entity.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            return reads, writes
        except ResourceExistsError:
            continue
        except HttpResponseError as exc:
            if exc.status_code == 412:
                continue
            raise
