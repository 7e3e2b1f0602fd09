"""A commit on an Azure table store: its operations sent as one entity group transaction of
their partition (or one entity's own write), resolved against what the rows hold until it
commits or a condition fails.

Azure checks ETags, not values: an insert over a tombstone, a blind delete and an increment each
learn what the row holds from the failure (or a read) and send the batch again
(:mod:`idemflow.stores._azure_batch` plans each pass). The loop is the commit's alone, so it has
this module; the reads, hints and error mapping it uses are
:class:`~idemflow.stores._azure_calls.AzureCalls`', as is the blocking and asyncio stores' use.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableTransactionError

from idemflow.core.policy import retried
from idemflow.errors import LimitExceededError, TransientError
from idemflow.serialization import decode
from idemflow.stores import _azure_entity as ent
from idemflow.stores._azure_batch import (
    MAX_ATTEMPTS,
    Again,
    Learned,
    Operation,
    expects_absent,
    operation,
    plan,
    resolving,
)
from idemflow.stores._azure_batch import Plan as Planned
from idemflow.stores._azure_calls import BACKEND, AzureCalls, Call, Calls
from idemflow.stores._azure_errors import code_of
from idemflow.stores.base import (
    COMMITTED,
    CommitOutcome,
    Cond,
    Conflict,
    Delete,
    Increment,
    Insert,
    Op,
    OpFailure,
    Row,
)

_CONDITION_CODES = frozenset({"UpdateConditionNotSatisfied", "EntityAlreadyExists", "ResourceNotFound"})
_SINGLE = frozenset({"create", "upsert", "update", "delete"})
"""Writes sent alone when a batch holds one (``write_entity`` of :mod:`idemflow.stores._azure_clients`)."""


def _submit(calls: AzureCalls, table: str, batch: list[Operation]) -> Calls[None]:
    calls.physical(table)  # a bad name fails this commit like the SDK's errors
    kind = batch[0][0]
    if len(batch) == 1 and kind in _SINGLE:
        # One write needs no entity group transaction: the plain request is
        # atomic by itself and smaller, for Azure and for us (the run-record insert).
        answers: list[Mapping[str, Any]] = [(yield from _single(table, batch[0]))]
    else:
        answers = yield Call(table, "submit_transaction", (batch,))
    for (_, entity, _), answer in zip(batch, answers, strict=False):
        etag = answer.get("etag") if entity.get(ent.TOMB) else None
        raw = None if etag is None else (str(etag), None)
        calls._hint(table, entity["PartitionKey"], entity["RowKey"], raw)


def commit(calls: AzureCalls, ops: Sequence[Op]) -> Calls[CommitOutcome]:
    """``ops`` as one batch of their partition (one entity alone: its own write), sent again while
    it learns what the rows hold: committed, or the conflict of the first condition that failed."""
    if not ops:
        return COMMITTED
    planned = plan(ops)
    partition, keys, first = planned.partition, planned.keys, ops[0].ref
    learned = Learned()
    hints = calls._tombstone_hints(first.table, partition, keys)
    for index, op in enumerate(ops):
        hint = hints[index]
        if hint is not None and expects_absent(op):
            learned.tomb_etags[index] = hint
    for index, op in enumerate(ops):
        if isinstance(op, Increment):
            learned.counters[index] = yield from calls._get(op.ref, partition, keys[index])
    try:
        return (yield from retried(resolving(), lambda: _commit_pass(calls, ops, planned, learned)))
    except Again:
        raise TransientError(
            f"commit on Azure table {calls.prefix + first.table!r} partition {first.partition!r}: rows "
            f"kept changing under it for {MAX_ATTEMPTS} attempts, retry",
            backend=BACKEND,
            operation="submit_transaction",
        ) from None


def _commit_pass(
    calls: AzureCalls, ops: Sequence[Op], planned: Planned, learned: Learned
) -> Calls[CommitOutcome]:
    """One batch: committed, a conflict, or :class:`Again` once it learned what to send next."""
    partition, keys, first = planned.partition, planned.keys, ops[0].ref
    now = time.time()
    entries = [(index, operation(op, index, planned, learned, now)) for index, op in enumerate(ops)]
    batch = [entry for _, entry in entries if entry is not None]
    positions = [index for index, entry in entries if entry is not None]
    if not batch:
        return COMMITTED
    try:
        yield from _submit(calls, first.table, batch)
        return COMMITTED
    except TableTransactionError as exc:
        code = code_of(exc)
        if code not in _CONDITION_CODES or not 0 <= exc.index < len(positions):
            raise calls._error(exc, first.table, "commit", "submit_transaction") from exc
        index = positions[exc.index]
    except _SingleFailed:
        index = positions[0]
    except LimitExceededError:
        raise  # the batch body, sized exactly before sending: nothing was sent
    except Exception as exc:  # every SDK failure becomes a BackendError
        raise calls._error(exc, first.table, "commit", _write_call(batch)) from exc
    op = ops[index]
    if isinstance(op, Increment):  # no read dependency of the caller: read again, retry
        learned.counters[index] = yield from calls._get(op.ref, partition, keys[index])
        raise Again(contended=True)  # after a pause: let the other writer finish
    if isinstance(op, Delete) and op.expect is Cond.ANY:
        learned.blind_absent.add(index)  # nothing to delete: make it absent with a tombstone
        raise Again(contended=False)
    if expects_absent(op):
        raw = yield from calls._get(op.ref, partition, keys[index])
        if raw is not None and raw[1] is not None:
            existing = Row(decode(raw[1]), raw[0]) if isinstance(op, Insert) else None
            return Conflict((OpFailure(index, existing),))
        if raw is None:
            learned.tomb_etags.pop(index, None)
        else:  # a tombstone: absent all the same, overwrite it under its ETag
            learned.tomb_etags[index] = raw[0]
        raise Again(contended=False)
    return Conflict((OpFailure(index),))


class _SingleFailed(Exception):
    """A single-entity write's condition failed (as a batch's would have, at index 0)."""


def _single(table: str, operation: Operation) -> Calls[dict[str, Any]]:
    try:
        answer: dict[str, Any] = yield Call(table, "write_entity", (operation,))
    except ResourceExistsError as exc:
        raise _SingleFailed("EntityAlreadyExists") from exc
    except ResourceNotFoundError as exc:
        if code_of(exc) == "TableNotFound":
            raise
        raise _SingleFailed("ResourceNotFound") from exc
    except HttpResponseError as exc:
        if exc.status_code == 412:
            raise _SingleFailed("UpdateConditionNotSatisfied") from exc
        raise
    return answer


def _write_call(batch: list[Operation]) -> str:
    """The SDK call that sends ``batch``: a transaction, or one entity's own write."""
    kind = batch[0][0]
    return f"{kind}_entity" if len(batch) == 1 and kind in _SINGLE else "submit_transaction"
