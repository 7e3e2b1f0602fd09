"""The paper's auction application: workflows, an HTTP API, a load generator and a checker.

See ``README.md`` beside this file; ``python -m samples.auction --help`` lists the commands.
"""

from samples.auction.workflows import (
    BIDS,
    ITEMS,
    POPULAR,
    TABLES,
    WALLETS,
    WINNERS,
    WORKFLOWS,
    Invalid,
    Verdict,
    bid,
    check,
    close,
    deposit,
    item_view,
    popular,
    register,
    wallets,
    winner_view,
)

__all__ = [
    "BIDS",
    "ITEMS",
    "POPULAR",
    "TABLES",
    "WALLETS",
    "WINNERS",
    "WORKFLOWS",
    "Invalid",
    "Verdict",
    "bid",
    "check",
    "close",
    "deposit",
    "item_view",
    "popular",
    "register",
    "wallets",
    "winner_view",
]
