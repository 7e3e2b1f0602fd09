"""How a commit becomes an Azure entity group transaction.

Pure functions, apart from :mod:`idemflow.stores._azure_calls` (which sends
the batch and reads rows): :func:`plan` validates a commit before anything is
sent; :func:`operation` maps each op to a batch operation, given what the
store learned between attempts (:class:`Learned`); :func:`resolving` is the
tenacity retryer of those attempts (:class:`Again`: a condition resolved, send
the next batch):

========================  ==============================================
op                        batch operation
========================  ==============================================
Put, ``Cond.ANY``         upsert (REPLACE)
Put / Delete, version     update (REPLACE) / delete, If-Match the ETag
Check, version            update (MERGE of no property), If-Match the ETag
Insert, Put ``ABSENT``    create; over a tombstone: update If-Match its ETag
Check / Delete ``ABSENT`` create a tombstone; over one: update If-Match it
Delete, ``Cond.ANY``      delete; when there was nothing: upsert a tombstone
Increment                 the row as read plus delta: create, or update
                          If-Match the ETag read
Check, ``Cond.ANY``       nothing
========================  ==============================================
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from azure.core import MatchConditions
from azure.data.tables import UpdateMode
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from idemflow.errors import BackendError, LimitExceededError
from idemflow.stores import _azure_entity as ent
from idemflow.stores._limits import check_commit
from idemflow.stores._local import incremented
from idemflow.stores.base import Capabilities, Check, Cond, Delete, Increment, Insert, Op, Put, RowRef

Raw = tuple[str, str | None]
"""An entity as read: its ETag and JSON text (None for a tombstone)."""
Operation = tuple[str, dict[str, Any], dict[str, Any]]
"""One operation as ``TableClient.submit_transaction`` takes it."""


AZURE_CAPABILITIES = Capabilities(
    cross_partition_commit=False,
    max_ops_per_commit=ent.MAX_BATCH_OPS,
    max_value_bytes=450_000,
    max_commit_bytes=3_000_000,  # values travel as base64 (4/3) and a batch body is capped at 4 MiB
    max_key_bytes=ent.MAX_KEY_BYTES // 2,  # 1 KiB of UTF-16: 512 bytes of ASCII; escaping may need more
)


@dataclass(frozen=True)
class Plan:
    """A validated commit: its escaped partition, each op's escaped key and the
    value entity of each Put/Insert."""

    partition: str
    keys: list[str]
    entities: list[dict[str, Any] | None]


@dataclass
class Learned:
    """What a commit found out between attempts, by op index."""

    tomb_etags: dict[int, str] = field(default_factory=dict)
    """ABSENT-conditioned ops meeting a tombstone: the ETag to overwrite it under."""
    blind_absent: set[int] = field(default_factory=set)
    """Blind deletes that found nothing to delete."""
    counters: dict[int, Raw | None] = field(default_factory=dict)
    """Increments: their row as last read."""


def escaped(ref: RowRef) -> tuple[str, str]:
    """Escaped partition and key of ``ref``, refused before sending when over 1 KiB."""
    partition, key = ent.escape_key(ref.partition), ent.escape_key(ref.key)
    where = f"{ref.table}/{ref.partition}"
    ent.check_key(where, "partition", partition)
    ent.check_key(where, f"row key {ref.key[:40]!r}", key)
    return partition, key


def expects_absent(op: Op) -> bool:
    """Whether ``op`` needs its row absent when the batch lands."""
    return isinstance(op, Insert) or (isinstance(op, (Put, Delete, Check)) and op.expect is Cond.ABSENT)


def plan(ops: Sequence[Op]) -> Plan:
    """Validate a commit before anything is sent: :data:`AZURE_CAPABILITIES` (the store's one
    limit check), one table and partition, one op per row; the entities and the batch body are
    sized as sent, a backstop for what the capabilities cannot describe (base64, headers)."""
    first = ops[0].ref
    where = f"{first.table}/{first.partition}"
    check_commit(ops, AZURE_CAPABILITIES)
    keys: list[str] = []
    entities: list[dict[str, Any] | None] = []
    body = 0
    for op in ops:
        if (op.ref.table, op.ref.partition) != (first.table, first.partition):
            raise BackendError(
                f"Azure Tables commits one table and partition at a time: {where} and "
                f"{op.ref.table}/{op.ref.partition} in one commit"
            )
        partition, key = escaped(op.ref)
        if key in keys:
            raise BackendError(f"two operations on row {op.ref.key[:40]!r} of {where} in one commit")
        keys.append(key)
        entity = None
        if isinstance(op, (Put, Insert)):
            entity = ent.value_entity(partition, key, op.text, op.expires_at)
            ent.check_entity(where, entity)
            body += ent.request_bytes(entity)
        else:
            body += ent.request_bytes(ent.tombstone_entity(partition, key, 0.0))
        entities.append(entity)
    if body > ent.MAX_BATCH_BYTES:
        raise LimitExceededError(where, f"commit is about {body} bytes; Azure allows {ent.MAX_BATCH_BYTES}")
    return Plan(ent.escape_key(first.partition), keys, entities)


def operation(op: Op, index: int, planned: Plan, learned: Learned, now: float) -> Operation | None:
    """The batch operation for ``op`` given what the commit learned so far (None: nothing to send)."""
    partition, key, entity = planned.partition, planned.keys[index], planned.entities[index]
    if isinstance(op, Increment):
        raw = learned.counters[index]
        text = incremented(op.ref, None if raw is None or raw[1] is None else (raw[1], 0), op.delta)
        new = ent.value_entity(partition, key, text, None)
        return ("create", new, {}) if raw is None else _if_match("update", new, raw[0], UpdateMode.REPLACE)
    if isinstance(op, Delete) and op.expect is Cond.ANY:
        if index in learned.blind_absent:
            return ("upsert", ent.tombstone_entity(partition, key, now), {"mode": UpdateMode.REPLACE})
        return ("delete", ent.key_entity(partition, key), {})
    if isinstance(op, Check) and op.expect is Cond.ANY:
        return None
    if expects_absent(op):
        new = entity if entity is not None else ent.tombstone_entity(partition, key, now)
        etag = learned.tomb_etags.get(index)
        return ("create", new, {}) if etag is None else _if_match("update", new, etag, UpdateMode.REPLACE)
    if isinstance(op, Put):
        assert entity is not None
        if op.expect is Cond.ANY:
            return ("upsert", entity, {"mode": UpdateMode.REPLACE})
        return _if_match("update", entity, str(op.expect), UpdateMode.REPLACE)
    if isinstance(op, Delete):
        return _if_match("delete", ent.key_entity(partition, key), str(op.expect), None)
    assert isinstance(op, Check)
    # A MERGE adding no property: changes no data, but fails unless the ETag matches.
    return _if_match("update", ent.key_entity(partition, key), str(op.expect), UpdateMode.MERGE)


def _if_match(kind: str, entity: dict[str, Any], etag: str, mode: UpdateMode | None) -> Operation:
    options: dict[str, Any] = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
    if mode is not None:
        options["mode"] = mode
    return kind, entity, options


MAX_ATTEMPTS = 20
"""Batches one commit may send while resolving tombstones and increments."""


class Again(Exception):
    """A commit's batch failed on a condition it has now resolved: send the next one."""

    def __init__(self, *, contended: bool) -> None:
        super().__init__()
        self.contended = contended


def _wait_for_writer(state: RetryCallState) -> float:
    """No wait after learning a tombstone; a short random one after losing an increment's race."""
    failure = state.outcome.exception() if state.outcome is not None else None
    if isinstance(failure, Again) and failure.contended:
        return random.uniform(0, 0.002 * state.attempt_number)
    return 0.0


def resolving() -> Retrying:
    """The tenacity retryer of one commit's batches (:func:`idemflow.core.policy.retried` yields
    its waits)."""
    return Retrying(
        stop=stop_after_attempt(MAX_ATTEMPTS),
        wait=_wait_for_writer,
        retry=retry_if_exception_type(Again),
        reraise=True,
    )
