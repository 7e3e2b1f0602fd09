"""The auction's five tables and the small pieces its workflow modules share.

:mod:`samples.auction.workflows` (wallets, items, bids) and
:mod:`samples.auction.closing` (the close and its timer) both build on these;
neither imports the other's internals.

>>> refusal("closed", "bidding closed")
{'code': 'closed', 'message': 'bidding closed'}
>>> when(1060.0)
'1970-01-01T00:17:40+00:00'
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from idemflow import Tx

WALLETS = "wallets"
ITEMS = "items"
BIDS = "bids"
WINNERS = "winners"
POPULAR = "popular"
TABLES = (WALLETS, ITEMS, BIDS, WINNERS, POPULAR)

Refusal = dict[str, Any]
"""Every abort reason of this sample: ``{"code": ..., "message": ...}`` (a plain dict: reasons are JSON)."""


def refusal(code: str, message: str) -> Refusal:
    return {"code": code, "message": message}


def when(t: float) -> str:
    """Epoch seconds as UTC ISO time, for messages people read."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def write(pairs: dict[str, Any]) -> Callable[[Tx], dict[str, Any]]:
    """A step body putting ``pairs`` into its partition (blind writes: never a conflict)."""

    def body(tx: Tx) -> dict[str, Any]:
        for key, value in pairs.items():
            tx.put(key, value)
        return pairs

    return body


__all__ = ["BIDS", "ITEMS", "POPULAR", "TABLES", "WALLETS", "WINNERS", "Refusal", "refusal", "when", "write"]
