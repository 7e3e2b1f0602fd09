"""Deprecated: the old home of the steps that stay the same on replay (``effect``, ``now``,
``uuid4``, ``random``); import them from :mod:`idemflow`.

Kept for one minor release: each name resolves with a :class:`DeprecationWarning` naming its
new place (docs/upgrading.md lists every move).
"""

from __future__ import annotations

from idemflow.core.moved import Moves as _Moves
from idemflow.core.moved import resolve as _resolve

_MOVES: _Moves = {"effect": "idemflow", "now": "idemflow", "random": "idemflow", "uuid4": "idemflow"}


def __getattr__(name: str) -> object:
    return _resolve(__name__, name, _MOVES)
