"""Every row's ``expires_at`` as the backend holds it, for tests of retention on every store:
read by the function the backend's registry entry names (:mod:`idemflow.testing.expiries` for
the built-in ones), through any wrapper."""

from __future__ import annotations

from idemflow.stores import Store
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


__all__ = ["Where", "expiries"]
