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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


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
    return {
        name: summarize(name, values)
        for name, values in interleave_samples(variants, rounds, per_round).items()
    }


def interleave_samples(
    variants: dict[str, Callable[[int], None]], rounds: int, per_round: int, warmup: int = 0
) -> dict[str, list[float]]:
    """Like :func:`interleave`, but the raw seconds per unit of every round, per variant,
    in round order, so paired per-round ratios can be taken (:func:`paired_ratio`).
    The variants' order rotates from round to round; each first runs ``warmup`` units untimed
    (a new SQLite file needs a few hundred commits before its first WAL checkpoint, and
    commits before it cost about twice as much)."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    counter = 0
    for work in variants.values():  # untimed: caches, connections, files at their steady size
        for _ in range(warmup):
            work(counter)
            counter += 1
    names = list(variants)
    for r in range(rounds):
        # Rotate the order each round: what one variant leaves behind (a WAL to checkpoint,
        # a background write) must not always land on the same next variant.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            work = variants[name]
            start = time.perf_counter()
            for _ in range(per_round):
                work(counter)
                counter += 1
            samples[name].append((time.perf_counter() - start) / per_round)
    return samples


def summarize(name: str, values: Sequence[float]) -> Summary:
    """Median and quartiles of ``values`` (all three equal for a single value)."""
    if not values:
        raise ValueError(f"no samples for {name!r}")
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return Summary(name, statistics.median(values), quartiles[0], quartiles[2])


def paired_ratio(name: str, numerator: Sequence[float], denominator: Sequence[float]) -> Summary:
    """Ratios of samples taken in the same round (interleaved), summarized.

    Pairing by round cancels drift that hits both variants of a round alike,
    so the spread of the ratio is the variants' own noise.
    """
    if len(numerator) != len(denominator):
        raise ValueError(f"{name}: {len(numerator)} samples against {len(denominator)}")
    return summarize(name, [a / b for a, b in zip(numerator, denominator, strict=True) if b > 0])


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def environment() -> str:
    return (
        f"python {sys.version.split()[0]} on {platform.platform()}, "
        f"{platform.processor() or platform.machine()}, "
        f"measured {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )


def write(name: str, text: str, out: Path | None = None) -> Path:
    """Write a result file into ``out`` (default: benchmarks/results/)."""
    folder = RESULTS if out is None else out
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path
