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
    place (by default the commit's first table and partition)."""
    if where is None:
        where = lambda: f"commit to {ops[0].ref.table}/{ops[0].ref.partition}"  # noqa: E731
    if len(ops) > caps.max_ops_per_commit:
        _limit(where, f"{len(ops)} operations in one commit; the backend allows {caps.max_ops_per_commit}")
    total = 0
    for op in ops:
        text: str | None = getattr(op, "text", None)
        if text is not None:
            size = len(text) if text.isascii() else len(text.encode("utf-8"))
            if size > caps.max_value_bytes:
                _limit(where, f"a value of {size} bytes; the backend allows {caps.max_value_bytes} per row")
            total += size
        ref = op.ref
        total += len(ref.key) + len(ref.partition)
        if len(ref.key) * 4 > caps.max_key_bytes or len(ref.partition) * 4 > caps.max_key_bytes:
            for part in (ref.key, ref.partition):
                if len(part.encode("utf-8")) > caps.max_key_bytes:
                    _limit(where, f"a key or partition over {caps.max_key_bytes} bytes")
    if total > caps.max_commit_bytes:
        _limit(where, f"{total} bytes in one commit; the backend allows {caps.max_commit_bytes}")


def _limit(where: Callable[[], str], problem: str) -> NoReturn:
    raise LimitExceededError(where(), problem)
