"""``results/summary.md``: the headline numbers of every benchmark on one page,
each beside the project's performance and cost target where it has one.

Built from the ``*.json`` records the benchmarks leave in the results folder
(so a partial re-run updates its own lines and keeps the others, each line
saying when it was measured).

Run: ``python -m benchmarks summary``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.report import load_headlines
from benchmarks.common.stats import RESULTS

# (pattern on the headline key, comparison, threshold, the target in words)
TARGETS: list[tuple[str, str, float, str]] = [
    (r"core\.sqlite\.idemflow_over_plain", "<=", 1.3, "idempotent / plain ≤ 1.3 on SQLite"),
    (
        r"(core\.sqlite|cloud\.\w+)\.idemflow_over_minimal",
        "<=",
        1.15,
        "idempotent / minimal exactly-once ≤ 1.15",
    ),
    (r"calls\.\w+\.\w+\.async_over_sync_latency", "<", 1.0, "async answers the client faster than sync"),
    (r"calls\.\w+\.\w+\.duplicate_calls", "<=", 1.0, "a duplicate of a finished request costs one read"),
    (r"peers\.idemflow_over_dbos", "<", 1.0, "beat DBOS on SQLite outright"),
    (
        r"cost[\w-]*\.(sqlite|postgres)\.idemflow_over_minimal\.\d_steps?",
        "<=",
        1.2,
        "idemflow / minimal p50 ≤ 1.2 on the SQL stores (issue 45)",
    ),
    (
        r"cost[\w-]*\.(sqlite|postgres)\.idemflow_over_minimal_cpu\.\d_steps?",
        "<=",
        1.5,
        "idemflow / minimal CPU ≤ 1.5 on the SQL stores (issue 45)",
    ),
    (
        r"cost[\w-]*\.(sqlite|postgres)\.idemflow_over_minimal\.2_steps_duplicate",
        "<=",
        2.0,
        "a duplicate ≤ 2× the minimal's on the SQL stores (issue 45)",
    ),
    (r"cost[\w-]*\.sqlite\.idemflow_over_dbos", "<=", 0.1, "10× faster than DBOS on SQLite (issue 45)"),
    (r"cost[\w-]*\.postgres\.idemflow_over_dbos", "<=", 0.2, "5× faster than DBOS on PostgreSQL (issue 45)"),
    (r"overhead\.fresh\.\d+", "<=", 15.0, "library overhead ≤ 15 µs/step on MemoryStore"),
    (
        r"contention\.[\w-]+\.hot\.\d+\.idemflow_over_minimal_throughput",
        ">=",
        0.9,
        "idemflow / minimal exactly-once throughput ≥ 0.9 on a hot row",
    ),
    (r"contention\.[\w-]+\.idemflow\.failed", "<=", 0.0, "no request fails under contention"),
    (r"contention\.[\w-]+\.\w+\.violations", "<=", 0.0, "exactly once under contention"),
    (
        r"asyncio_api\.[\w-]+\.async_over_sync_latency",
        "<=",
        1.05,
        "arun / run latency ≤ 1.05 (2-step workflow, 1 client)",
    ),
    (r"timers\.[\w-]+\.\w+\.early", "<=", 0.0, "a timer never fires early"),
    (
        r"booking\.[\w-]+\.executions_per_request\.copies",
        "<=",
        1.0,
        "copies of a submitted request cost the workers no extra execution (guarantee 24)",
    ),
    (
        r"asyncio_api\.[\w-]+\.async\.probe_p99_ms\.128",
        "<=",
        20.0,
        "probe p99 ≤ 20 ms at 128 clients: the loop is never blocked",
    ),
]

SECTIONS = [
    ("Latency: idempotent against hand-written code (2-step survey workflow)", r"^(core|cloud)\."),
    ("Per request at one user: samples' workflows on every store", r"^calls\."),
    ("Under load: throughput at the most users", r"^users\..*throughput"),
    ("Under contention: a read-modify-write on a hot row (issue #20)", r"^contention\."),
    ("Peers on the same machine", r"^peers\."),
    ("Pure library overhead (MemoryStore)", r"^overhead\."),
    ("Checkpoint messages", r"^messages\."),
    ("Transactional outbox: submit against the previous release", r"^outbox\."),
    ("asyncio API: arun against run in a threadpool", r"^asyncio_api\."),
    ("Durable timers: lateness; calls of sleep, start + wait, send + receive", r"^timers\."),
    ("Booking saga: worker executions per request; confirm → completed latency", r"^booking\."),
    (
        "Cost per request: calls, request units, CPU (DynamoDB Local, Azurite, SQLite, PostgreSQL)",
        r"^cost[\w-]*\.",
    ),
]


def _value(entry: dict[str, Any]) -> tuple[float | None, str]:
    if "median" in entry:
        return float(entry["median"]), f"{entry['median']:.2f} (IQR {entry['q1']:.2f}–{entry['q3']:.2f})"
    value = entry.get("value")
    if isinstance(value, (int, float)):
        return float(value), f"{value:.2f}"
    if isinstance(value, dict):
        return None, ", ".join(f"{k} {v}" for k, v in value.items())
    return None, str(value)


def _holds(number: float, op: str, threshold: float) -> bool:
    if op == "<=":
        return number <= threshold
    if op == ">=":
        return number >= threshold
    return number < threshold


def _verdict(key: str, number: float | None, entry: dict[str, Any]) -> tuple[str, str]:
    for pattern, op, threshold, text in TARGETS:
        if re.fullmatch(pattern, key):
            if number is None:
                return text, "–"
            if _holds(number, op, threshold):
                return text, "met"
            near = entry.get("q3" if op == ">=" else "q1")  # the IQR's end nearer the target
            if isinstance(near, (int, float)) and _holds(float(near), op, threshold):
                return text, "**missed** (median; target inside the IQR)"
            return text, "**missed**"
    return "", ""


def build(out: Path) -> Path:
    records = load_headlines(out)
    lines = [
        "# idemflow benchmarks: headline numbers",
        "",
        "Every ratio is a median of per-round ratios between variants run interleaved in the same",
        "process (IQR across rounds in parentheses); see README.md for what each measures and",
        "the per-benchmark pages for the tables, plots, machine, versions and parameters.",
        "",
        "| benchmark | measured | seconds | load average at start |",
        "|---|---|---|---|",
    ]
    for name, record in records.items():
        load = record.get("machine", {}).get("load average at start (1, 5, 15 min)", "")
        lines.append(f"| [{name}]({name}.md) | {record['started']} | {record['seconds']} | {load} |")
    lines.append("")
    entries = [(key, entry) for record in records.values() for key, entry in record["headlines"].items()]
    for title, section in SECTIONS:
        chosen = [(k, e) for k, e in entries if re.search(section, k)]
        if not chosen:
            continue
        lines += [f"## {title}", "", "| measure | value | note | target | verdict |", "|---|---|---|---|---|"]
        for key, entry in chosen:
            number, shown = _value(entry)
            target, verdict = _verdict(key, number, entry)
            lines.append(f"| `{key}` | {shown} | {entry.get('note', '')} | {target} | {verdict} |")
        lines.append("")
    path = out / "summary.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Path:
    path = build(out)
    print(path.read_text())
    return path
