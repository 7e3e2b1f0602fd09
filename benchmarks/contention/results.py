"""What ``contention`` keeps per variant and cell: the requests and answers (:class:`Ledger`, with
the exactly-once check over them), the rounds, retries, failures and violations
(:class:`Result`).

Why apart: the cells fill these and the page reads them; neither needs the other's code.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common.stats import Summary, percentile, summarize
from benchmarks.contention.params import OPTIONS, Vote
from idemflow.serialization import JSON


@dataclass
class Ledger:
    """What a variant was asked and answered in one cell: the exactly-once check's input."""

    requests: dict[str, Vote] = field(default_factory=dict)
    answers: dict[str, list[JSON]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)

    def check(self, counts: dict[str, dict[str, int]]) -> list[str]:
        """Every violation of exactly-once found: counts against distinct voters, answers."""
        problems: list[str] = []
        answered: dict[tuple[str, str], list[int]] = defaultdict(list)
        unknown: dict[tuple[str, str], int] = defaultdict(int)
        for request, vote in self.requests.items():
            where = (vote["survey"], vote["option"])
            got = self.answers.get(request, [])
            if not got:
                unknown[where] += 1  # every send failed: applied once or not at all
                continue
            if any(other != got[0] for other in got[1:]):
                problems.append(f"request {request} answered differently: {got}")
            answered[where].append(int(got[0]) if isinstance(got[0], int) else -1)
        surveys = {vote["survey"] for vote in self.requests.values()}
        for survey in sorted(set(counts) - surveys):
            problems.append(f"survey {survey} has counts {counts[survey]} but no vote was sent to it")
        for survey in sorted(surveys):
            for option in OPTIONS:
                where = (survey, option)
                final = counts.get(survey, {}).get(option, 0)
                low, high = len(answered[where]), len(answered[where]) + unknown[where]
                if not low <= final <= high:
                    expected = str(low) if low == high else f"{low}..{high}"
                    problems.append(f"survey {survey} counts {final} '{option}' votes, expected {expected}")
                ranks = sorted(answered[where])
                repeated = sorted({rank for rank in ranks if ranks.count(rank) > 1})
                if repeated:
                    problems.append(f"survey {survey} '{option}': ranks {repeated[:5]} answered twice")
                if ranks and (ranks[0] < 1 or ranks[-1] > final):
                    problems.append(
                        f"survey {survey} '{option}': ranks {ranks[0]}..{ranks[-1]}, count {final}"
                    )
        return problems


@dataclass
class RoundResult:
    sends: int
    seconds: float
    latencies: list[float]

    @property
    def throughput(self) -> float:
        return self.sends / self.seconds


@dataclass
class Result:
    """One variant in one cell (store × placement × users), over all rounds."""

    rounds: list[RoundResult] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)
    """Write attempts beyond a conflict-free execution's, per request id."""
    failures: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    free_attempts: int = 0
    """Write attempts of a conflict-free request (both sends), measured on the cell's tables."""
    conflicts: int | None = None
    """Transaction conflicts the emulator produced (DynamoDB)."""
    retried: dict[str, int] = field(default_factory=dict)
    """Retries by kind over the cell (calibration and warm-up included): ``data`` (a failed
    condition: re-read) and ``transient`` (a concurrent transaction, throttling, busy: resent)."""

    @property
    def latencies(self) -> list[float]:
        return [x for r in self.rounds for x in r.latencies]

    def throughput(self) -> Summary:
        return summarize("throughput", [r.throughput for r in self.rounds])

    def record(self) -> dict[str, Any]:
        latencies = self.latencies
        tp = self.throughput()
        return {
            "throughput": {"median": tp.median, "q1": tp.q1, "q3": tp.q3},
            "rounds": [{"sends": r.sends, "seconds": r.seconds} for r in self.rounds],
            "latency_ms": {
                "p50": statistics.median(latencies) * 1e3 if latencies else None,
                "p95": percentile(latencies, 95) * 1e3 if latencies else None,
            },
            "failed": len(self.failures),
            "failures": sorted(set(self.failures))[:10],
            "retries_per_request": {"p50": _pct(self.retries, 50), "p99": _pct(self.retries, 99)},
            "requests": len(self.retries),
            "conflict_free_attempts": self.free_attempts,
            "emulated_conflicts": self.conflicts,
            "retried_by_kind": self.retried,
            "violations": self.violations,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _pct(values: list[int], q: float) -> float | None:
    return percentile([float(v) for v in values], q) if values else None


Results = dict[str, dict[int, dict[str, Result]]]
"""``results[placement][users][variant]`` for one store."""
