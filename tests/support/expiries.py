"""Every row's ``expires_at`` as the backend holds it, for tests of retention on every store
(and expiry applied as each backend's service applies it): read by the function the backend's
registry entry names (:mod:`idemflow.testing.expiries` for the built-in ones), through any
wrapper."""

from __future__ import annotations

import random
from typing import Any

from botocore.exceptions import ClientError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from idemflow.stores import Store
from idemflow.stores._dynamodb_errors import error_code
from idemflow.stores.registry import STORES, load
from idemflow.testing import StoreWrapper
from idemflow.testing.expiries import Where


def expiries(store: Store) -> dict[Where, float | None]:
    """Every row of ``store`` and its ``expires_at`` (None: kept until deleted, e.g. data rows)."""
    if isinstance(store, StoreWrapper):  # a wrapper holds the rows of the store it wraps
        return expiries(store.inner)
    entry = STORES.for_blocking(store)
    if entry is None or entry.row_expiries is None:
        raise AssertionError(f"no registered way to read the expiry of {type(store).__name__}'s rows")
    found: dict[Where, float | None] = load(entry.row_expiries)(store)
    return found


__all__ = ["Where", "expire_as_the_service_does", "expiries"]


def expire_as_the_service_does(store: Store, now: float, seed: int = 0) -> int:
    """Apply expiry at ``now`` as the backend's own service does; how many rows went.

    A store that sweeps (SQLite, Azure Tables, memory) runs its sweep until it finds nothing
    more; DynamoDB's TTL (which moto and DynamoDB Local never apply) is played here: every item
    whose ``expires_at`` passed is deleted, blindly, in a random order."""
    if isinstance(store, StoreWrapper):
        return expire_as_the_service_does(store.inner, now, seed)
    sweep = getattr(store, "expire", None)
    if callable(sweep):
        gone = 0
        for _ in range(50):
            report = sweep(now=now, limit=1000)
            gone += report.deleted
            if report.found == 0:
                return gone
        raise AssertionError("the sweep never settled")
    victims = [where for where, at in expiries(store).items() if at is not None and at < now]
    random.Random(seed).shuffle(victims)
    client: Any = store.client  # type: ignore[attr-defined]
    for table, partition, key in victims:
        _delete_as_ttl_does(client, table, {"pk": {"S": partition}, "sk": {"S": key}})
    return len(victims)


def _delete_as_ttl_does(client: Any, table: str, key: dict[str, Any]) -> None:
    """Delete one expired item; the service's TTL comes back later to an item a transaction
    holds (DynamoDB Local answers ``TransactionConflictException`` while one is ongoing)."""
    for attempt in Retrying(
        retry=retry_if_exception(_held_by_a_transaction),
        wait=wait_exponential(multiplier=0.01, max=0.5),
        stop=stop_after_attempt(30),
        reraise=True,
    ):
        with attempt:
            client.delete_item(TableName=table, Key=key)


def _held_by_a_transaction(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) == "TransactionConflictException"
