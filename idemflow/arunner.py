"""Deprecated: the asyncio runner's old path: ``arun`` and ``arun_result`` are :mod:`idemflow`'s now.

Kept for one minor release: each name resolves with a :class:`DeprecationWarning` naming its
new place (docs/upgrading.md lists every move).
"""

from __future__ import annotations

from idemflow.core.moved import Moves as _Moves
from idemflow.core.moved import resolve as _resolve

_MOVES: _Moves = {
    "arun": "idemflow",
    "arun_result": "idemflow",
    "arun_status": "idemflow.client:astatus",
}


def __getattr__(name: str) -> object:
    return _resolve(__name__, name, _MOVES)
