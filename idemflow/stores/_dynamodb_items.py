"""DynamoDB items and transactions, built from store operations and read back: no I/O here.

Shared by :class:`~idemflow.stores.dynamodb.DynamoDBStore` and
:class:`~idemflow.stores.dynamodb_async.AsyncDynamoDBStore` (through
:mod:`idemflow.stores._dynamodb_calls`); the item layout is described in
:mod:`idemflow.stores.dynamodb`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from idemflow.errors import BackendError, InvalidValueError, LimitExceededError
from idemflow.number_model import DIGITS, exact, is_number
from idemflow.records import open_workflow
from idemflow.serialization import JSON, decode
from idemflow.stores._limits import check_commit
from idemflow.stores._op_rules import expectation, fresh_version, increment_where, version_after
from idemflow.stores.base import Capabilities, Cond, Delete, Expect, Increment, Insert, Op, Put, Row, RowRef

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

ITEM_LIMIT, PARTITION_LIMIT = 400 * 1024, 2048
"""DynamoDB's item and partition-key limits. :data:`DYNAMODB_CAPABILITIES` keep under them with room
for what a row adds to its value: keys (counted in a commit's total), attribute names, version and
expiry (see docs/decisions.md, "Limits: one check per store")."""

DYNAMODB_CAPABILITIES = Capabilities(
    cross_partition_commit=True,
    max_ops_per_commit=100,
    max_value_bytes=ITEM_LIMIT - 19_600,  # 390,000: room for keys (3 KiB), names, version, expiry
    max_commit_bytes=4_000_000,
    max_key_bytes=1024,
    transaction_surcharge=True,
)
OPEN_ATTRIBUTE, OPEN_INDEX = "open", "open"
"""The attribute (the workflow) only run records of unfinished requests carry, and the sparse
global secondary index of the runs table on it: ``runs list --status running|failed`` reads it."""
_NAMES = {
    "#pk": "pk",
    "#val": "v",
    "#num": "n",
    "#ver": "ver",
    "#f": "f",
    "#d": "d",
}
_MARKS = {float: "#f", Decimal: "#d"}
"""The attribute that says a number row holds that kind (N itself has none)."""
_TRUE: AttributeValueTypeDef = {"BOOL": True}
_PLACEHOLDER = re.compile(r"#\w+")
_ONE: AttributeValueTypeDef = {"N": "1"}
_BUMP = "#ver = if_not_exists(#ver, :was) + :one"
"""The version after a write whose row may not exist: version_after() server-side."""
_ANY_ROW = "attribute_exists(#pk) OR attribute_not_exists(#pk)"


def transaction(ops: Sequence[Op], table_name: Callable[[str], str]) -> list[TransactWriteItemTypeDef]:
    """Check the commit against :data:`DYNAMODB_CAPABILITIES` (the store's one limit check),
    then map each operation to one transaction item (same index)."""
    check_commit(ops, DYNAMODB_CAPABILITIES)
    seen: set[tuple[str, str, str]] = set()
    for op in ops:
        ref = op.ref
        if (ref.table, ref.partition, ref.key) in seen:
            problem = "appears twice (a DynamoDB transaction takes one operation per item)"
            raise BackendError(f"commit to {ref.table}/{ref.partition}: row {ref.key!r} {problem}")
        seen.add((ref.table, ref.partition, ref.key))
        key_bytes(ref)  # keys DynamoDB refuses whatever their size: empty, not valid unicode
    return [_item(op, table_name(op.ref.table)) for op in ops]


def _item(op: Op, table: str) -> TransactWriteItemTypeDef:
    target: dict[str, Any] = {"TableName": table, "Key": key(op.ref)}
    if isinstance(op, (Insert, Put)):
        # A blind write (Cond.ANY) is a Put too, with a fresh random version: it replaces the whole
        # item, as an Update that removed every other attribute would, at less server work.
        expect = expectation(op)  # a version (then the row holds it), no row, or anything
        version = version_after(expect if isinstance(expect, int) else None, fresh_version())
        put = {"TableName": target["TableName"], **_condition(expect)}
        put["Item"] = {**target["Key"], **_value(op.value, op.text, version, op.expires_at)}
        opened = open_workflow(op.ref, op.value)
        if opened is not None:  # in the sparse index of open runs
            put["Item"][OPEN_ATTRIBUTE] = {"S": opened}
        if isinstance(op, Insert):  # a memo hit returns the stored memo: no extra read
            put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return {"Put": _named(put)}
    if isinstance(op, Increment):
        delta = number(op.delta)
        if delta is None:
            problem = f"delta {op.delta!r} is not a DynamoDB number"
            raise InvalidValueError(increment_where(op.ref), problem)
        mark = _MARKS.get(type(op.delta))
        adding: dict[str, AttributeValueTypeDef] = {":d": {"N": delta}, **_bump_values()}
        if mark is not None:
            adding[":t"] = _TRUE
        return {
            "Update": _named(
                {
                    **target,
                    "UpdateExpression": f"SET {_BUMP}{'' if mark is None else f', {mark} = :t'} ADD #num :d",
                    "ConditionExpression": "attribute_not_exists(#val)",
                    "ExpressionAttributeValues": adding,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            )
        }
    if isinstance(op, Delete) and op.expect is not Cond.ABSENT:
        return {"Delete": _named({**target, **_condition(op.expect)})}
    # A Check, or a Delete expecting no row (so deleting nothing): a bare condition.
    return {"ConditionCheck": _named({"ConditionExpression": _ANY_ROW, **target, **_condition(op.expect)})}


def _named(action: dict[str, Any]) -> Any:
    """Add the ``#name`` placeholders the expressions use (DynamoDB refuses unused ones)."""
    used = _PLACEHOLDER.findall(action.get("ConditionExpression", "") + action.get("UpdateExpression", ""))
    if used:
        action["ExpressionAttributeNames"] = {name: _NAMES[name] for name in used}
    return action


def _bump_values() -> dict[str, AttributeValueTypeDef]:
    """The values of :data:`_BUMP`: a new row gets a :func:`fresh_version`."""
    return {":was": {"N": str(fresh_version() - 1)}, ":one": _ONE}


def _condition(expect: Expect) -> dict[str, Any]:
    if expect is Cond.ANY:
        return {}
    if expect is Cond.ABSENT:
        return {"ConditionExpression": "attribute_not_exists(#pk)"}
    version = {":ver": {"N": str(int(expect))}}
    return {"ConditionExpression": "#ver = :ver", "ExpressionAttributeValues": version}


def key(ref: RowRef) -> dict[str, AttributeValueTypeDef]:
    return {"pk": {"S": ref.partition}, "sk": {"S": ref.key}}


def key_bytes(ref: RowRef) -> int:
    """Bytes of the key attributes, refusing keys DynamoDB would refuse."""
    where = f"{ref.table}/{ref.partition}"
    try:
        partition, sort = len(ref.partition.encode("utf-8")), len(ref.key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidValueError(where, f"key {ref.key!r} or its partition is not valid unicode") from exc
    if not partition or not sort:
        raise InvalidValueError(where, "DynamoDB keys and partitions must not be empty")
    most = DYNAMODB_CAPABILITIES.max_key_bytes  # also DynamoDB's sort-key limit
    if partition > PARTITION_LIMIT or sort > most:
        problem = f"partition of {partition} bytes (max {PARTITION_LIMIT}) or key of {sort} (max {most})"
        raise LimitExceededError(where, f"{problem}: over DynamoDB's key limits")
    return 4 + partition + sort


def number(value: object) -> str | None:
    """The N text of an int, float or Decimal DynamoDB can hold (:mod:`idemflow.number_model`),
    else None."""
    if not is_number(value):
        return None
    assert isinstance(value, (int, float, Decimal))
    if type(value) is int and len(str(value).lstrip("-")) > DIGITS:  # as DynamoDB counts them
        return None
    try:
        return str(exact(value, "number"))
    except InvalidValueError:
        return None


def _value(
    value: JSON, text: str, version: int, expires_at: float | None
) -> dict[str, AttributeValueTypeDef]:
    held = number(value)
    attrs: dict[str, AttributeValueTypeDef] = {"n": {"N": held}} if held else {"v": {"S": text}}
    mark = _MARKS.get(type(value)) if held else None
    if mark is not None:
        attrs[_NAMES[mark]] = _TRUE
    attrs["ver"] = {"N": str(version)}
    if expires_at is not None:
        attrs["expires_at"] = {"N": str(int(expires_at))}
    return attrs


def row(item: Mapping[str, Any]) -> Row:
    value: JSON
    if "n" in item:
        held = Decimal(item["n"]["N"])
        if "d" in item:
            value = held  # type: ignore[assignment]  # a codec type, as decode() gives it
        elif "f" in item or held != held.to_integral_value():
            value = float(held)
        else:
            value = int(held)
    else:
        value = decode(item["v"]["S"])
    return Row(value, int(item["ver"]["N"]))
