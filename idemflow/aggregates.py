"""Hot aggregates: one logical counter that many concurrent requests add to.

Why not one row: every backend serialises writes to one row. DynamoDB
cancels concurrent transactions on the same item (``TransactionConflict``,
even for a server-side ``ADD``), Azure makes two read-modify-writes of one
entity conflict (``412``), and SQLite serialises every commit. A counter
that every request touches caps a partition at that row's serial rate, and
every concurrent request pays retries to get there.

:class:`ShardedCounter` spreads one counter over ``shards`` rows of the same
partition (keys ``<name>#0`` … ``<name>#<shards-1>``). An add picks a shard
at random, so concurrent adds mostly land on different rows and commit
without meeting each other; a rerun after a conflict picks again. The
total is the sum of the shards: read it outside the request path
(:meth:`ShardedCounter.read`, or :func:`totals` over rows already read), or
inside a step with :meth:`ShardedCounter.total` — which reads every shard,
so it conflicts with every concurrent add: keep it off hot steps.

Choosing a shard at random is allowed in a body: only the committed run's
writes count, and a replay returns the memo without running the body.

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> votes = ShardedCounter("votes", shards=4)
>>> store = MemoryStore()
>>> for n in range(10):
...     run(atomic("polls", "p1", lambda tx: votes.add(tx)), request_id=f"vote-{n}", store=store)
>>> votes.read(store, "polls", "p1")
10
>>> from idemflow.client import rows
>>> totals({key: value for (_p, key), value in rows(store, "polls").items()})
{'votes': 10}
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from idemflow.core.policy import DEFAULT_POLICY, resent
from idemflow.core.requests import ReadMany, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.engine.tx import Tx
from idemflow.errors import InvalidInputError
from idemflow.keys import check_key, check_partition, check_table, data_key
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, RowRef, Store

SEPARATOR = "#"
"""Between a counter's name and its shard number in a row key."""
MAX_SHARDS = 1000
_SHARD = re.compile(r"(.*)#(\d{1,3})\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ShardedCounter:
    """A counter stored as ``shards`` rows of one partition; see the module docstring.

    ``shards`` bounds how many adds can commit at once without meeting: about
    the number of requests you expect to touch it concurrently (16 by default).
    Changing it later is safe only upwards (a lower count stops reading the
    upper shards).
    """

    name: str
    shards: int = 16

    def __post_init__(self) -> None:
        check_key(self.name)
        if type(self.shards) is not int or not 1 <= self.shards <= MAX_SHARDS:
            problem = f"shards must be an int within 1..{MAX_SHARDS}, not {self.shards!r}"
            raise InvalidInputError(f"sharded counter {self.name!r}: {problem}")
        check_key(self.key(self.shards - 1))  # the longest key still fits

    def key(self, shard: int) -> str:
        """The row key of one shard."""
        return f"{self.name}{SEPARATOR}{shard}"

    def keys(self) -> list[str]:
        """Every shard's row key."""
        return [self.key(shard) for shard in range(self.shards)]

    def add(self, tx: Tx, delta: int | float = 1) -> None:
        """Add ``delta`` to one shard, chosen at random, in this step's commit."""
        tx.increment(self.key(random.randrange(self.shards)), delta)

    @staticmethod
    def totals(rows: Mapping[str, Any]) -> dict[str, Any]:
        """Every counter's total in rows already read (``client.rows`` of a partition): the shard
        rows of each counter folded into ``{name: total}``, other keys kept as they are."""
        return totals(rows)

    def total(self, tx: Tx) -> int | float:
        """The total, read inside a step (every shard is read, so it conflicts with every add)."""
        total: int | float = sum(tx.get(key, 0) for key in self.keys())
        return total

    def read(self, store: Store, table: str, partition: str) -> int | float:
        """The total, read outside a workflow in one batched read (not a snapshot: shards are
        read together, but an add committing meanwhile may or may not be counted)."""
        return drive(self._read(table, partition), store)

    async def aread(self, store: Store | AsyncStore, table: str, partition: str) -> int | float:
        """:meth:`read`, awaitable."""
        target = to_async(store)
        return await adrive(self._read(table, partition), target)

    def _read(self, table: str, partition: str) -> Steps[int | float]:
        check_table(table)
        check_partition(partition)
        refs = [RowRef(table, partition, data_key(key)) for key in self.keys()]
        found = yield from resent(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), ReadMany(refs))
        total: int | float = 0
        for row in found:
            if row is not None and isinstance(row.value, (int, float)) and not isinstance(row.value, bool):
                total += row.value
        return total


def totals(rows: Mapping[str, Any]) -> dict[str, Any]:
    """Fold shard rows (``<name>#<n>``) of a partition's ``{key: value}`` into ``{name: total}``;
    other keys are kept as they are."""
    folded: dict[str, Any] = {}
    for key, value in rows.items():
        match = _SHARD.match(key)
        if match is None or type(value) not in (int, float):
            folded[key] = value
            continue
        name = match.group(1)
        folded[name] = folded.get(name, 0) + value
    return folded


__all__ = ["SEPARATOR", "ShardedCounter", "totals"]
