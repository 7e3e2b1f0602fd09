"""What the API, the tools and the checker read: items, winners, popular items, wallets.

Kept apart from the workflows because no step uses them: each scans or
reads whole partitions, which a step must not. Every view comes twice, a
blocking function and its awaitable ``a``-twin for the API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from idemflow import ShardedCounter
from idemflow.client import arows, rows
from idemflow.stores import AsyncStore, Store
from samples.auction.tables import ITEMS, POPULAR, WALLETS, WINNERS
from samples.auction.trading import EVERYONE

# Each view is a pure fold over the partitions it needs (``*_of``), fetched by a blocking
# function for tools, tests and the checker, or awaited by its ``a``-twin for the API.


def _partitions(store: Store, table: str, partition: str | None = None) -> dict[str, dict[str, Any]]:
    """``{partition: {key: value}}`` of a table, or of one partition of it (a scan: not for steps)."""
    found: dict[str, dict[str, Any]] = {}
    for (part, key), value in rows(store, table, partition).items():
        found.setdefault(part, {})[key] = value
    return found


def _partition(store: Store, table: str, partition: str) -> dict[str, Any]:
    """``{key: value}`` of one partition."""
    return {key: value for (_part, key), value in rows(store, table, partition).items()}


async def _apartition(store: Store | AsyncStore, table: str, partition: str) -> dict[str, Any]:
    """:func:`_partition`, awaitable."""
    return {key: value for (_part, key), value in (await arows(store, table, partition)).items()}


def item_of(terms: Mapping[str, Any], polled: Mapping[str, Any]) -> dict[str, Any] | None:
    """An item's view from its ``items`` and ``winners`` partitions (None: no such item)."""
    if "terms" not in terms:
        return None
    return {
        **terms["terms"],
        "status": terms.get("status", "open"),
        "leader": polled.get("leader"),
        "result": polled.get("result"),
    }


def winner_of(item: str, polled: Mapping[str, Any]) -> dict[str, Any]:
    """What the front end polls, from the item's ``winners`` partition."""
    return {"item": item, "leader": polled.get("leader"), "result": polled.get("result")}


def ranked(counters: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """The most-bid items, most first, from the rows of ``popular/all`` (sharded counters).

    >>> ranked({"lamp#0": 2, "vase#3": 1, "lamp#7": 1}, 10)
    [{'item': 'lamp', 'bids': 3}, {'item': 'vase', 'bids': 1}]
    """
    counts = [(count, item) for item, count in ShardedCounter.totals(counters).items()]
    return [
        {"item": item, "bids": count} for count, item in sorted(counts, key=lambda p: (-p[0], p[1]))[:limit]
    ]


def item_view(store: Store, item: str) -> dict[str, Any] | None:
    """What a front end shows for an item: terms, status, leader and result (None: no such item)."""
    return item_of(_partition(store, ITEMS, item), _partition(store, WINNERS, item))


async def aitem_view(store: Store | AsyncStore, item: str) -> dict[str, Any] | None:
    """:func:`item_view`, awaitable (both partitions read at once)."""
    terms, polled = await asyncio.gather(_apartition(store, ITEMS, item), _apartition(store, WINNERS, item))
    return item_of(terms, polled)


def winner_view(store: Store, item: str) -> dict[str, Any]:
    """The row the front end polls: the current leader and, once closed, the result."""
    return winner_of(item, _partition(store, WINNERS, item))


async def awinner_view(store: Store | AsyncStore, item: str) -> dict[str, Any]:
    """:func:`winner_view`, awaitable."""
    return winner_of(item, await _apartition(store, WINNERS, item))


def popular(store: Store, limit: int = 10) -> list[dict[str, Any]]:
    """The most-bid items, most first."""
    return ranked(_partition(store, POPULAR, EVERYONE), limit)


async def apopular(store: Store | AsyncStore, limit: int = 10) -> list[dict[str, Any]]:
    """:func:`popular`, awaitable."""
    return ranked(await _apartition(store, POPULAR, EVERYONE), limit)


def wallets(store: Store) -> dict[str, dict[str, Any]]:
    """Every wallet's rows, by owner."""
    return _partitions(store, WALLETS)


async def awallet(store: Store | AsyncStore, owner: str) -> dict[str, Any] | None:
    """One wallet's rows (None: no such wallet)."""
    return await _apartition(store, WALLETS, owner) or None


__all__ = [
    "aitem_view",
    "apopular",
    "awallet",
    "awinner_view",
    "item_of",
    "item_view",
    "popular",
    "ranked",
    "wallets",
    "winner_of",
    "winner_view",
]
