"""The soak's page: a row per sample, the headline trends, and a figure of four panels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common.plot import panels_lines_figure
from benchmarks.common.report import Report
from benchmarks.soak.sample import KINDS, Sample


def write(report: Report, samples: list[Sample], retention: float) -> Path:
    if not samples:
        report.add("No sample was taken (the soak was shorter than one interval).")
        return report.write()
    report.data["samples"] = [sample.to_json() for sample in samples]
    report.add(
        "## Over time",
        "",
        f"Expired rows still in the file (whose `expires_at` passed, retention {retention:g} s), by kind; "
        "the oldest one's lateness (seconds past its expiry); rows in the file; database + WAL size; "
        "the process's RSS; p50 latency of `run` and `submit` in the interval before the sample; the "
        "process's CPU in the interval per request finished in it (load, worker and sweeps). Since 1.0 a "
        "finished run record goes when it expires, like its memos (which carry its incarnation); "
        "before, it stayed one more retention window (at least 24 h), so run records grew for the "
        "whole soak. Data rows are never expired: `rows` grows by the data each request writes.",
        "",
    )
    header = ["t (s)", *KINDS, "oldest memo (s)", "oldest outbox (s)", "rows", "file MB", "RSS MB"]
    header += ["run p50 ms", "submit p50 ms", "CPU ms/request"]
    rows = []
    for s in samples:
        rows.append(
            [
                f"{s.t:.0f}",
                *(f"{s.expired[kind]:,}" for kind in KINDS),
                f"{s.oldest['memos']:.0f}",
                f"{s.oldest['outbox/inbox']:.0f}",
                f"{s.rows:,}",
                f"{s.file_mb:.1f}",
                f"{s.rss_mb:.0f}",
                f"{s.run_p50_ms:.2f}",
                f"{s.submit_p50_ms:.2f}",
                f"{s.cpu_ms_per_request:.2f}",
            ]
        )
    report.table(header, rows)
    backlogs = [s for s in samples if s.store_backlog is not None]
    if backlogs:
        report.add("## What the store says (its expiry backlog metric)", "")
        keys = list(backlogs[0].store_backlog or {})
        report.table(
            ["t (s)", *keys],
            [[f"{s.t:.0f}", *(_cell((s.store_backlog or {}).get(key)) for key in keys)] for s in backlogs],
        )
    _headlines(report, samples)
    _figure(report, samples)
    return report.write()


def _cell(value: Any) -> str:
    return (
        f"{value:,.1f}"
        if isinstance(value, float)
        else f"{value:,}"
        if isinstance(value, int)
        else str(value)
    )


def _headlines(report: Report, samples: list[Sample]) -> None:
    last = samples[-1]
    half = samples[len(samples) // 2]
    minutes = (last.t - half.t) / 60
    growth = (last.file_mb - half.file_mb) / minutes if minutes > 0 else float("nan")
    memo_peak = max(s.expired["memos"] for s in samples)
    report.headline("expired memos at the end", last.expired["memos"])
    report.headline("expired memos, most in a sample", memo_peak)
    report.headline("oldest expired memo at the end (s past expiry)", last.oldest["memos"])
    report.headline("expired outbox/inbox rows at the end", last.expired["outbox/inbox"])
    report.headline("expired run records at the end (held by design)", last.expired["run records"])
    report.headline("file growth over the second half (MB/min)", round(growth, 3))
    report.headline("file at the end (MB)", last.file_mb)
    report.headline(
        "run p50 first / last sample (ms)", f"{samples[0].run_p50_ms:.2f} / {last.run_p50_ms:.2f}"
    )
    report.headline("RSS first / last sample (MB)", f"{samples[0].rss_mb:.0f} / {last.rss_mb:.0f}")
    cpu = sorted(s.cpu_ms_per_request for s in samples[len(samples) // 2 :])
    report.headline("CPU per request, median over the second half (ms)", cpu[len(cpu) // 2])
    report.add(
        "## Headlines",
        "",
        *(f"- {key}: {value['value']}" for key, value in report.headlines.items()),
        "",
        f"![soak]({report.name}.png)",
        "",
    )


def _figure(report: Report, samples: list[Sample]) -> None:
    t = [s.t for s in samples]
    panels: dict[str, dict[str, tuple[list[float], list[float]]]] = {
        "expired rows still present": {
            kind: (t, [float(s.expired[kind]) for s in samples]) for kind in KINDS
        },
        "oldest expired row (s past expiry)": {
            kind: (t, [s.oldest[kind] for s in samples]) for kind in ("memos", "outbox/inbox")
        },
        "file (db + WAL, MB) and RSS (MB)": {
            "file MB": (t, [s.file_mb for s in samples]),
            "RSS MB": (t, [s.rss_mb for s in samples]),
        },
        "p50 latency (ms)": {
            "run": (t, [s.run_p50_ms for s in samples]),
            "submit": (t, [s.submit_p50_ms for s in samples]),
        },
    }
    panels_lines_figure(report.out / f"{report.name}.png", report.title, "seconds", "", panels, logx=False)
