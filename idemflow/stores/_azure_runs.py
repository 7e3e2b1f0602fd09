"""A page of run records on Azure Tables: a query in key order, resumed after the last key given.

Azure Tables has no secondary index and returns entities in key order (partition, then row
key), so a listing cannot come newest first without reading the whole table. A page is one
query for run-record keys after the position (the escaped keys of the last record a page
gave): it costs about ``limit`` entities and stays stable under inserts. Shared by nothing
else, and sans-IO like the rest of the store (:class:`~idemflow.stores._azure_calls.Page`).
"""

from __future__ import annotations

import json
from typing import Any

from idemflow.errors import InvalidInputError
from idemflow.keys import RUN, RUNS_TABLE
from idemflow.serialization import decode
from idemflow.stores import _azure_entity as ent
from idemflow.stores._azure_calls import AzureCalls, Calls, Page
from idemflow.stores._runs_order import wanted
from idemflow.stores.base import Row, RunQuery, RunRow

KEY_ORDER = "key order"

_MAX_READ = 1000
"""Entities one query call may return (Azure's own page limit)."""


def run_page(calls: AzureCalls, query: RunQuery) -> Calls[list[RunRow]]:
    """At most ``query.limit`` run records after ``query.after``, in key order."""
    where, parameters = ["RowKey ge @first and RowKey lt @last"], {"first": RUN, "last": chr(ord(RUN) + 1)}
    if query.workflow is not None:
        where.append("RowKey eq @key")
        parameters["key"] = ent.escape_key(RUN + query.workflow)
    if query.after is not None:
        partition, key = _after(query.after)
        # Spaced out: the SDK finds each parameter as a word between spaces.
        where.append("( PartitionKey gt @part or ( PartitionKey eq @part and RowKey gt @after ) )")
        parameters.update(part=partition, after=key)
    # A status or tags are filtered here, after the query (Azure's filters cannot look into a
    # record's text): ask for more entities a call, not ten calls.
    filtered = query.status is not None or query.open_only or bool(query.tags)
    size = min(_MAX_READ, max(query.limit, 100)) if filtered else query.limit
    page = Page(RUNS_TABLE, " and ".join(where), parameters, size)
    found: list[RunRow] = []
    while len(found) < query.limit:
        try:
            entities, token = yield page
        except Exception as exc:  # every SDK failure becomes a BackendError
            raise calls._error(exc, RUNS_TABLE, "list runs", "query_entities") from exc
        for entity in entities:
            text = ent.entity_text(entity)
            part, key = ent.unescape_key(entity["PartitionKey"]), ent.unescape_key(entity["RowKey"])
            value = None if text is None else decode(text)
            if text is None or not wanted(query, key, value):
                continue
            position = json.dumps([entity["PartitionKey"], entity["RowKey"]])
            found.append(RunRow(position, part, key, Row(value, str(entity.metadata["etag"]))))
            if len(found) == query.limit:
                break
        if token is None:
            break
        page = Page(page.table, page.query, page.parameters, page.size, token)
    return found


def _after(position: str) -> tuple[str, str]:
    """The escaped keys a position holds; :class:`InvalidInputError` if no page gave it."""
    try:
        keys: Any = json.loads(position)
    except (TypeError, ValueError):
        keys = None
    if not isinstance(keys, list) or len(keys) != 2 or not all(isinstance(k, str) for k in keys):
        raise InvalidInputError(f"not a position in a list of runs: {position!r}")
    return keys[0], keys[1]
