"""Workflows the test suites share: a bank transfer with compensation and a ledger.

Every scenario takes a ``space`` string that prefixes its partitions, so many
scenarios can share one store (and one set of cloud tables) without touching
each other's rows; :func:`rows_of` reads one space back with the prefix removed.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow import Idem, Tx, atomic, workflow
from idemflow.serialization import JSON
from idemflow.stores import Store
from idemflow.testing import data_rows
from tests.conftest import TEST_TABLES


def open_account(balance: int) -> Any:
    def open_body(tx: Tx) -> int:
        if tx.get("balance") is None:
            tx.put("balance", balance)
        return int(tx.get("balance"))

    return open_body


def debit(amount: int) -> Any:
    def debit_body(tx: Tx) -> int:
        balance = tx.get("balance")
        if balance is None:
            tx.abort("missing source account")
        if balance < amount:
            tx.abort("insufficient funds")
        tx.put("balance", balance - amount)
        history = tx.get("history", [])
        tx.put("history", [*history, -amount])
        return int(balance - amount)

    return debit_body


def credit(amount: int) -> Any:
    def credit_body(tx: Tx) -> int:
        balance = tx.get("balance")
        if balance is None:
            tx.abort("missing destination account")
        tx.put("balance", balance + amount)
        return int(balance + amount)

    return credit_body


def undo_debit(amount: int) -> Any:
    def undo_debit_body(tx: Tx, _left: object) -> None:
        tx.increment("balance", amount)
        tx.put("refunded", tx.get("refunded", 0) + amount)

    return undo_debit_body


@workflow("transfer")
def transfer(req: dict[str, Any]) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    space, amount = req["space"], req["amount"]
    left = yield atomic("accounts", space + req["src"], debit(amount), compensate=undo_debit(amount))
    yield atomic("ledger", space + "log", lambda tx: tx.increment("transfers"))
    got = yield atomic("accounts", space + req["dst"], credit(amount))
    return {"left": left, "dst": got}


def setup_accounts(store: Store, space: str, balances: dict[str, int]) -> None:
    from idemflow import run

    for name, balance in balances.items():
        run(
            atomic("accounts", space + name, open_account(balance)),
            request_id=f"{space}open-{name}",
            store=store,
        )


def rows_of(store: Store, space: str) -> dict[tuple[str, str, str], JSON]:
    """Data rows of one scenario space, partitions without the prefix."""
    return {
        (table, partition[len(space) :], key): value
        for (table, partition, key), value in data_rows(store, *TEST_TABLES).items()
        if partition.startswith(space)
    }
