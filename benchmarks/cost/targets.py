"""Issue 45's targets for the SQL stores, each beside the ratio ``cost`` measured for it: met or
missed, on the page, in its record and on the console.

The targets (idemflow against the hand-written minimal exactly-once protocol on the same server,
and against DBOS Transact's 2-step workflow on the same database):

- p50 ≤ 1.2× and client CPU ≤ 1.5× the minimal, for workflows of 1, 2 and 5 steps;
- a duplicate of a finished 2-step request ≤ 2× the minimal's duplicate (p50);
- 10× faster than DBOS on SQLite, 5× on PostgreSQL (the 2-step workflows' p50).

A ratio is met when its median over the rounds is at most the target; *inside the IQR* says a
missed median whose interquartile range reaches the target (a noisy machine's "maybe").

Why apart: the targets are the issue's, the ratios the run's; the report only puts them side by
side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from benchmarks.common.stats import Summary

SQL = ("sqlite", "postgres")
FASTER_THAN_DBOS = {"sqlite": 10.0, "postgres": 5.0}


class Measured(Protocol):
    """A ratio of one run (:class:`benchmarks.cost.report.Ratio`)."""

    @property
    def backend(self) -> str: ...
    @property
    def what(self) -> str: ...
    @property
    def p50(self) -> Summary: ...
    @property
    def cpu(self) -> Summary: ...


@dataclass(frozen=True)
class Target:
    backend: str
    ratio: str
    """The ratio's name on the page (``Ratio.what``)."""
    measure: str
    """``p50`` or ``CPU``."""
    limit: float
    words: str


def _targets() -> list[Target]:
    made = []
    for kind in SQL:
        for steps in (1, 2, 5):
            ratio = f"idemflow / minimal, {steps} step{'s' if steps > 1 else ''}"
            made.append(Target(kind, ratio, "p50", 1.2, "p50 ≤ 1.2× the minimal"))
            made.append(Target(kind, ratio, "CPU", 1.5, "CPU ≤ 1.5× the minimal"))
        duplicate = "idemflow / minimal, 2 steps, duplicate"
        made.append(Target(kind, duplicate, "p50", 2.0, "duplicate ≤ 2× the minimal's"))
        times = FASTER_THAN_DBOS[kind]
        made.append(Target(kind, "idemflow 2 steps / DBOS", "p50", 1 / times, f"{times:g}× faster than DBOS"))
    return made


TARGETS = _targets()


@dataclass(frozen=True)
class Verdict:
    target: Target
    measured: Summary

    @property
    def met(self) -> bool:
        return self.measured.median <= self.target.limit

    @property
    def words(self) -> str:
        if self.met:
            return "met"
        if self.measured.q1 <= self.target.limit:
            return "**missed** (median; target inside the IQR)"
        return "**missed**"


def verdicts(measured: Sequence[Measured]) -> list[Verdict]:
    """Every target whose ratio was measured, with it (a backend or DBOS left out: none)."""
    by = {(r.backend, r.what): r for r in measured}
    found = []
    for target in TARGETS:
        ratio = by.get((target.backend, target.ratio))
        if ratio is not None:
            found.append(Verdict(target, ratio.p50 if target.measure == "p50" else ratio.cpu))
    return found


def rows(found: list[Verdict]) -> list[list[str]]:
    """The page's table: backend, ratio, measure, target, measured (IQR), verdict."""
    return [
        [
            v.target.backend,
            v.target.ratio,
            v.target.measure,
            f"≤ {v.target.limit:.2f} ({v.target.words})",
            f"{v.measured.median:.2f} (IQR {v.measured.q1:.2f}–{v.measured.q3:.2f})",
            v.words,
        ]
        for v in found
    ]


def console(found: list[Verdict]) -> list[str]:
    """One line per target for the console."""
    return [
        f"  target {v.target.backend:9} {v.target.ratio:40} {v.target.measure:4} "
        f"{v.measured.median:6.2f} ≤ {v.target.limit:.2f}  {'met' if v.met else 'MISSED'}"
        for v in found
    ]
