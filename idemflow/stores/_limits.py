"""A commit checked against its store's :class:`~idemflow.stores.base.Capabilities` before it is sent.

Each store calls :func:`check_commit` once per commit, with its own capabilities: the one place
its limits are enforced, for the engine and any other caller alike. So a step over a limit fails
with a clear :class:`~idemflow.errors.LimitExceededError` before anything is written (the
engine adds which step), instead of an SDK error or, on Azurite, silent acceptance of what Azure
would refuse. A commit's total counts its keys too: DynamoDB's 4 MB transaction limit does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

from idemflow.errors import LimitExceededError
from idemflow.stores.base import Capabilities, Op


def check_commit(ops: Sequence[Op], caps: Capabilities, where: Callable[[], str] | None = None) -> None:
    """Raise :class:`LimitExceededError` if ``ops`` break a limit of ``caps``; ``where()`` names the
    place (by default the commit's first table and partition, named only when one is broken: every
    commit passes here)."""
    if len(ops) > caps.max_ops_per_commit:
        _limit(
            where, ops, f"{len(ops)} operations in one commit; the backend allows {caps.max_ops_per_commit}"
        )
    total = 0
    max_value, max_key = caps.max_value_bytes, caps.max_key_bytes
    for op in ops:
        text: str | None = getattr(op, "text", None)
        if text is not None:
            size = len(text) if text.isascii() else len(text.encode("utf-8"))
            if size > max_value:
                _limit(where, ops, f"a value of {size} bytes; the backend allows {max_value} per row")
            total += size
        ref = op.ref
        key, partition = len(ref.key), len(ref.partition)
        total += key + partition
        if key * 4 > max_key or partition * 4 > max_key:
            for part in (ref.key, ref.partition):
                if len(part.encode("utf-8")) > max_key:
                    _limit(where, ops, f"a key or partition over {max_key} bytes")
    if total > caps.max_commit_bytes:
        _limit(where, ops, f"{total} bytes in one commit; the backend allows {caps.max_commit_bytes}")


def _limit(where: Callable[[], str] | None, ops: Sequence[Op], problem: str) -> NoReturn:
    place = f"commit to {ops[0].ref.table}/{ops[0].ref.partition}" if where is None else where()
    raise LimitExceededError(place, problem)
