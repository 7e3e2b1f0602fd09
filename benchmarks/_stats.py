"""Interleaved measurement and the summary every benchmark reports.

Variants run in rounds, alternating, in one process, so drift in the
machine hits all of them alike; results are medians with the spread
(interquartile range) and ratios against a named baseline.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Summary:
    name: str
    median: float
    q1: float
    q3: float

    @property
    def spread(self) -> float:
        return self.q3 - self.q1


def interleave(variants: dict[str, Callable[[int], None]], rounds: int, per_round: int) -> dict[str, Summary]:
    """Run each variant ``per_round`` times per round, alternating, ``rounds`` rounds.

    Each callable receives a running index (for unique request ids) and does
    one unit of work; returns seconds per unit as a Summary per variant.
    """
    samples: dict[str, list[float]] = {name: [] for name in variants}
    counter = 0
    for _ in range(rounds):
        for name, work in variants.items():
            start = time.perf_counter()
            for _ in range(per_round):
                work(counter)
                counter += 1
            samples[name].append((time.perf_counter() - start) / per_round)
    out = {}
    for name, values in samples.items():
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        out[name] = Summary(name, statistics.median(values), quartiles[0], quartiles[2])
    return out


def environment() -> str:
    return (
        f"python {sys.version.split()[0]} on {platform.platform()}, "
        f"{platform.processor() or platform.machine()}, "
        f"measured {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )


def write(name: str, text: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(text)
    return path
