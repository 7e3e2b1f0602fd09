"""Deprecated: the operator commands' old path: :mod:`idemflow.admin` holds them now.

Kept for one minor release: each name resolves with a :class:`DeprecationWarning` naming its
new place (docs/upgrading.md lists every move).
"""

from __future__ import annotations

from idemflow._moved import Moves, resolve

MOVES: Moves = {
    "runs": "idemflow.admin",
    "RunSummary": "idemflow.admin",
    "RunsPage": "idemflow.admin",
    "abort": "idemflow.admin:abort_request",
}


def __getattr__(name: str) -> object:
    return resolve(__name__, name, MOVES)
