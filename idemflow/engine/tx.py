"""``Tx``: what a step body sees, one optimistic transaction on one partition.

Reads go to the store (strongly consistent) and remember the version they
saw; writes are buffered. At commit the engine turns this into one atomic
write: the buffered writes conditioned on the versions read, a version check
for rows only read, and the step's memo. So a body is serializable without
locks, and a body whose reads went stale is simply run again.

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> def open_account(tx):
...     if tx.get("balance") is None:
...         tx.put("balance", 100)
...     tx.increment("deposits")
...     return tx.get("balance")
>>> run(atomic("accounts", "alice", open_account), request_id="r", store=MemoryStore())
100
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Protocol

from idemflow.core.requests import ReadMany, Steps
from idemflow.errors import InvalidValueError
from idemflow.keys import check_key, data_key
from idemflow.number_model import DIGITS, Number, check, is_number, sum_of
from idemflow.serialization import JSON, encode
from idemflow.stores.base import (
    Check,
    Cond,
    Delete,
    Expect,
    Increment,
    Op,
    Put,
    Row,
    RowRef,
)


class Reader(Protocol):
    """Where a body's reads go: a store (blocking runs) or the rows prefetched so far (``arun``)."""

    def read(self, ref: RowRef) -> Row | None: ...

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]: ...


class StepAborted(BaseException):
    """Raised by :meth:`Tx.abort`; a BaseException so a body's ``except Exception`` cannot eat it."""

    def __init__(self, reason: JSON) -> None:
        super().__init__(reason)
        self.reason = reason


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()
_DELETED = object()
_SMALL = 10**DIGITS
"""An int strictly inside ±10**DIGITS is a delta every store holds (``check``'s own fast path)."""


class _Add:
    __slots__ = ("delta",)

    def __init__(self, delta: Number) -> None:
        self.delta = delta


class Tx:
    """The transaction handed to a step body (see the module docstring)."""

    __slots__ = ("_partition", "_peek", "_read_versions", "_store", "_table", "_view", "_writes")

    def __init__(
        self,
        store: Reader,
        table: str,
        partition: str,
        peek: tuple[RowRef, Callable[[Row | None], None]] | None = None,
    ) -> None:
        self._store = store
        self._peek = peek
        self._table = table
        self._partition = partition
        self._read_versions: dict[str, Expect] = {}
        self._view: dict[str, Any] = {}
        self._writes: dict[str, Any] = {}  # key -> Put | _DELETED | _Add

    @property
    def table(self) -> str:
        """The step's table."""
        return self._table

    @property
    def partition(self) -> str:
        """The step's partition."""
        return self._partition

    def get(self, key: str, default: Any = None) -> Any:
        """The row's value (seeing this body's own earlier writes), or ``default``."""
        view = self._view
        if key in view:
            value = view[key]
        else:
            check_key(key)
            ref = RowRef(self._table, self._partition, data_key(key))
            if self._peek is None:
                row = self._store.read(ref)
            else:
                # Read another row (the run record) in the same round trip.
                (peek_ref, seen), self._peek = self._peek, None
                row, peeked = self._store.read_many([ref, peek_ref])
                seen(peeked)
            if row is None:
                self._read_versions[key] = Cond.ABSENT
                value = MISSING
            else:
                self._read_versions[key] = row.version
                value = row.value
            pending = self._writes.get(key)
            if isinstance(pending, _Add):
                value = self._added(key, value, pending.delta)
                self._writes[key] = self._put_op(key, value)
            view[key] = value
        return default if value is MISSING else value

    def settle(self) -> None:
        """Do now the read a first ``get`` would have piggybacked (the run record).

        A body about to act outside the store (an effect) calls this first, so a
        duplicate of a request that already finished never repeats the action.
        """
        if self._peek is not None:
            (peek_ref, seen), self._peek = self._peek, None
            seen(self._store.read(peek_ref))

    def put(self, key: str, value: Any) -> None:
        """Write ``value`` (JSON-compatible) at ``key`` when the step commits."""
        check_key(key)
        self._writes[key] = self._put_op(key, value)
        self._view[key] = value

    def delete(self, key: str) -> None:
        """Delete ``key`` when the step commits (deleting an absent key is a no-op)."""
        check_key(key)
        self._writes[key] = _DELETED
        self._view[key] = MISSING

    def increment(self, key: str, delta: Number = 1) -> None:
        """Add ``delta`` to a numeric row (absent counts as 0).

        Needs no prior read: the backend adds at commit (DynamoDB ``ADD``), so
        the body never reruns because the counter moved. Concurrent commits to
        the *same* row still serialise (DynamoDB cancels concurrent
        transactions on one item; Azure rewrites the entity under its ETag)
        and are retried until the policy's deadline; for a counter many
        requests add to at once, use :class:`~idemflow.ShardedCounter`.
        """
        if not is_number(delta):
            problem = f"delta must be int, float or Decimal, not {delta!r}"
            raise InvalidValueError(f"increment of {key!r}", problem)
        if type(delta) is not int or not -_SMALL < delta < _SMALL:  # else ``check`` has nothing to say
            check(delta, f"increment of {key!r}")  # one no store could hold is refused before any write
        check_key(key)
        if key in self._view:
            new = self._added(key, self._view[key], delta)
            self._writes[key] = self._put_op(key, new)
            self._view[key] = new
            return
        pending = self._writes.get(key)
        if pending is None:  # the usual case: no place to name, so none is formatted
            self._writes[key] = _Add(delta)
            return
        where = f"increment of {self._table}/{self._partition}/{key}"
        self._writes[key] = _Add(sum_of(pending.delta, delta, where))

    def abort(self, reason: JSON = None) -> NoReturn:
        """Abort the workflow: this step commits nothing of its own, and the
        compensations of the completed steps run (see :mod:`idemflow.compensation`)."""
        encode(reason, "abort reason")
        raise StepAborted(reason)

    def _put_op(self, key: str, value: Any) -> tuple[JSON, str]:
        return (value, encode(value, f"value of {self._table}/{self._partition}/{key}"))

    def _added(self, key: str, current: Any, delta: Number) -> Number:
        """What the store will compute (:mod:`idemflow.number_model`), for this body's own reads."""
        base = 0 if current is MISSING else current
        where = f"increment of {self._table}/{self._partition}/{key}"
        if not is_number(base):
            raise InvalidValueError(where, f"row holds {type(base).__name__}, not a number")
        return sum_of(base, delta, where)

    def ops(self) -> list[Op]:
        """The data operations of one commit: writes conditioned on reads, checks for reads."""
        table, partition = self._table, self._partition
        reads = self._read_versions
        ops: list[Op] = []
        for key, write in self._writes.items():
            ref = RowRef(table, partition, data_key(key))
            expect = reads.get(key, Cond.ANY)
            if write is _DELETED:
                ops.append(Delete(ref, expect))
            elif isinstance(write, _Add):
                ops.append(Increment(ref, write.delta))
            else:
                ops.append(Put(ref, write[0], write[1], expect))
        for key, version in reads.items():
            if key not in self._writes:
                ops.append(Check(RowRef(table, partition, data_key(key)), version))
        return ops

    def read_checks(self) -> list[Check]:
        """Checks on everything read, without the writes (an aborting step's commit)."""
        return [
            Check(RowRef(self._table, self._partition, data_key(key)), version)
            for key, version in self._read_versions.items()
        ]


def stale(tx: Tx) -> Steps[bool]:
    """Did a row the body read change before it raised? Then it saw no consistent state.

    Reads inside a body are each strongly consistent but not one snapshot
    (DynamoDB's are never cancelled by a concurrent commit, Azure's are
    separate calls); the commit's conditions make a *committed* body
    serializable, and this check gives the same to a body that raised.
    """
    checks = tx.read_checks()
    if not checks:
        return False
    rows = yield ReadMany([check.ref for check in checks])
    return any(
        (Cond.ABSENT if row is None else row.version) != check.expect
        for check, row in zip(checks, rows, strict=True)
    )
