"""The example of ``docs/testing.md``: ``check_workflow`` catches a workflow that passes data
between steps through a Python variable, and passes the version that uses step results.

Run it: ``python docs/examples/checking_workflows.py``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow import atomic, Idem, run, Tx, workflow
from idemflow.stores import Store
from idemflow.testing import CheckReport, check_workflow

ORDERS = [{"id": "o-1", "buyer": "ann", "price": 5}]


def open_wallet(store: Store) -> None:
    """Runs on every fresh store before a scenario: not under test."""
    run(atomic("wallets", "ann", lambda tx: tx.put("balance", 100)), request_id="open-ann", store=store)


@workflow("buy")
def buy_leaky(order: dict[str, Any]) -> Generator[Idem[Any], Any, dict[str, int]]:
    charged: list[int] = []  # BUG: what step 1 did is kept in a Python list ...

    def charge(tx: Tx) -> None:
        balance = tx.get("balance", 0)
        tx.put("balance", balance - order["price"])
        charged.append(order["price"])

    yield atomic("wallets", order["buyer"], charge, name="charge")
    # ... and read back by step 2. A retry that replays step 1 from its memo never fills it.
    yield atomic("receipts", order["buyer"], lambda tx: tx.put(order["id"], sum(charged)), name="receipt")
    return {"charged": sum(charged)}


@workflow("buy")
def buy(order: dict[str, Any]) -> Generator[Idem[Any], Any, dict[str, int]]:
    def charge(tx: Tx) -> int:
        balance = tx.get("balance", 0)
        tx.put("balance", balance - order["price"])
        return int(order["price"])  # FIX: the step's result is memoized with its write

    charged = yield atomic("wallets", order["buyer"], charge, name="charge")
    yield atomic("receipts", order["buyer"], lambda tx: tx.put(order["id"], charged), name="receipt")
    return {"charged": charged}


def main() -> tuple[CheckReport, CheckReport]:
    leaky = check_workflow(buy_leaky, ORDERS, setup=open_wallet)
    print(leaky)
    fixed = check_workflow(buy, ORDERS, setup=open_wallet)
    print(fixed)
    return leaky, fixed


if __name__ == "__main__":
    main()
