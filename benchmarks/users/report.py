"""The page of ``users``: per backend and workload, the latency and throughput table, the ratios
between variants per round, the headlines, and the figure.

Why apart: what the rounds measured is turned into tables and plots in one place, away from the
measuring.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common.backends import LABELS
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import Summary, paired_ratio
from benchmarks.users.rounds import VARIANTS, Cell


def _failures(failed: list[str]) -> str:
    if not failed:
        return "0"
    kinds = {kind: failed.count(kind) for kind in sorted(set(failed))}
    return f"{len(failed)} (" + ", ".join(f"{n} {kind}" for kind, n in kinds.items()) + ")"


def _ratio(name: str, a: list[float], b: list[float]) -> Summary:
    return paired_ratio(name, a, b)


def report_backend(report: Report, backend: str, workload: str, results: dict[int, dict[str, Cell]]) -> None:
    report.add(f"### {workload}", "")
    rows = []
    for users, cells in results.items():
        for name, cell in cells.items():
            extra = ""
            if name == "async":
                extra = f" (clients {cell.client_throughput().median:.0f}/s)"
            tp = cell.throughput()
            rows.append(
                [
                    str(users),
                    name,
                    f"{cell.median_latency() * 1e3:.2f}",
                    f"{cell.p95() * 1e3:.2f}",
                    f"{tp.median:.0f} (IQR {tp.q1:.0f}–{tp.q3:.0f}){extra}",
                    str(len(cell.latencies)),
                    _failures([f for r in cell.rounds for f in r.failed]),
                ]
            )
    report.table(["users", "variant", "median ms", "p95 ms", "completed/s", "answered", "failed"], rows)
    ratio_rows = []
    for users, cells in results.items():
        base, sync, asyn = cells["baseline"], cells["sync"], cells["async"]
        ratio_rows.append(
            [
                str(users),
                fmt_ratio(_ratio("sync/base", sync.round_medians(), base.round_medians())),
                fmt_ratio(_ratio("sync/base p95", sync.round_p95s(), base.round_p95s())),
                fmt_ratio(_ratio("async/sync", asyn.round_medians(), sync.round_medians())),
                fmt_ratio(
                    _ratio(
                        "tp sync/base",
                        [r.throughput for r in sync.rounds],
                        [r.throughput for r in base.rounds],
                    )
                ),
                fmt_ratio(
                    _ratio(
                        "tp async/sync",
                        [r.throughput for r in asyn.rounds],
                        [r.throughput for r in sync.rounds],
                    )
                ),
            ]
        )
    report.add("Ratios per round (median, IQR over rounds):", "")
    report.table(
        [
            "users",
            "latency sync / baseline",
            "p95 sync / baseline",
            "client latency async / sync",
            "throughput sync / baseline",
            "throughput async / sync",
        ],
        ratio_rows,
    )
    first = min(results)
    cells = results[first]
    report.headline(
        f"users.{backend}.{workload}.sync_over_baseline_latency",
        _ratio("x", cells["sync"].round_medians(), cells["baseline"].round_medians()),
        note=f"{first} user(s), median latency",
    )
    report.headline(
        f"users.{backend}.{workload}.async_over_sync_latency",
        _ratio("x", cells["async"].round_medians(), cells["sync"].round_medians()),
        note=f"{first} user(s), client latency",
    )
    last = max(results)
    cells = results[last]
    report.headline(
        f"users.{backend}.{workload}.sync_over_baseline_throughput_max_users",
        _ratio(
            "x",
            [r.throughput for r in cells["sync"].rounds],
            [r.throughput for r in cells["baseline"].rounds],
        ),
        note=f"{last} users, completed/s",
    )


def plot_backend(out: Path, backend: str, per_workload: dict[str, dict[int, dict[str, Cell]]]) -> Path:
    from benchmarks.common.plot import users_figure

    return users_figure(
        out / f"users-{backend}.png",
        f"{LABELS[backend]}: throughput and p95 latency against concurrent users",
        {
            workload: {
                variant: (
                    list(results),
                    [results[u][variant].throughput().median for u in results],
                    [results[u][variant].p95() * 1e3 for u in results],
                )
                for variant in VARIANTS
            }
            for workload, results in per_workload.items()
        },
    )
