"""The DynamoDB stores' calls, sans I/O: one copy for the blocking and the asyncio store.

Each store operation is a generator that *yields* an :class:`SdkCall` (a client
method's name and its arguments) and is sent the response, or has the SDK's
exception thrown in at the ``yield``; it returns the operation's result.
:class:`~idemflow.stores.dynamodb.DynamoDBStore` answers the calls on a boto3
client (:func:`drive`), :class:`~idemflow.stores.dynamodb_async.AsyncDynamoDBStore`
awaits them on an aiobotocore client (:func:`adrive`). So requests, limits,
responses, batching and the mapping of SDK errors onto idemflow's exist once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from botocore import __version__ as botocore_version
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.useragent import UserAgentString

from idemflow.core.policy import DEFAULT_POLICY, retried
from idemflow.core.requests import Sleep
from idemflow.core.sdk_calls import SdkCall
from idemflow.errors import ErrorCode, TransientError, backend_error
from idemflow.stores._aws_errors import RETRYABLE, api_name, classify, classify_sdk
from idemflow.stores._dynamodb_errors import (
    BACKEND,
    condition_failed,
    error_code,
    error_for,
    error_message,
)
from idemflow.stores._dynamodb_items import key, key_bytes, row, transaction
from idemflow.stores._op_rules import not_a_number
from idemflow.stores.base import (
    COMMITTED,
    CommitOutcome,
    Conflict,
    Increment,
    Insert,
    Op,
    OpFailure,
    Row,
    RowRef,
)

T = TypeVar("T")

VALIDATE_REQUESTS = "IDEMFLOW_VALIDATE_REQUESTS"
"""Set to ``1`` to have botocore check every request against the service model (the test
suite does); off by default: each request is one idemflow built, and the check costs about
50 µs of CPU per three-item transaction, paid on every call."""


def user_agent() -> str:
    """The User-Agent header of the stores' clients: botocore's own string for this process,
    built once, plus ``lib/idemflow``.

    botocore builds the header from about a dozen components twice per call (once with the
    request, once again just before it is sent, to add the features the call used): about
    120 µs of CPU per call, a tenth of a transaction's client CPU. Given as ``Config(user_agent=)``,
    the header is a fixed string; what it no longer carries is the per-call feature codes AWS
    uses for its own statistics."""
    try:
        built = str(UserAgentString.from_environment().to_string())
    except Exception:  # noqa: BLE001 - a header, not worth failing a store for
        built = f"Botocore/{botocore_version}"
    return f"{built} lib/idemflow"


def client_config(*, validate: bool) -> Config:
    """The botocore configuration of both stores' clients: one attempt per call, botocore's
    retries off. idemflow retries (:mod:`idemflow.core.policy`, tenacity): the engine a step's reads
    and commits, and :meth:`DynamoDBCalls.call` every other call. Stacked, the two layers sent a
    call up to 27 times. The User-Agent is fixed (:func:`user_agent`)."""
    return Config(
        retries={"mode": "standard", "total_max_attempts": 1},
        connect_timeout=5,
        read_timeout=20,
        max_pool_connections=32,
        parameter_validation=validate,
        user_agent=user_agent(),
    )


CONFIG = client_config(validate=os.environ.get(VALIDATE_REQUESTS) == "1")

Calls = Generator[SdkCall | Sleep, Any, T]
"""An operation that yields SDK calls (and a retry's waits) and returns a ``T``."""
_GETS_PER_CALL = 100
_SINGLE_WRITES = {"Put": "put_item", "Update": "update_item", "Delete": "delete_item"}
"""The call that writes a transaction item's one row on its own."""


class DynamoDBCalls:
    """The operations of a DynamoDB store on tables ``prefix`` + logical name, as :data:`Calls`.

    ``url`` is the store's URL, named in the advice of a missing table's error. Its tables are
    provisioned by :class:`~idemflow.stores._dynamodb_tables.DynamoDBTables`.
    """

    def __init__(self, prefix: str, url: str) -> None:
        self.prefix = prefix
        self.url = url

    def table_name(self, table: str) -> str:
        return self.prefix + table

    # -- operations --------------------------------------------------------------------------------

    def read(self, ref: RowRef) -> Calls[Row | None]:
        key_bytes(ref)
        args = {"TableName": self.table_name(ref.table), "Key": key(ref), "ConsistentRead": True}
        found = yield from self.call("read", [ref.table], "get_item", args, once=True)
        item = found.get("Item")
        return None if item is None else row(item)

    def read_many(self, refs: Sequence[RowRef]) -> Calls[list[Row | None]]:
        """One strongly consistent ``BatchGetItem`` per 100 distinct rows (a single row: ``GetItem``)."""
        unique = list(dict.fromkeys(refs))
        if len(unique) == 1:
            return [(yield from self.read(unique[0]))] * len(refs)
        for ref in unique:
            key_bytes(ref)
        found: dict[RowRef, Row | None] = {}
        for start in range(0, len(unique), _GETS_PER_CALL):
            chunk = unique[start : start + _GETS_PER_CALL]
            by_key = {(self.table_name(r.table), r.partition, r.key): r for r in chunk}
            wanted: dict[str, Any] = {}
            for name, partition, sort in by_key:
                entry = wanted.setdefault(name, {"Keys": [], "ConsistentRead": True})
                entry["Keys"].append({"pk": {"S": partition}, "sk": {"S": sort}})
            items = yield from self._batch_get(wanted, sorted({r.table for r in chunk}))
            for name, item in items:
                found[by_key[(name, item["pk"]["S"], item["sk"]["S"])]] = row(item)
        return [found.get(ref) for ref in refs]

    def _batch_get(self, wanted: dict[str, Any], tables: Sequence[str]) -> Calls[list[tuple[str, Any]]]:
        """Every item of ``wanted`` (a ``RequestItems``) that exists. Keys left unprocessed are
        asked again at once while some progress is made, else :class:`TransientError`."""
        items: list[tuple[str, Any]] = []
        while wanted:
            got = yield from self.call("read", tables, "batch_get_item", {"RequestItems": wanted}, once=True)
            items.extend((name, item) for name, found in got.get("Responses", {}).items() for item in found)
            left = got.get("UnprocessedKeys") or {}
            if left and left == wanted:  # no progress: let the retry layer back off
                raise TransientError(
                    f"{self._what('read', tables)}: keys left unprocessed (throttled)",
                    code=ErrorCode.THROTTLED,
                    backend=BACKEND,
                    operation="BatchGetItem",
                    service_code="UnprocessedKeys",
                )
            wanted = dict(left)
        return items

    def commit(self, ops: Sequence[Op]) -> Calls[CommitOutcome]:
        if not ops:
            return COMMITTED
        items = transaction(ops, self.table_name)
        tables = [op.ref.table for op in ops]
        if len(items) == 1 and "ConditionCheck" not in items[0]:
            return (yield from self._commit_one(ops[0], items[0], tables))
        try:
            transact = {"TransactItems": items}
            yield from self.call("commit", tables, "transact_write_items", transact, once=True)
        except ClientError as exc:  # only TransactionCanceledException gets through call()
            return (yield from self._cancelled(ops, exc, tables))
        return COMMITTED

    def _commit_one(self, op: Op, item: Mapping[str, Any], tables: Sequence[str]) -> Calls[CommitOutcome]:
        """One row: its conditional ``PutItem``, ``UpdateItem`` or ``DeleteItem``, as atomic as a
        transaction of one item at half its request units (a transaction costs two per KB)."""
        ((kind, args),) = item.items()
        failed: list[ClientError] = []

        def note(exc: ClientError) -> bool:
            if condition_failed(exc):
                failed.append(exc)
                return True
            return False

        yield from self.call("commit", tables, _SINGLE_WRITES[kind], dict(args), note, once=True)
        if not failed:
            return COMMITTED
        found: Any = failed[0].response.get("Item")  # the row that failed it, as ALL_OLD returns it
        if isinstance(op, Increment):  # its only condition: the row holds no JSON text
            raise _not_a_number(op, found, "UpdateItem", "ConditionalCheckFailedException") from failed[0]
        return Conflict(((yield from self._failure(0, op, found)),))

    def scan(self, table: str, partition: str | None = None) -> Calls[list[tuple[str, str, Row]]]:
        """Every row of ``table`` (in ``partition``) as ``(partition, key, row)``, sorted."""
        args: dict[str, Any] = {"TableName": self.table_name(table), "ConsistentRead": True}
        if partition is not None:
            args["KeyConditionExpression"] = "#pk = :p"
            args["ExpressionAttributeNames"] = {"#pk": "pk"}
            args["ExpressionAttributeValues"] = {":p": {"S": partition}}
        rows = yield from self._pages("scan", table, "scan" if partition is None else "query", args)
        rows.sort(key=lambda found: (found[0], found[1]))
        return rows

    def _pages(
        self, action: str, table: str, operation: str, args: dict[str, Any]
    ) -> Calls[list[tuple[str, str, Row]]]:
        """Every item a paged ``Scan`` or ``Query`` returns, as ``(partition, key, row)``."""
        rows: list[tuple[str, str, Row]] = []
        start: Mapping[str, Any] | None = None
        while True:
            extra: dict[str, Any] = {} if start is None else {"ExclusiveStartKey": start}
            page = yield from self.call(action, [table], operation, {**args, **extra})
            rows.extend((item["pk"]["S"], item["sk"]["S"], row(item)) for item in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                return rows

    # -- calls and errors --------------------------------------------------------------------------

    def call(
        self,
        action: str,
        tables: Sequence[str],
        operation: str,
        kwargs: dict[str, Any],
        fine: Callable[[ClientError], bool] | None = None,
        *,
        waiter: bool = False,
        once: bool = False,
    ) -> Calls[Any]:
        """One SDK call, its failure mapped onto the idemflow error tree (a ``ClientError`` that
        ``fine`` accepts answers ``{}``; a ``TransactionCanceledException`` is raised as it is).

        Resent on :class:`TransientError` under the default retry policy, unless ``once``:
        a step's reads and commits, which the engine retries itself (a commit's transient error
        reruns the step's body, which a resend here would skip)."""
        if once:  # a step's read or commit: the hot path builds no retryer
            return (yield from self._call(action, tables, operation, kwargs, fine, waiter))
        attempt = partial(self._call, action, tables, operation, kwargs, fine, waiter)
        return (yield from retried(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), attempt))

    def _call(
        self,
        action: str,
        tables: Sequence[str],
        operation: str,
        kwargs: dict[str, Any],
        fine: Callable[[ClientError], bool] | None,
        waiter: bool,
    ) -> Generator[SdkCall, Any, Any]:
        try:
            return (yield SdkCall(operation, kwargs, waiter))
        except ClientError as exc:
            if fine is not None and fine(exc):
                return {}
            if error_code(exc) == "TransactionCanceledException":
                raise
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            name = exc.operation_name or api_name(operation)
            raise self._error(action, tables, error_code(exc), error_message(exc), name, status) from exc
        except BotoCoreError as exc:  # no answer: refused, reset, timed out; no credentials
            meant = classify_sdk(exc)
            what = self._what(action, tables)
            origin = {
                "backend": BACKEND,
                "operation": api_name(operation),
                "service_code": type(exc).__name__,
            }
            if meant is ErrorCode.TRANSIENT:
                raise backend_error(f"{what} failed, worth retrying: {exc}", meant, **origin) from exc
            hint = "; configure AWS credentials" if "Credential" in type(exc).__name__ else ""
            raise backend_error(f"{what} failed: {exc}{hint}", meant, **origin) from exc

    def _what(self, action: str, tables: Sequence[str]) -> str:
        physical = sorted({self.table_name(table) for table in tables})
        return f"DynamoDB {action}" + (f" on {', '.join(physical)}" if physical else "")

    def _error(
        self, action: str, tables: Sequence[str], code: str, message: str, operation: str, status: int = 0
    ) -> Exception:
        """The idemflow error for a DynamoDB error code (of a call or of a cancellation reason)."""
        what = self._what(action, tables)
        return error_for(what, code, message, status, url=self.url, tables=tables, operation=operation)

    def _cancelled(self, ops: Sequence[Op], exc: ClientError, tables: Sequence[str]) -> Calls[Conflict]:
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
            else:
                failures.append((yield from self._failure(index, op, item)))
        if failures:  # a definite answer even if another item also met a transient failure
            return Conflict(tuple(failures))
        if not_numbers:
            raise _not_a_number(*not_numbers[0], "TransactWriteItems", "ConditionalCheckFailed") from exc
        raise self._cancel_error("commit", tables, exc) from exc

    def _failure(self, index: int, op: Op, item: Mapping[str, Any] | None) -> Calls[OpFailure]:
        """The failed condition of ``op``: an insert's names the row that was there (the item
        ALL_OLD returned, else read)."""
        if not isinstance(op, Insert):
            return OpFailure(index)
        return OpFailure(index, row(item) if item else (yield from self.read(op.ref)))

    def _cancel_error(self, action: str, tables: Sequence[str], exc: ClientError) -> Exception:
        """The error of a transaction cancelled for no failed condition: a permanent reason wins."""
        reasons = [
            r for r in exc.response.get("CancellationReasons") or [] if r.get("Code") not in (None, "None")
        ]
        if not reasons:
            return TransientError(
                f"{self._what(action, tables)} cancelled: {error_message(exc)}",
                backend=BACKEND,
                operation="TransactWriteItems",
                service_code=error_code(exc),
            )
        worst = next((r for r in reasons if classify(str(r["Code"]), 0) not in RETRYABLE), reasons[0])
        code, message = str(worst["Code"]), str(worst.get("Message", ""))
        return self._error(action, tables, code, message, "TransactWriteItems")


def _not_a_number(op: Increment, item: Mapping[str, Any] | None, operation: str, condition: str) -> Exception:
    """An increment refused because its row holds a value DynamoDB cannot add to (its condition,
    that the row holds no JSON text, failed: ``condition`` is how DynamoDB said so)."""
    held = type(row(item).value).__name__ if item else "JSON text"
    note = " DynamoDB can add"
    return not_a_number(op.ref, held, note, backend=BACKEND, operation=operation, service_code=condition)
