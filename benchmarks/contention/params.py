"""What ``contention`` runs: its stores, users, placements, variants, rates and targets, the shape
of a vote, and its sizes, full and quick.

Why apart: the variants, the cells, the page and the command line all read these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STORES = ("sqlite", "dynamodb-local", "azurite")
TITLES = {
    "sqlite": "SQLite (WAL, synchronous=FULL)",
    "dynamodb-local": "DynamoDB Local + conflict emulator",
    "moto": "DynamoDB on moto + conflict emulator",
    "azurite": "Azure Tables (Azurite)",
}
DYNAMO = ("dynamodb-local", "moto")
USERS = (1, 8, 32, 64, 128)
PLACEMENTS = ("hot", "spread")
VARIANTS = ("idemflow", "minimal")
OPTIONS = ("yes", "no")
PHANTOM_RATE = 0.05
CALIBRATION = 3
"""Requests (each sent twice, one after the other) that measure a conflict-free execution's writes."""
TARGET_RATIO = 0.9

Vote = dict[str, str]
"""``{"survey": ..., "voter": ..., "option": ...}``"""


@dataclass(frozen=True)
class Sizes:
    """How much each cell runs, by store (key ``default`` for the ones not named)."""

    users: tuple[int, ...]
    rounds: dict[str, int]
    requests: dict[str, int]
    """Requests (each sent twice) per variant per round, split over the users (at least one each)."""
    warmup: dict[str, int]
    """Untimed requests per variant per cell before the rounds (SQLite files to their steady state)."""

    def of(self, sizes: dict[str, int], kind: str) -> int:
        return sizes.get(kind, sizes["default"])

    def per_user(self, kind: str, users: int) -> int:
        return max(1, math.ceil(self.of(self.requests, kind) / users))


FULL = Sizes(
    USERS,
    # The servers are slow under a hot row (a 128-user hot round of both variants takes about
    # 95 s on Azurite, 25 s on DynamoDB Local, on 2 shared cores): two rounds keep the run
    # near 10 minutes.
    rounds={"sqlite": 4, "default": 2},
    requests={"sqlite": 128, "default": 24},
    warmup={"sqlite": 200, "default": 0},
)
QUICK = Sizes((1, 4), rounds={"default": 1}, requests={"default": 4}, warmup={"sqlite": 8, "default": 0})
