"""What every result page carries: the machine, the versions, the run parameters,
and the headline numbers that ``results/summary.md`` gathers on one page.

Each benchmark writes ``<name>.md`` (tables) and PNG plots beside it, plus a
``<name>.json`` with its parameters, environment and headline values, so a
reader can tell what produced a number and re-run it. ``summary.md`` is
rebuilt from every ``*.json`` present after each run.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.common.stats import Summary

PACKAGES = (
    "idemflow",
    "boto3",
    "moto",
    "azure-data-tables",
    "azure-storage-queue",
    "dbos",
    "sqlalchemy",
    "aws-lambda-powertools",
    "matplotlib",
)


def versions() -> dict[str, str]:
    """Versions of the interpreter, SQLite and every package a benchmark touches."""
    found = {"python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["azurite"] = _azurite_version()
    return found


def _azurite_version() -> str:
    manifest = Path(__file__).resolve().parents[2] / ".tools/node_modules/azurite/package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "not installed"


def machine() -> dict[str, Any]:
    """The machine as the benchmark saw it, load included (other work shares the cores)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load average at start (1, 5, 15 min)": [round(x, 2) for x in load],
    }


def fmt_ratio(summary: Summary) -> str:
    """``1.23 (IQR 1.10–1.31)``: a ratio with its spread across rounds."""
    return f"{summary.median:.2f} (IQR {summary.q1:.2f}–{summary.q3:.2f})"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


@dataclass
class Report:
    """One benchmark's page: Markdown sections, parameters, headline values."""

    name: str
    title: str
    params: dict[str, Any]
    out: Path
    lines: list[str] = field(default_factory=list)
    headlines: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    """More of the record, beside the headlines (e.g. every cell's numbers); only in the JSON."""
    started: float = field(default_factory=time.time)
    _machine: dict[str, Any] = field(default_factory=machine)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.lines.append("| " + " | ".join(header) + " |")
        self.lines.append("|" + "---|" * len(header))
        for row in rows:
            self.lines.append("| " + " | ".join(row) + " |")
        self.lines.append("")

    def headline(self, key: str, value: Any, *, note: str = "") -> None:
        """A number for summary.md: a ratio Summary, a float, or text."""
        if isinstance(value, Summary):
            self.headlines[key] = {
                "median": value.median,
                "q1": value.q1,
                "q3": value.q3,
                "note": note,
            }
        else:
            self.headlines[key] = {"value": value, "note": note}

    def write(self) -> Path:
        elapsed = time.time() - self.started
        env = versions()
        head = [
            f"# {self.title}",
            "",
            f"Measured {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started))} "
            f"in {elapsed:.0f} s. Machine: {self._machine['platform']}, {self._machine['cpus']} CPUs, "
            f"load average at start {self._machine['load average at start (1, 5, 15 min)']}.",
            "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in env.items()) + ".",
            "",
            "Parameters: " + ", ".join(f"`{k}={v}`" for k, v in self.params.items()) + ".",
            "",
        ]
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{self.name}.md"
        path.write_text("\n".join(head + self.lines).rstrip() + "\n")
        write_record(
            self.name,
            self.title,
            self.params,
            self.headlines,
            self.out,
            self.started,
            self._machine,
            data=self.data,
        )
        return path


def ratio_headline(summary: Summary, note: str = "") -> dict[str, Any]:
    """A ratio as a headline value (for benchmarks that do not use :class:`Report`)."""
    return {"median": summary.median, "q1": summary.q1, "q3": summary.q3, "note": note}


def write_record(
    name: str,
    title: str,
    params: dict[str, Any],
    headlines: dict[str, Any],
    out: Path,
    started: float,
    machine_info: dict[str, Any] | None = None,
    *,
    data: dict[str, Any] | None = None,
) -> Path:
    """``<name>.json``: what produced the page's numbers, its headline values, and ``data``
    (more numbers, under their own keys: never read by ``summary.md``)."""
    record = {
        "benchmark": name,
        "title": title,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "machine": machine_info or machine(),
        "versions": versions(),
        "parameters": params,
        "headlines": headlines,
        **(data or {}),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def load_headlines(out: Path) -> dict[str, dict[str, Any]]:
    """Every benchmark record found in ``out``, by benchmark name."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(record, dict) and "headlines" in record:
            found[str(record["benchmark"])] = record
    return found
