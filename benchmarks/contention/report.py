"""The page of ``contention``: per store the table of every cell, the idemflow / minimal throughput
ratios against their target, failures and violations, the headlines, and the figure.

Why apart: turning the results into tables and plots is a job of its own, away from the load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common.backends import LABELS
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import Summary, paired_ratio, percentile
from benchmarks.contention.params import TARGET_RATIO, TITLES, VARIANTS
from benchmarks.contention.results import Result, Results, _pct, _rounded


def _ratio(cell: dict[str, Result]) -> Summary:
    return paired_ratio(
        "idemflow/minimal",
        [r.throughput for r in cell["idemflow"].rounds],
        [r.throughput for r in cell["minimal"].rounds],
    )


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1e3:.1f}" if values else "–"


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def report_store(report: Report, kind: str, results: Results) -> dict[str, Any]:
    """The store's tables; returns its part of the JSON record."""
    report.add(f"## {TITLES.get(kind, LABELS.get(kind, kind))}", "")
    rows: list[list[str]] = []
    ratios: list[list[str]] = []
    record: dict[str, Any] = {}
    for placement, by_users in results.items():
        record[placement] = {}
        for users, cell in by_users.items():
            ratio = _ratio(cell)
            record[placement][str(users)] = {
                **{name: result.record() for name, result in cell.items()},
                "idemflow_over_minimal_throughput": {
                    "median": ratio.median,
                    "q1": ratio.q1,
                    "q3": ratio.q3,
                },
            }
            verdict = "met" if ratio.median >= TARGET_RATIO else "**missed**"
            ratios.append([placement, str(users), fmt_ratio(ratio), verdict])
            for name, result in cell.items():
                tp = result.throughput()
                ok = "ok" if not result.violations else f"**{len(result.violations)} VIOLATIONS**"
                rows.append(
                    [
                        placement,
                        str(users),
                        name,
                        f"{tp.median:.0f} (IQR {tp.q1:.0f}–{tp.q3:.0f})",
                        _ms(result.latencies, 50),
                        _ms(result.latencies, 95),
                        str(len(result.failures)) if not result.failures else f"**{len(result.failures)}**",
                        f"{_n(_pct(result.retries, 50))} / {_n(_pct(result.retries, 99))}",
                        str(result.free_attempts),
                        f"{result.retried.get('data', 0)} / {result.retried.get('transient', 0)}",
                        "–" if result.conflicts is None else str(result.conflicts),
                        ok,
                    ]
                )
    report.table(
        [
            "placement",
            "users",
            "variant",
            "sends/s",
            "p50 ms",
            "p95 ms",
            "failed",
            "retries/request p50 / p99",
            "writes, conflict-free",
            "retried: data / transient",
            "emulated conflicts",
            "exactly once",
        ],
        rows,
    )
    report.add(f"idemflow / minimal throughput, per round (median, IQR; target ≥ {TARGET_RATIO}):", "")
    report.table(["placement", "users", "idemflow / minimal", "target"], ratios)
    problems = [
        (placement, users, name, text)
        for placement, by_users in results.items()
        for users, cell in by_users.items()
        for name, result in cell.items()
        for text in [*(f"VIOLATION: {v}" for v in result.violations), *sorted(set(result.failures))[:3]]
    ]
    if problems:
        report.add("Failures and exactly-once violations (first distinct ones per cell):", "")
        for placement, users, name, text in problems:
            report.add(f"- {placement}, {users} users, {name}: `{text}`")
        report.add("")
    else:
        report.add("No send failed and every exactly-once check held.", "")
    return record


def headlines(report: Report, kind: str, results: Results) -> None:
    hot = results.get("hot", {})
    for users in (64, 128):
        if users in hot:
            report.headline(
                f"contention.{kind}.hot.{users}.idemflow_over_minimal_throughput",
                _ratio(hot[users]),
                note=f"hot row, {users} users, sends/s",
            )
            retries = hot[users]["idemflow"].retries
            report.headline(
                f"contention.{kind}.hot.{users}.idemflow_retries",
                {"p50": _rounded(_pct(retries, 50)), "p99": _rounded(_pct(retries, 99))},
                note="commits beyond a conflict-free execution's, per request",
            )
    for name in VARIANTS:
        cells = [cell[name] for by_users in results.values() for cell in by_users.values()]
        report.headline(
            f"contention.{kind}.{name}.failed",
            sum(len(r.failures) for r in cells),
            note="sends that raised, all cells",
        )
        report.headline(
            f"contention.{kind}.{name}.violations",
            sum(len(r.violations) for r in cells),
            note="exactly-once violations, all cells",
        )


def plot(out: Path, per_store: dict[str, Results]) -> Path:
    from benchmarks.common.plot import panels_lines_figure

    panels = {
        TITLES.get(kind, LABELS.get(kind, kind)): {
            f"{name}, {placement}": (
                [float(u) for u in by_users],
                [by_users[u][name].throughput().median for u in by_users],
            )
            for placement, by_users in results.items()
            for name in VARIANTS
        }
        for kind, results in per_store.items()
    }
    return panels_lines_figure(
        out / "contention.png",
        "2-step vote with a read-modify-write: throughput against concurrent users",
        "concurrent users",
        "sends/s (both sends of each request)",
        panels,
        style=lambda name: {
            "linestyle": "--" if "spread" in name else "-",
            "marker": "o" if name.startswith("idemflow") else "s",
            "color": "C0" if name.startswith("idemflow") else "C1",
        },
    )
