"""A page of run records on DynamoDB: a paged scan of the runs table, or of its open-runs index.

DynamoDB cannot order a scan (items come in the order of their partition keys' hashes), and an
index on start times would need one hash key for every record (a hot partition written on every
claim and outcome) or a scan of its shards merged in memory. So pages come in the backend's key
order, each resuming after the key of the last row it gave (``ExclusiveStartKey``, kept in the
position), and cost what they read: about ``limit`` run records, not the table. Unfinished
requests are read from the sparse index of open runs (a ``Query`` for one workflow), or, on a
table made without that index (the default; ``open_runs_index=1`` adds it), by a scan that
keeps the records carrying the index's attribute (every record read: cheap on writes, dear on
listings). Both are
stable under inserts: a page never repeats or skips a record that existed through the listing.
Tags asked for are a ``FilterExpression`` on the record's text (``contains`` of each tag as its
canonical JSON writes it): the items read are the same, fewer come back, and each is checked
again exactly here and by the caller.
"""

from __future__ import annotations

import json
from typing import Any

from idemflow.errors import InvalidInputError
from idemflow.keys import RUN, RUNS_TABLE
from idemflow.serialization import encode
from idemflow.stores._dynamodb_calls import Calls
from idemflow.stores._dynamodb_items import OPEN_ATTRIBUTE, OPEN_INDEX, row
from idemflow.stores._dynamodb_tables import DynamoDBTables
from idemflow.stores._runs_order import wanted
from idemflow.stores.base import RunQuery, RunRow

KEY_ORDER = "key order"

_MAX_READ = 1000
"""Items one call may read: a page of 10 reads about 30 (memos and outbox entries share the table)."""


def run_page(tables: DynamoDBTables, query: RunQuery) -> Calls[list[RunRow]]:
    """At most ``query.limit`` run records after ``query.after``, in key order."""
    calls = tables.calls
    args: dict[str, Any] = {"TableName": calls.table_name(RUNS_TABLE)}
    operation = "scan"
    indexed = query.open_only and (yield from tables.has_open_index())
    keys = ("pk", "sk", OPEN_ATTRIBUTE) if indexed else ("pk", "sk")  # what a position resumes after
    if indexed:
        args["IndexName"] = OPEN_INDEX
        if query.workflow is not None:
            operation = "query"
            args["KeyConditionExpression"] = "#open = :w"
            args["ExpressionAttributeNames"] = {"#open": OPEN_ATTRIBUTE}
            args["ExpressionAttributeValues"] = {":w": {"S": query.workflow}}
    elif query.open_only:  # a table made without the index: every record read, open ones kept
        args["ExpressionAttributeNames"] = {"#open": OPEN_ATTRIBUTE}
        if query.workflow is None:
            args["FilterExpression"] = "attribute_exists(#open)"
        else:
            args["FilterExpression"] = "#open = :w"
            args["ExpressionAttributeValues"] = {":w": {"S": query.workflow}}
    else:  # memos and outbox entries share the table: only run records come back
        args["FilterExpression"] = "begins_with(sk, :run)"
        args["ExpressionAttributeValues"] = {":run": {"S": RUN}}
    if query.tags:
        _filter_tags(args, query)
    start = None if query.after is None else _start_key(query.after, keys)
    found: list[RunRow] = []
    while len(found) < query.limit:
        limit = min(_MAX_READ, max(3 * (query.limit - len(found)), 25))
        extra: dict[str, Any] = {"Limit": limit}
        if start is not None:
            extra["ExclusiveStartKey"] = start
        page = yield from calls.call("list runs", [RUNS_TABLE], operation, {**args, **extra})
        for item in page.get("Items", []):
            got = row(item)
            if wanted(query, item["sk"]["S"], got.value):
                position = json.dumps({name: item[name]["S"] for name in keys}, sort_keys=True)
                found.append(RunRow(position, item["pk"]["S"], item["sk"]["S"], got))
                if len(found) == query.limit:
                    break
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    return found


def _filter_tags(args: dict[str, Any], query: RunQuery) -> None:
    """Keep, server-side, the records whose text holds each tag asked for as a run record's
    canonical JSON spells it (``"customer":"c-1"``): a superset (the text could hold it
    elsewhere, in the input), which :func:`wanted` narrows to the records that carry them."""
    names, values = (
        args.setdefault("ExpressionAttributeNames", {}),
        args.setdefault("ExpressionAttributeValues", {}),
    )
    names["#val"] = "v"
    held = []
    for n, (key, value) in enumerate(query.tags):
        values[f":tg{n}"] = {"S": f"{encode(key)}:{encode(value)}"}
        held.append(f"contains(#val, :tg{n})")
    where = " AND ".join(held)
    found = args.get("FilterExpression")
    args["FilterExpression"] = where if found is None else f"({found}) AND {where}"


def _start_key(position: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``ExclusiveStartKey`` a position holds; :class:`InvalidInputError` if no page gave it."""
    try:
        named = json.loads(position)
    except (TypeError, ValueError):
        named = None
    if (
        not isinstance(named, dict)
        or set(named) != set(keys)
        or not all(isinstance(v, str) for v in named.values())
    ):
        raise InvalidInputError(f"not a position in a list of runs: {position!r}")
    return {name: {"S": value} for name, value in named.items()}
