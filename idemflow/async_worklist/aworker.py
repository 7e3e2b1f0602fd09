"""Deprecated: the asyncio worker's old path: :mod:`idemflow.worker` holds it now.

Kept for one minor release: each name resolves with a :class:`DeprecationWarning` naming its
new place (docs/upgrading.md lists every move).
"""

from __future__ import annotations

from idemflow.core.moved import Moves as _Moves
from idemflow.core.moved import resolve as _resolve

_MOVES: _Moves = {
    "AsyncWorker": "idemflow.worker",
}


def __getattr__(name: str) -> object:
    return _resolve(__name__, name, _MOVES)
