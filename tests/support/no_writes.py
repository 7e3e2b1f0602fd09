"""A real store that answers every read and fails the test at any write: how a test proves a
command reads only (``check-deploy``). Not a mock: the store underneath answers; the wrapper only
counts what it is asked and refuses what would change it."""

from __future__ import annotations

from collections import Counter
from typing import Any

WRITES = frozenset({"commit", "commit_cache", "create_tables", "sweep", "delete_table", "drop_tables"})
"""The store methods that change what it holds."""


class Wrote(AssertionError):
    """The command under test wrote to the store."""


class NoWrites:
    """``store`` for reads; any call of :data:`WRITES` raises :class:`Wrote` (and is counted)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def commit(self, ops: Any) -> Any:
        self.calls["commit"] += 1
        raise Wrote(f"commit of {len(ops)} op(s)")

    def commit_cache(self, ops: Any) -> None:
        self.calls["commit_cache"] += 1
        raise Wrote(f"commit_cache of {len(ops)} op(s)")

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name in WRITES:
            raise Wrote(name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return found(*args, **kwargs)

        return counted


class AsyncNoWrites(NoWrites):
    """:class:`NoWrites` over an asynchronous store (its ``commit`` a coroutine function)."""

    async def commit(self, ops: Any) -> Any:  # type: ignore[override]
        self.calls["commit"] += 1
        raise Wrote(f"commit of {len(ops)} op(s)")

    async def commit_cache(self, ops: Any) -> None:  # type: ignore[override]
        self.calls["commit_cache"] += 1
        raise Wrote(f"commit_cache of {len(ops)} op(s)")
