"""The DynamoDB store: every commit is one ``TransactWriteItems`` call.

Why DynamoDB fits: a transaction applies up to 100 conditional writes across
tables and partitions all-or-nothing; when it is cancelled it names every
failing item and can return the old item, so a memo hit costs no extra read.

Item layout. Physical table = ``prefix`` + logical table; one item per row:

- ``pk`` (S, hash key) the partition, ``sk`` (S, range key) the encoded row key;
  DynamoDB takes any non-empty UTF-8 there, so nothing needs escaping;
- ``v`` (S) the canonical JSON text of the value, **or** ``n`` (N) for an
  int/float that fits DynamoDB's number type, so that ``ADD`` increments it
  server-side (read back as int when integral, else float);
- ``ver`` (N) the version: random on creation, +1 on every Put, Insert, Increment
  (a row deleted and created again must not repeat an old version, and DynamoDB
  keeps nothing of a deleted item; see :mod:`idemflow.stores._ops`). A write
  that may create the row sends the random first version along with its ``+1``
  (``if_not_exists``), so this costs no extra request;
- ``expires_at`` (N, epoch seconds) when set: the tables' TTL attribute.

Limits (100 operations, 400 KB per item, 4 MB per transaction, 2048/1024-byte
keys) are checked before sending: an oversize step fails with
:class:`LimitExceededError` and nothing is sent.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from idemflow.errors import (
    InvalidNameError,
    InvalidValueError,
    LimitExceededError,
    StoreConfigError,
    StoreError,
    TransientStoreError,
)
from idemflow.keys import RUNS_TABLE, check_table
from idemflow.serialization import JSON, decode
from idemflow.stores._cache_writer import CacheWriter
from idemflow.stores._ops import (
    expectation,
    fresh_version,
    increment_where,
    not_a_number,
    version_after,
)
from idemflow.stores.base import (
    COMMITTED,
    Capabilities,
    CommitOutcome,
    Cond,
    Conflict,
    Delete,
    Expect,
    Increment,
    Insert,
    Op,
    OpFailure,
    Put,
    Row,
    RowRef,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, TransactWriteItemTypeDef

log = logging.getLogger("idemflow.stores.dynamodb")
T = TypeVar("T")

DYNAMODB_CAPABILITIES = Capabilities(
    cross_partition_commit=True,
    max_ops_per_commit=100,
    max_value_bytes=390_000,  # the 400 KB item limit less keys and attributes
    max_commit_bytes=4_000_000,
    max_key_bytes=1024,
)
ITEM_LIMIT, PARTITION_LIMIT = 400 * 1024, 2048
"""DynamoDB's item and partition-key limits, checked for callers of ``commit`` other than the
engine (the engine's stricter :data:`DYNAMODB_CAPABILITIES` keep every item and partition under them)."""
_GETS_PER_CALL = 100
_NUMBER_BYTES = 21  # an N attribute: one byte per two of at most 38 digits, plus one
_NAMES = {"#pk": "pk", "#val": "v", "#num": "n", "#ver": "ver", "#exp": "expires_at"}
_PLACEHOLDER = re.compile(r"#\w+")
_ONE: AttributeValueTypeDef = {"N": "1"}
_BUMP = "#ver = if_not_exists(#ver, :was) + :one"
"""The version after a write whose row may not exist: version_after() server-side."""
_ANY_ROW = "attribute_exists(#pk) OR attribute_not_exists(#pk)"
_TRANSIENT = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingError",
        "InternalServerError",
        "ServiceUnavailable",
        "RequestTimeout",
        "TransactionConflict",
        "ProvisionedThroughputExceeded",
        "TransactionConflictException",
        "TransactionInProgressException",
    }
)
_AUTH = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "AccessDeniedException",
        "AccessDenied",
        "MissingAuthenticationTokenException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "IncompleteSignature",
        "SignatureDoesNotMatch",
    }
)
_CONFIG = Config(retries={"mode": "standard"}, connect_timeout=5, read_timeout=20, max_pool_connections=32)
_SCHEMA: Any = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    "AttributeDefinitions": [{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
    "BillingMode": "PAY_PER_REQUEST",
}


class DynamoDBStore:
    """A :class:`~idemflow.stores.base.Store` on DynamoDB (or moto server).

    One boto3 low-level client serves every thread (boto3 clients are
    thread-safe). Cache writes go to one background thread, off the caller's path.
    """

    capabilities = DYNAMODB_CAPABILITIES

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        prefix: str = "",
        client: Any | None = None,
    ) -> None:
        self.prefix = prefix
        self._own_client = client is None
        if client is None:
            try:
                client = boto3.session.Session().client(
                    "dynamodb", endpoint_url=endpoint_url, region_name=region_name, config=_CONFIG
                )
            except BotoCoreError as exc:
                raise StoreConfigError(f"cannot create a DynamoDB client ({exc}); give a region") from exc
        self.client: DynamoDBClient = client
        """The boto3 client (for tools, and fault injection through its event hooks)."""
        meta = client.meta
        params = (("endpoint", meta.endpoint_url), ("region", meta.region_name), ("prefix", prefix))
        self.url = "dynamodb:?" + "&".join(f"{name}={value}" for name, value in params if value)
        """A URL for :func:`~idemflow.stores.open_store` reaching the same tables."""
        self._lock = threading.Lock()
        self._round_trips = 0
        self._cache = CacheWriter("dynamodb", self.commit, log)

    def table_name(self, table: str) -> str:
        """The physical table of a logical one."""
        return self.prefix + table

    def read(self, ref: RowRef) -> Row | None:
        _key_bytes(ref)
        get = partial(self.client.get_item, TableName=self.table_name(ref.table), Key=_key(ref))
        found = self._call("read", [ref.table], partial(get, ConsistentRead=True))
        item = found.get("Item")
        return None if item is None else _row(item)

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        """One strongly consistent ``BatchGetItem`` per 100 distinct rows (a single row: ``GetItem``).

        Not ``TransactGetItems``: the service cancels a transactional read
        that meets a commit in flight, and a step's reads need no snapshot
        (its commit's conditions check every version read; see
        :mod:`idemflow.tx`). Keys the service leaves unprocessed (throttling)
        are asked again while it makes progress, else the read fails
        transiently and the caller's retry layer backs off.
        """
        unique = list(dict.fromkeys(refs))
        if len(unique) == 1:
            return [self.read(unique[0])] * len(refs)
        for ref in unique:
            _key_bytes(ref)
        found: dict[RowRef, Row | None] = {}
        for start in range(0, len(unique), _GETS_PER_CALL):
            chunk = unique[start : start + _GETS_PER_CALL]
            by_key = {(self.table_name(r.table), r.partition, r.key): r for r in chunk}
            wanted: dict[str, Any] = {}
            for name, partition, key in by_key:
                entry = wanted.setdefault(name, {"Keys": [], "ConsistentRead": True})
                entry["Keys"].append({"pk": {"S": partition}, "sk": {"S": key}})
            items = self._batch_get(wanted, sorted({r.table for r in chunk}))
            for name, item in items:
                found[by_key[(name, item["pk"]["S"], item["sk"]["S"])]] = _row(item)
        return [found.get(ref) for ref in refs]

    def _batch_get(self, wanted: dict[str, Any], tables: Sequence[str]) -> list[tuple[str, Any]]:
        """Every item of ``wanted`` (a ``RequestItems``) that exists. Keys left unprocessed are
        asked again at once while some progress is made, else :class:`TransientStoreError`."""
        items: list[tuple[str, Any]] = []
        while wanted:
            got = self._call("read", tables, partial(self.client.batch_get_item, RequestItems=wanted))
            items.extend((name, item) for name, found in got.get("Responses", {}).items() for item in found)
            left = got.get("UnprocessedKeys") or {}
            if left and left == wanted:  # no progress: let the retry layer back off
                raise TransientStoreError(f"{self._what('read', tables)}: keys left unprocessed (throttled)")
            wanted = dict(left)
        return items

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        if not ops:
            return COMMITTED
        items = self._transaction(ops)
        tables = [op.ref.table for op in ops]
        try:
            self._call("commit", tables, partial(self.client.transact_write_items, TransactItems=items))
        except ClientError as exc:  # only TransactionCanceledException gets through _call
            return self._cancelled(ops, exc, tables)
        return COMMITTED

    def commit_cache(self, ops: Sequence[Op]) -> None:
        """Queue the write on the background thread: the caller never waits for it."""
        self._cache.submit(ops)

    def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
        rows: list[tuple[str, str, Row]] = []
        start: Mapping[str, Any] | None = None
        while True:
            page = self._call("scan", [table], partial(self._page, self.table_name(table), partition, start))
            rows.extend((item["pk"]["S"], item["sk"]["S"], _row(item)) for item in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        rows.sort(key=lambda found: (found[0], found[1]))
        yield from rows

    def _page(self, name: str, partition: str | None, start: Mapping[str, Any] | None) -> Mapping[str, Any]:
        extra: dict[str, Any] = {} if start is None else {"ExclusiveStartKey": start}
        if partition is None:
            return self.client.scan(TableName=name, ConsistentRead=True, **extra)
        return self.client.query(
            TableName=name,
            ConsistentRead=True,
            KeyConditionExpression="#pk = :p",
            ExpressionAttributeNames={"#pk": "pk"},
            ExpressionAttributeValues={":p": {"S": partition}},
            **extra,
        )

    def tables(self) -> list[str]:
        """Logical tables under this prefix: ``ListTables``, keeping valid logical names.

        A prefix that begins another store's prefix (``t`` and ``tx``) sees that store's tables too.
        """
        names: list[str] = []
        start: dict[str, Any] = {}
        while True:
            page = self._call("list tables", [], partial(self.client.list_tables, **start))
            names.extend(page.get("TableNames", []))
            if not page.get("LastEvaluatedTableName"):
                break
            start = {"ExclusiveStartTableName": page["LastEvaluatedTableName"]}
        cut = len(self.prefix)
        return sorted(name[cut:] for name in names if name.startswith(self.prefix) and _logical(name[cut:]))

    def create_tables(self, *names: str) -> None:
        """Create each table and the runs table (existing ones are fine), wait until ACTIVE, enable TTL."""
        tables = list(dict.fromkeys((*names, RUNS_TABLE)))
        for table in tables:  # every creation first: on AWS they become ACTIVE in parallel
            self._call("create table", [table], partial(self._create, self.table_name(table)))
        for table in tables:
            name = self.table_name(table)
            waiter = self.client.get_waiter("table_exists")
            wait = partial(waiter.wait, TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
            self._call("wait for table", [table], wait)
            ttl = self._call(
                "describe TTL", [table], partial(self.client.describe_time_to_live, TableName=name)
            )
            if ttl.get("TimeToLiveDescription", {}).get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
                self._call("enable TTL", [table], partial(self._enable_ttl, name))

    def _create(self, name: str) -> None:
        try:
            self.client.create_table(TableName=name, **_SCHEMA)
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":  # it exists already
                raise

    def _enable_ttl(self, name: str) -> None:
        try:
            spec: Any = {"Enabled": True, "AttributeName": "expires_at"}
            self.client.update_time_to_live(TableName=name, TimeToLiveSpecification=spec)
        except ClientError as exc:
            if not (_code(exc) == "ValidationException" and "already" in _message(exc).lower()):
                raise

    def flush(self) -> None:
        self._cache.flush()

    def close(self) -> None:
        self._cache.close()
        if self._own_client:
            self.client.close()

    @property
    def round_trips(self) -> int:
        """Backend calls made so far (reads, commits, cache writes), for tests and benchmarks.

        This store's own count, not part of the Store protocol: code given any Store must not use it.
        """
        return self._round_trips

    # -- calls and errors --------------------------------------------------------------------------

    def _call(self, action: str, tables: Sequence[str], call: Callable[[], T]) -> T:
        """Count one backend call and map its failure onto the idemflow error tree."""
        with self._lock:
            self._round_trips += 1
        try:
            return call()
        except ClientError as exc:
            if _code(exc) == "TransactionCanceledException":
                raise
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            raise self._error(action, tables, _code(exc), _message(exc), status) from exc
        except (BotoConnectionError, HTTPClientError) as exc:  # refused, reset, timed out
            raise TransientStoreError(f"{self._what(action, tables)} failed, worth retrying: {exc}") from exc
        except BotoCoreError as exc:
            hint = "; configure AWS credentials" if "Credential" in type(exc).__name__ else ""
            raise StoreError(f"{self._what(action, tables)} failed: {exc}{hint}") from exc

    def _what(self, action: str, tables: Sequence[str]) -> str:
        physical = sorted({self.table_name(table) for table in tables})
        return f"DynamoDB {action}" + (f" on {', '.join(physical)}" if physical else "")

    def _error(
        self, action: str, tables: Sequence[str], code: str, message: str, status: int = 0
    ) -> Exception:
        """The idemflow error for a DynamoDB error code (of a call or of a cancellation reason)."""
        what = self._what(action, tables)
        if code == "ResourceNotFoundException":
            logical = sorted(set(tables))
            return StoreError(
                f"{what}: table not found or not active; create it with `idemflow tables create --store "
                f"'{self.url}' {' '.join(logical)}` or store.create_tables({', '.join(map(repr, logical))})"
            )
        if code in _TRANSIENT or status >= 500:
            return TransientStoreError(f"{what} failed, worth retrying: {code}: {message}")
        if code in _AUTH:
            fix = "configure AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            return StoreError(f"{what}: credentials refused ({code}: {message}); {fix} allowed these tables")
        if code.startswith("Validation") and re.search(r"size|length", message, re.IGNORECASE):
            return LimitExceededError(what, f"{code}: {message}")
        return StoreError(f"{what} failed: {code}: {message}")

    def _cancelled(self, ops: Sequence[Op], exc: ClientError, tables: Sequence[str]) -> Conflict:
        """A cancelled transaction as a Conflict naming every failed condition, or the error it was."""
        reasons: list[Mapping[str, Any]] = list(exc.response.get("CancellationReasons") or [])
        failures: list[OpFailure] = []
        not_numbers: list[tuple[Increment, Mapping[str, Any] | None]] = []
        for index, (op, reason) in enumerate(zip(ops, reasons, strict=False)):
            if reason.get("Code") != "ConditionalCheckFailed":
                continue
            item = reason.get("Item")
            if isinstance(op, Increment):  # its only condition: the row holds no JSON text
                not_numbers.append((op, item))
            elif isinstance(op, Insert):
                failures.append(OpFailure(index, _row(item) if item else self.read(op.ref)))
            else:
                failures.append(OpFailure(index))
        if failures:  # a definite answer even if another item also met a transient failure
            return Conflict(tuple(failures))
        if not_numbers:
            op, item = not_numbers[0]
            held = type(_row(item).value).__name__ if item else "JSON text"
            raise not_a_number(op.ref, held, " DynamoDB can add") from exc
        raise self._cancel_error("commit", tables, exc) from exc

    def _cancel_error(self, action: str, tables: Sequence[str], exc: ClientError) -> Exception:
        """The error of a transaction cancelled for no failed condition: a permanent reason wins."""
        reasons = [
            r for r in exc.response.get("CancellationReasons") or [] if r.get("Code") not in (None, "None")
        ]
        if not reasons:
            return TransientStoreError(f"{self._what(action, tables)} cancelled: {_message(exc)}")
        worst = next((reason for reason in reasons if reason["Code"] not in _TRANSIENT), reasons[0])
        return self._error(action, tables, str(worst["Code"]), str(worst.get("Message", "")))

    # -- building the transaction ------------------------------------------------------------------

    def _transaction(self, ops: Sequence[Op]) -> list[TransactWriteItemTypeDef]:
        """Check every limit, then map each operation to one transaction item (same index)."""
        where = f"commit to {ops[0].ref.table}/{ops[0].ref.partition}"
        most = DYNAMODB_CAPABILITIES.max_ops_per_commit
        if len(ops) > most:
            raise LimitExceededError(
                where, f"{len(ops)} operations; a DynamoDB transaction holds at most {most}"
            )
        seen: set[tuple[str, str, str]] = set()
        total = 0
        for op in ops:
            ref = op.ref
            if (ref.table, ref.partition, ref.key) in seen:
                problem = "appears twice (a DynamoDB transaction takes one operation per item)"
                raise StoreError(f"commit to {ref.table}/{ref.partition}: row {ref.key!r} {problem}")
            seen.add((ref.table, ref.partition, ref.key))
            size = _key_bytes(ref)
            if isinstance(op, (Put, Insert)):
                size += 1 + (_NUMBER_BYTES if _number(op.value) else len(op.text.encode("utf-8")))
                size += 3 + _NUMBER_BYTES + (0 if op.expires_at is None else 10 + _NUMBER_BYTES)
                if size > ITEM_LIMIT:
                    problem = f"item of {size} bytes exceeds DynamoDB's 400 KB item limit"
                    raise LimitExceededError(f"{ref.table}/{ref.partition}", problem)
            total += size
        if total > DYNAMODB_CAPABILITIES.max_commit_bytes:
            raise LimitExceededError(where, f"{total} bytes exceed DynamoDB's 4 MB transaction limit")
        return [self._item(op) for op in ops]

    def _item(self, op: Op) -> TransactWriteItemTypeDef:
        target: dict[str, Any] = {"TableName": self.table_name(op.ref.table), "Key": _key(op.ref)}
        if isinstance(op, (Insert, Put)) and not (isinstance(op, Put) and op.expect is Cond.ANY):
            expect = expectation(op)  # a version (then the row holds it) or no row
            version = version_after(expect if isinstance(expect, int) else None, fresh_version())
            put = {"TableName": target["TableName"], **_condition(expect)}
            put["Item"] = {**target["Key"], **_value(op.value, op.text, version, op.expires_at)}
            if isinstance(op, Insert):  # a memo hit returns the stored memo: no extra read
                put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            return {"Put": _named(put)}
        if isinstance(op, Put):  # a blind write: the version is unknown, so the server adds 1
            attr, other = ("#num", "#val") if _number(op.value) else ("#val", "#num")
            values = {":x": _value(op.value, op.text, 0, None)[_NAMES[attr]], **_bump_values()}
            sets, removes = [f"{attr} = :x", _BUMP], [other]
            if op.expires_at is None:
                removes.append("#exp")
            else:
                sets.append("#exp = :e")
                values[":e"] = {"N": str(int(op.expires_at))}
            update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)}"
            return {
                "Update": _named({**target, "UpdateExpression": update, "ExpressionAttributeValues": values})
            }
        if isinstance(op, Increment):
            delta = _number(op.delta)
            if delta is None:
                problem = f"delta {op.delta!r} is not a DynamoDB number"
                raise InvalidValueError(increment_where(op.ref), problem)
            return {
                "Update": _named(
                    {
                        **target,
                        "UpdateExpression": f"SET {_BUMP} ADD #num :d",
                        "ConditionExpression": "attribute_not_exists(#val)",
                        "ExpressionAttributeValues": {":d": {"N": delta}, **_bump_values()},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                )
            }
        if isinstance(op, Delete) and op.expect is not Cond.ABSENT:
            return {"Delete": _named({**target, **_condition(op.expect)})}
        # A Check, or a Delete expecting no row (so deleting nothing): a bare condition.
        return {
            "ConditionCheck": _named({"ConditionExpression": _ANY_ROW, **target, **_condition(op.expect)})
        }


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


def _logical(name: str) -> bool:
    try:
        check_table(name)
    except InvalidNameError:
        return False
    return True


def _key(ref: RowRef) -> dict[str, AttributeValueTypeDef]:
    return {"pk": {"S": ref.partition}, "sk": {"S": ref.key}}


def _key_bytes(ref: RowRef) -> int:
    """Bytes of the key attributes, refusing keys DynamoDB would refuse."""
    where = f"{ref.table}/{ref.partition}"
    try:
        partition, key = len(ref.partition.encode("utf-8")), len(ref.key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidValueError(where, f"key {ref.key!r} or its partition is not valid unicode") from exc
    if not partition or not key:
        raise InvalidValueError(where, "DynamoDB keys and partitions must not be empty")
    most = DYNAMODB_CAPABILITIES.max_key_bytes  # also DynamoDB's sort-key limit
    if partition > PARTITION_LIMIT or key > most:
        problem = f"partition of {partition} bytes (max {PARTITION_LIMIT}) or key of {key} (max {most})"
        raise LimitExceededError(where, f"{problem}: over DynamoDB's key limits")
    return 4 + partition + key


def _number(value: object) -> str | None:
    """The N text of an int/float DynamoDB can hold (38 digits, 1E-130..1E+126), else None."""
    if type(value) is int:
        text = str(value)
        return text if len(text.lstrip("-")) <= 38 else None
    if type(value) is float:
        number = Decimal(repr(value))  # the shortest text that reads back as the same float
        return str(number) if not number or -130 <= number.adjusted() <= 125 else None
    return None


def _value(
    value: JSON, text: str, version: int, expires_at: float | None
) -> dict[str, AttributeValueTypeDef]:
    number = _number(value)
    attrs: dict[str, AttributeValueTypeDef] = {"n": {"N": number}} if number else {"v": {"S": text}}
    attrs["ver"] = {"N": str(version)}
    if expires_at is not None:
        attrs["expires_at"] = {"N": str(int(expires_at))}
    return attrs


def _row(item: Mapping[str, Any]) -> Row:
    value: JSON
    if "n" in item:
        number = Decimal(item["n"]["N"])
        value = int(number) if number == number.to_integral_value() else float(number)
    else:
        value = decode(item["v"]["S"])
    return Row(value, int(item["ver"]["N"]))


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))
