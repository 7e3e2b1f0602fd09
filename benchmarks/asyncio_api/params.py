"""What ``asyncio_api`` runs: its variants, stores, client counts, targets, and its sizes, full
and quick.

Why apart: the HTTP part, the one-client part, the page and the command line all read these.
"""

from __future__ import annotations

from dataclasses import dataclass

VARIANTS = ("threadpool", "async", "bounded")
RATIOS = ("async", "bounded")
"""The variants compared with *threadpool*."""
HTTP_KINDS = ("moto", "azurite")
KINDS = ("sqlite", "moto", "azurite")
CLIENTS = (1, 8, 32, 128)
QUICK_CLIENTS = (1, 8)
PROBE_PERIOD = 0.010
PROBE_TARGET_MS = 20.0
RATIO_TARGET = 1.05


@dataclass(frozen=True)
class Sizes:
    clients: tuple[int, ...]
    rounds: int
    min_requests: int
    per_client: int
    warmup: int
    """Untimed requests on each cell's fresh tables before it is measured."""
    one_rounds: int
    one_per_round: dict[str, int]
    one_warmup: dict[str, int]

    def requests(self, clients: int) -> int:
        return max(self.min_requests, self.per_client * clients)


FULL = Sizes(  # sized for a shared 2-core machine: about 10 minutes under a load average of 15
    clients=CLIENTS,
    rounds=3,
    min_requests=30,
    per_client=1,
    warmup=4,
    one_rounds=8,
    one_per_round={"sqlite": 100, "moto": 15, "azurite": 15},
    one_warmup={"sqlite": 250, "moto": 10, "azurite": 10},
)
QUICK = Sizes(
    clients=QUICK_CLIENTS,
    rounds=2,
    min_requests=4,
    per_client=1,
    warmup=1,
    one_rounds=2,
    one_per_round={"sqlite": 5, "moto": 3, "azurite": 3},
    one_warmup={"sqlite": 10, "moto": 2, "azurite": 2},
)
