"""What one DynamoDB call is billed, by AWS's published on-demand rules: item sizes, write and
read request units, index writes; and the prices that turn them into dollars.

Why apart: it is arithmetic on a call's parameters, its answer and the items it touched (their
images before and after, which :mod:`benchmarks.cost.meter` reads), with no I/O, so it can be
read against the rules line by line and checked against DynamoDB Local's own ``ConsumedCapacity``
(:mod:`benchmarks.cost.calibrate`).

The rules (sources in :mod:`benchmarks.cost`):

- **item size** = for each attribute, the UTF-8 bytes of its name plus its value: a string its
  UTF-8 bytes, a number 1 byte per two significant digits plus 1, a binary its raw bytes, a
  boolean or null 1, a list or map 3 plus 1 per element plus the elements (a map's with their
  names), a set the sum of its members;
- **writes** (``PutItem``, ``UpdateItem``, ``DeleteItem``): 1 WRU per started KB of the larger of
  the item before and after (a delete: the item deleted); a write whose condition fails still
  consumes the size of the existing item, at least 1 WRU;
- **``TransactWriteItems``**: 2 WRU per started KB of each item, ``ConditionCheck`` items
  included. A *cancelled* transaction is not priced by the sources found; it is counted here as
  every item failing its condition at the transactional rate (2 × the existing item's KB, at
  least 2): an upper bound, marked as an assumption on the page;
- **reads**: a strongly consistent ``GetItem`` 1 RRU per started 4 KB (an absent item: 1),
  eventually consistent half; ``BatchGetItem`` each item so; ``TransactGetItems`` twice;
  ``Query``/``Scan`` the total size read, rounded up to 4 KB once (a global index is read
  eventually consistently);
- **global secondary indexes**: a write also writes each index whose entry it creates, changes or
  removes: 1 WRU per started KB of the projected item (a changed index key: a delete and a put).
  DynamoDB Local charges index writes inside a transaction twice; the rule applied here is the
  documented one (once), and the page shows where Local differs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

WRITE_UNIT = 1024
READ_UNIT = 4096
TRANSACTIONAL = 2
INDEX_FACTOR_IN_TRANSACTIONS = 1
"""Index writes of a transaction: once per KB by the documented rule (DynamoDB Local: twice)."""

# AWS on-demand prices, us-east-1 (https://aws.amazon.com/dynamodb/pricing/on-demand/):
USD_PER_MILLION_WRU = 0.625
USD_PER_MILLION_RRU = 0.125
"""A write request unit costs 5 read request units."""

Item = Mapping[str, Any]
"""An item as the low-level API spells it: attribute name -> ``{"S": ...}`` and so on."""


@dataclass
class Units:
    """Request units consumed: writes (of which index writes) and reads."""

    wru: float = 0.0
    rru: float = 0.0
    index_wru: float = 0.0

    def __add__(self, other: Units) -> Units:
        return Units(self.wru + other.wru, self.rru + other.rru, self.index_wru + other.index_wru)

    def __sub__(self, other: Units) -> Units:
        return Units(self.wru - other.wru, self.rru - other.rru, self.index_wru - other.index_wru)

    def scaled(self, factor: float) -> Units:
        return Units(self.wru * factor, self.rru * factor, self.index_wru * factor)

    @property
    def total(self) -> float:
        return self.wru + self.rru

    @property
    def usd_per_million(self) -> float:
        """Dollars per million calls consuming these units, on demand in us-east-1."""
        return self.wru * USD_PER_MILLION_WRU + self.rru * USD_PER_MILLION_RRU


@dataclass(frozen=True)
class Index:
    """A global secondary index: its key attributes and what it projects."""

    name: str
    keys: tuple[str, ...]
    projection: str
    """``ALL``, ``KEYS_ONLY`` or ``INCLUDE``."""
    included: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schema:
    """What pricing needs of a table: its key attributes and global secondary indexes."""

    keys: tuple[str, ...]
    indexes: tuple[Index, ...] = ()


@dataclass
class Target:
    """One item a write call touches: its images before and after (None: absent)."""

    table: str
    key: dict[str, Any]
    kind: str
    """``Put``, ``Update``, ``Delete`` or ``ConditionCheck``."""
    before: Item | None = None
    after: Item | None = None
    failed: bool = False


def number_size(text: str) -> int:
    """Bytes of a number: 1 per two significant digits (leading and trailing zeros trimmed) + 1."""
    try:
        digits = Decimal(text).normalize().as_tuple().digits
    except InvalidOperation:
        digits = tuple(int(c) for c in text if c.isdigit())
    significant = len(digits) if any(digits) else 1
    return math.ceil(significant / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value (without its name)."""
    (kind, held), *_ = value.items()
    if kind == "S":
        return len(str(held).encode("utf-8"))
    if kind == "N":
        return number_size(str(held))
    if kind == "B":
        return len(held) if isinstance(held, (bytes, bytearray)) else len(str(held).encode("utf-8"))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + value_size(element) for element in held)
    if kind == "M":
        return 3 + sum(1 + len(name.encode("utf-8")) + value_size(v) for name, v in held.items())
    if kind == "SS":
        return sum(len(member.encode("utf-8")) for member in held)
    if kind == "NS":
        return sum(number_size(member) for member in held)
    if kind == "BS":
        return sum(len(member) for member in held)
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Item | None) -> int:
    """Bytes of an item: its attributes' names and values (0 for an absent item)."""
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def started(size: int, unit: int) -> int:
    """Units of ``unit`` bytes that ``size`` bytes start (at least one)."""
    return max(1, math.ceil(size / unit))


def projected(item: Item | None, table: Schema, index: Index) -> Item | None:
    """The index's copy of ``item``, or None when the item has no entry in that index."""
    if item is None or any(key not in item for key in index.keys):
        return None
    if index.projection == "ALL":
        return item
    kept = {*table.keys, *index.keys, *(index.included if index.projection == "INCLUDE" else ())}
    return {name: value for name, value in item.items() if name in kept}


def index_writes(target: Target, table: Schema) -> int:
    """Write units the item's change costs the table's global secondary indexes."""
    spent = 0
    for index in table.indexes:
        old, new = projected(target.before, table, index), projected(target.after, table, index)
        if old is None and new is None:
            continue
        if old is None or new is None:  # an entry created or removed
            spent += started(item_size(new if old is None else old), WRITE_UNIT)
        elif any(old.get(key) != new.get(key) for key in index.keys):  # moved: delete + put
            spent += started(item_size(old), WRITE_UNIT) + started(item_size(new), WRITE_UNIT)
        elif old != new:
            spent += started(max(item_size(old), item_size(new)), WRITE_UNIT)
    return spent


def write_units(target: Target, table: Schema, factor: int, index_factor: int) -> Units:
    """A written item: its table's units at ``factor`` per KB, and its indexes' (none if it failed)."""
    if target.failed:
        return Units(wru=factor * started(item_size(target.before), WRITE_UNIT))
    if target.kind == "ConditionCheck":
        return Units(wru=factor * started(item_size(target.before), WRITE_UNIT))
    size = max(item_size(target.before), item_size(target.after))
    index = index_factor * index_writes(target, table)
    return Units(wru=factor * started(size, WRITE_UNIT) + index, index_wru=index)


def read_units(items: Sequence[Item | None], consistent: bool, factor: int = 1) -> float:
    """Items read one by one (``GetItem``, ``BatchGetItem``, ``TransactGetItems``)."""
    per = sum(started(item_size(item), READ_UNIT) for item in items)
    return per * factor * (1.0 if consistent else 0.5)


def call_units(
    operation: str,
    params: Mapping[str, Any],
    answer: Mapping[str, Any],
    targets: Sequence[Target],
    schemas: Mapping[str, Schema],
) -> Units:
    """The units of one call: ``targets`` are its written items with their images (and whether
    each failed); reads are priced from ``answer``."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"):
        return sum((write_units(t, schemas[t.table], 1, 1) for t in targets), Units())
    if operation == "TransactWriteItems":
        return sum(
            (write_units(t, schemas[t.table], TRANSACTIONAL, INDEX_FACTOR_IN_TRANSACTIONS) for t in targets),
            Units(),
        )
    if operation == "GetItem":
        if answer.get("Error"):
            return Units()
        return Units(rru=read_units([answer.get("Item")], bool(params.get("ConsistentRead"))))
    if operation == "BatchGetItem":
        spent = 0.0
        for table, wanted in params.get("RequestItems", {}).items():
            found = list(answer.get("Responses", {}).get(table, []))
            left = len(answer.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []))
            absent: list[Item | None] = [None] * max(0, len(wanted.get("Keys", [])) - len(found) - left)
            spent += read_units([*found, *absent], bool(wanted.get("ConsistentRead")))
        return Units(rru=spent)
    if operation == "TransactGetItems":
        items = [response.get("Item") for response in answer.get("Responses", [])]
        return Units(rru=read_units(items, True, TRANSACTIONAL))
    if operation in ("Query", "Scan"):
        if answer.get("Error"):
            return Units()
        size = sum(item_size(item) for item in answer.get("Items", []))
        consistent = bool(params.get("ConsistentRead")) and "IndexName" not in params
        return Units(rru=started(size, READ_UNIT) * (1.0 if consistent else 0.5))
    return Units()  # the control plane (tables, TTL) is not billed per request


def write_targets(operation: str, params: Mapping[str, Any], schemas: Mapping[str, Schema]) -> list[Target]:
    """The items a write call touches (their images still to be read)."""

    def key_of(table: str, item: Mapping[str, Any]) -> dict[str, Any]:
        return {name: item[name] for name in schemas[table].keys}

    if operation == "PutItem":
        return [Target(params["TableName"], key_of(params["TableName"], params["Item"]), "Put")]
    if operation in ("UpdateItem", "DeleteItem"):
        return [Target(params["TableName"], dict(params["Key"]), operation[:-4])]
    if operation == "TransactWriteItems":
        targets = []
        for entry in params.get("TransactItems", []):
            (kind, action), *_ = entry.items()
            table = action["TableName"]
            key = key_of(table, action["Item"]) if kind == "Put" else dict(action["Key"])
            targets.append(Target(table, key, kind))
        return targets
    if operation == "BatchWriteItem":
        targets = []
        for table, requests in params.get("RequestItems", {}).items():
            for request in requests:
                if "PutRequest" in request:
                    targets.append(Target(table, key_of(table, request["PutRequest"]["Item"]), "Put"))
                else:
                    targets.append(Target(table, dict(request["DeleteRequest"]["Key"]), "Delete"))
        return targets
    return []


def tables_of(operation: str, params: Mapping[str, Any]) -> list[str]:
    """The tables a data-plane call names (whose schemas pricing needs)."""
    if "TableName" in params:
        return [str(params["TableName"])]
    if operation == "TransactWriteItems":
        return [next(iter(entry.values()))["TableName"] for entry in params.get("TransactItems", [])]
    if operation == "TransactGetItems":
        return [entry["Get"]["TableName"] for entry in params.get("TransactItems", [])]
    return [str(name) for name in params.get("RequestItems", {})]


def schema_of(described: Mapping[str, Any]) -> Schema:
    """A table's :class:`Schema` from its ``DescribeTable`` answer."""
    table = described["Table"]
    indexes = tuple(
        Index(
            index["IndexName"],
            tuple(key["AttributeName"] for key in index["KeySchema"]),
            index.get("Projection", {}).get("ProjectionType", "ALL"),
            tuple(index.get("Projection", {}).get("NonKeyAttributes", ())),
        )
        for index in table.get("GlobalSecondaryIndexes") or []
    )
    return Schema(tuple(key["AttributeName"] for key in table["KeySchema"]), indexes)


def reported(answer: Mapping[str, Any]) -> float | None:
    """The ``ConsumedCapacity`` a call answered (a transaction's is a list), or None."""
    consumed = answer.get("ConsumedCapacity")
    if consumed is None:
        return None
    entries = consumed if isinstance(consumed, list) else [consumed]
    return float(sum(entry.get("CapacityUnits", 0.0) for entry in entries))


def local_transaction_units(targets: Sequence[Target], schemas: Mapping[str, Schema]) -> float:
    """What DynamoDB Local 3.3 answers for a ``TransactWriteItems`` (observed, not documented): per
    table, twice the sum of the *distinct* per-item KB counts (two 1 KB items: 2, not 4; a 1 KB
    and a 2 KB item: 6), and index writes twice. Used only to explain where Local's answer
    differs from the documented rules above."""
    sizes: dict[str, set[int]] = {}
    index = 0
    for target in targets:
        size = max(item_size(target.before), item_size(target.after))
        sizes.setdefault(target.table, set()).add(started(size, WRITE_UNIT))
        if not target.failed:
            index += index_writes(target, schemas[target.table])
    return float(TRANSACTIONAL * (sum(sum(units) for units in sizes.values()) + index))
