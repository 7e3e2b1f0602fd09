"""A DynamoDB store's tables: listing them, creating them (with TTL on ``expires_at``), and the
runs table's sparse index of open runs, added to a table made before it and asked for once.

Provisioning is what a deploy runs, apart from the request path: its schemas and its state (whether
the index was seen) have one owner here, :class:`DynamoDBTables`, on the same
:class:`~idemflow.stores._dynamodb_calls.DynamoDBCalls` the store's operations use.
"""

from __future__ import annotations

from typing import Any

from idemflow.errors import InvalidNameError
from idemflow.keys import RUNS_TABLE, check_table
from idemflow.records import open_workflow
from idemflow.stores._dynamodb_calls import Calls, DynamoDBCalls
from idemflow.stores._dynamodb_errors import condition_failed, exists, ttl_on
from idemflow.stores._dynamodb_items import OPEN_ATTRIBUTE, OPEN_INDEX
from idemflow.stores.base import RowRef

SCHEMA: Any = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    "AttributeDefinitions": [{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
    "BillingMode": "PAY_PER_REQUEST",
}
"""Every table's ``CreateTable`` arguments but the name: ``pk`` and ``sk``, billed on demand."""
RUNS_SCHEMA: Any = {
    **SCHEMA,
    "AttributeDefinitions": [
        {"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", OPEN_ATTRIBUTE)
    ],
    "GlobalSecondaryIndexes": [
        {  # sparse: only run records of unfinished requests carry the attribute
            "IndexName": OPEN_INDEX,
            "KeySchema": [
                {"AttributeName": OPEN_ATTRIBUTE, "KeyType": "HASH"},
                {"AttributeName": "pk", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
    ],
}
"""The runs table's, when the store keeps an index of open runs (``open_runs_index=1``)."""


class DynamoDBTables:
    """The tables of the store whose operations ``calls`` makes (``prefix`` + logical name)."""

    def __init__(self, calls: DynamoDBCalls, *, open_runs_index: bool = False) -> None:
        self.calls = calls
        self.open_runs_index = open_runs_index
        """Whether :meth:`create` gives the runs table its sparse index of open runs."""
        self._index_seen: bool | None = None

    def names(self) -> Calls[list[str]]:
        """Logical tables under this prefix: ``ListTables``, keeping valid logical names."""
        names: list[str] = []
        start: dict[str, Any] = {}
        while True:
            page = yield from self.calls.call("list tables", [], "list_tables", start)
            names.extend(page.get("TableNames", []))
            if not page.get("LastEvaluatedTableName"):
                break
            start = {"ExclusiveStartTableName": page["LastEvaluatedTableName"]}
        cut = len(self.calls.prefix)
        return sorted(
            name[cut:] for name in names if name.startswith(self.calls.prefix) and _logical(name[cut:])
        )

    def create(self, *names: str) -> Calls[None]:
        """Create each table and the runs table (existing ones are fine), wait until ACTIVE, enable TTL.

        A table this call created has no TTL yet and, where the service answers it ``ACTIVE`` at
        once (DynamoDB Local, moto), needs no wait: 2 calls each instead of 4. A table that
        existed is waited for and its TTL read before it is enabled (enabling it twice is refused)."""
        tables = list(dict.fromkeys((*names, RUNS_TABLE)))
        self._index_seen = None  # asked again after: this call may add the index
        runs_schema = RUNS_SCHEMA if self.open_runs_index else SCHEMA
        status: dict[str, str | None] = {}  # what CreateTable answered; None: it existed
        for table in tables:  # every creation first: on AWS they become ACTIVE in parallel
            create = {
                "TableName": self.calls.table_name(table),
                **(runs_schema if table == RUNS_TABLE else SCHEMA),
            }
            made = yield from self.calls.call("create table", [table], "create_table", create, exists)
            status[table] = made.get("TableDescription", {}).get("TableStatus") if made else None
        for table in tables:
            name = self.calls.table_name(table)
            if status[table] != "ACTIVE":
                wait = {"TableName": name, "WaiterConfig": {"Delay": 1, "MaxAttempts": 120}}
                yield from self.calls.call("wait for table", [table], "table_exists", wait, waiter=True)
            if status[table] is None:
                ttl = yield from self.calls.call(
                    "describe TTL", [table], "describe_time_to_live", {"TableName": name}
                )
                if ttl.get("TimeToLiveDescription", {}).get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
                    continue
            spec = {"Enabled": True, "AttributeName": "expires_at"}
            enable = {"TableName": name, "TimeToLiveSpecification": spec}
            yield from self.calls.call("enable TTL", [table], "update_time_to_live", enable, ttl_on)
        if self.open_runs_index:
            yield from self._open_index()

    def has_open_index(self) -> Calls[bool]:
        """Whether the runs table has its index of open runs (asked once: a table made without it
        is listed by a filtered scan, and one given it later by :meth:`create` is seen on the
        next store)."""
        if self._index_seen is None:
            index = yield from self._described_open_index()
            self._index_seen = index is not None and index.get("IndexStatus", "ACTIVE") == "ACTIVE"
        return self._index_seen

    def _described_open_index(self) -> Calls[dict[str, Any] | None]:
        """The runs table's index of open runs as ``DescribeTable`` gives it, None if it has none."""
        name = self.calls.table_name(RUNS_TABLE)
        described = yield from self.calls.call(
            "describe table", [RUNS_TABLE], "describe_table", {"TableName": name}
        )
        indexes = described.get("Table", {}).get("GlobalSecondaryIndexes") or []
        return next((index for index in indexes if index.get("IndexName") == OPEN_INDEX), None)

    def _open_index(self) -> Calls[None]:
        """Give a runs table created before 0.2 its index of open runs, and mark its open runs."""
        if (yield from self._described_open_index()) is not None:
            return
        name = self.calls.table_name(RUNS_TABLE)
        update = {
            "TableName": name,
            "AttributeDefinitions": RUNS_SCHEMA["AttributeDefinitions"],
            "GlobalSecondaryIndexUpdates": [{"Create": RUNS_SCHEMA["GlobalSecondaryIndexes"][0]}],
        }
        yield from self.calls.call("add the open-runs index", [RUNS_TABLE], "update_table", update)
        wait = {"TableName": name, "WaiterConfig": {"Delay": 1, "MaxAttempts": 300}}
        yield from self.calls.call("wait for table", [RUNS_TABLE], "table_exists", wait, waiter=True)
        for partition, row_key, found in (yield from self.calls.scan(RUNS_TABLE)):
            opened = open_workflow(RowRef(RUNS_TABLE, partition, row_key), found.value)
            if opened is None:
                continue
            mark = {  # only if the record is still as read: a finish racing this wins
                "TableName": name,
                "Key": {"pk": {"S": partition}, "sk": {"S": row_key}},
                "UpdateExpression": "SET #open = :open",
                "ConditionExpression": "#ver = :ver",
                "ExpressionAttributeNames": {"#open": OPEN_ATTRIBUTE, "#ver": "ver"},
                "ExpressionAttributeValues": {":open": {"S": opened}, ":ver": {"N": str(found.version)}},
            }
            yield from self.calls.call(
                "mark an open run", [RUNS_TABLE], "update_item", mark, condition_failed
            )


def _logical(name: str) -> bool:
    try:
        check_table(name)
    except InvalidNameError:
        return False
    return True
