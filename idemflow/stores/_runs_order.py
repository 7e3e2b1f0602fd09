"""Run records newest first: the order and the positions SQLite and the memory store page by.

A run record's place is ``(started, key, partition)``: its start time (``st``; a record 0.1
wrote has only ``at``, when it finished; none at all sorts as 0), then its row key (the
workflow) and partition (the request id), all descending. A position is that triple as JSON
text: the next page is every record strictly below it, so records inserted meanwhile never
shift a page (keyset paging, not offsets), and a new request, started now, lands on the first.

>>> place = Place.of("r-1", "rcheckout", {"st": 5.0, "status": "running"})
>>> Place.parse(place.position()) == place
True
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from idemflow.core.tags import carries, stored_tags
from idemflow.errors import InvalidInputError
from idemflow.keys import RUN, RUNS_TABLE
from idemflow.records import OPEN_STATUSES
from idemflow.stores.base import Row, RowRef, RunQuery, RunRow

NEWEST_FIRST = "newest first"


def started(value: Any) -> float:
    """When the request a run record describes started, as the order counts it."""
    if isinstance(value, dict):
        for field in ("st", "at"):
            at = value.get(field)
            if isinstance(at, (int, float)) and not isinstance(at, bool):
                return float(at)
    return 0.0


def run_started(ref: RowRef, value: Any) -> float | None:
    """The start time of a run record being written, None for any other row (SQLite's
    ``started`` column: only run records are in its index)."""
    return started(value) if ref.table == RUNS_TABLE and ref.key.startswith(RUN) else None


@dataclass(frozen=True, order=True, slots=True)
class Place:
    """A run record's place in the order (compared as a tuple: greater is newer)."""

    started: float
    key: str
    partition: str

    @classmethod
    def of(cls, partition: str, key: str, value: Any) -> Place:
        return cls(started(value), key, partition)

    def position(self) -> str:
        return json.dumps([self.started, self.key, self.partition], separators=(",", ":"))

    @classmethod
    def parse(cls, position: str) -> Place:
        """The place a position names; :class:`InvalidInputError` for text no page gave."""
        try:
            at, key, partition = json.loads(position)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"not a position in a list of runs: {position!r}") from exc
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not isinstance(key, str):
            raise InvalidInputError(f"not a position in a list of runs: {position!r}")
        if not isinstance(partition, str):
            raise InvalidInputError(f"not a position in a list of runs: {position!r}")
        return cls(float(at), key, partition)


def wanted(query: RunQuery, key: str, value: Any) -> bool:
    """Whether a run record passes the query's filters (those a scan applies itself)."""
    if not key.startswith(RUN) or (query.workflow is not None and key != RUN + query.workflow):
        return False
    status = value.get("status") if isinstance(value, dict) else None
    if query.status is not None and status != query.status:
        return False
    held = value.get("tg") if isinstance(value, dict) else None
    if query.tags and not carries(stored_tags(held), query.tags):
        return False
    return not (query.open_only and status not in OPEN_STATUSES)


def newest_first(rows: Iterable[tuple[str, str, str, Row]], query: RunQuery) -> list[RunRow]:
    """A page of ``(table, partition, key, row)`` rows, by a scan: what a store without an index
    of start times does (the memory store)."""
    below = None if query.after is None else Place.parse(query.after)
    candidates = []
    for table, partition, key, row in rows:
        if table != RUNS_TABLE or not wanted(query, key, row.value):
            continue
        place = Place.of(partition, key, row.value)
        if below is not None and not place < below:
            continue
        if query.started_by is not None and place.started > query.started_by:
            continue
        candidates.append((place, row))
    page = heapq.nlargest(query.limit, candidates, key=lambda item: item[0])
    return [RunRow(place.position(), place.partition, place.key, row) for place, row in page]
