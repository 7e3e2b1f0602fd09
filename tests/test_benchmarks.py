"""Smoke test of the benchmark suite: the pure-Python and SQLite parts run at tiny sizes
and leave their pages, records and plots. Timings are not asserted (see benchmarks/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmarks_write_their_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    out = tmp_path / "results"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "overhead",
            "messages",
            "core",
            "calls",
            "users",
            "contention",
            "outbox",
            "--quick",
            "--no-servers",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in (
        "overhead.md",
        "overhead.png",
        "messages.md",
        "messages.png",
        "core_overhead.md",
        "calls.md",
        "calls.png",
        "users.md",
        "users-sqlite.png",
        "contention.md",
        "contention.png",
        "outbox.md",
        "outbox.png",
        "summary.md",
    ):
        assert (out / name).stat().st_size > 0, name
    record = json.loads((out / "users.json").read_text())
    assert record["parameters"]["stores"] == ["sqlite"]
    assert "python" in record["versions"]
    assert any(key.startswith("users.sqlite.survey") for key in record["headlines"])
    summary = (out / "summary.md").read_text()
    assert "overhead.fresh.10" in summary
    assert "calls.sqlite.survey.duplicate_calls" in summary
    contention = json.loads((out / "contention.json").read_text())
    assert contention["parameters"]["stores"] == ["sqlite"]
    assert contention["headlines"]["contention.sqlite.idemflow.violations"]["value"] == 0
    assert contention["results"]["sqlite"]["hot"]["4"]["idemflow"]["failed"] == 0
    assert "contention.sqlite.idemflow.failed" in summary
    outbox = json.loads((out / "outbox.json").read_text())
    assert outbox["parameters"]["stores"] == ["sqlite"]
    assert outbox["headlines"]["outbox.sqlite.calls_on_path"]["value"]["candidate"] > 0
    assert "outbox.sqlite.candidate_over_baseline_latency" in summary
