"""Smoke test of the benchmark suite: the pure-Python and SQLite parts run at tiny sizes
and leave their pages, records and plots. Timings are not asserted (see benchmarks/)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.engine_ab.counted import SHAPES

pytestmark = pytest.mark.slow  # each a benchmark run in a process of its own

ROOT = Path(__file__).resolve().parent.parent


def bench(args: list[str], *, timeout: float) -> None:
    """Run ``python -m ARGS`` (a benchmark) from the repository root; its output if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_quick_benchmarks_write_their_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    out = tmp_path / "results"
    bench(
        [
            "benchmarks",
            "overhead",
            "messages",
            "core",
            "calls",
            "users",
            "contention",
            "outbox",
            "events",
            "together",
            "schedules",
            "--quick",
            "--no-servers",
            "--out",
            str(out),
        ],
        timeout=180,
    )
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
        "events.md",
        "together.md",
        "schedules.md",
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
    events = json.loads((out / "events.json").read_text())
    assert events["parameters"]["stores"] == ["sqlite"]
    assert events["headlines"]["events.sqlite.set_event_calls"]["value"] > 0


def test_quick_asyncio_api_writes_its_results(tmp_path: Path) -> None:
    """The asyncio API benchmark at tiny sizes: both uvicorn apps on moto, the in-process pairs."""
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    pytest.importorskip("aiobotocore", reason="the asynchronous store needs the 'aio' extra")
    out = tmp_path / "results"
    bench(
        [
            "benchmarks",
            "asyncio_api",
            "--quick",
            "--stores",
            "sqlite,moto",
            "--out",
            str(out),
        ],
        timeout=240,
    )
    for name in ("asyncio_api.md", "asyncio_api.png", "asyncio_api.json", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    record = json.loads((out / "asyncio_api.json").read_text())
    assert record["parameters"]["stores (HTTP)"] == ["moto"]
    for clients in ("1", "8"):
        for variant in ("threadpool", "async"):
            cells = record["http"]["moto"][clients][variant]
            assert len(cells) == 2, (clients, variant)
            for cell in cells:
                assert cell["answered"] > 0 and cell["probes"] > 0 and not cell["failed"], cell
    assert set(record["one_client_seconds"]) == {"sqlite", "moto"}
    summary = (out / "summary.md").read_text()
    assert "asyncio_api.sqlite.async_over_sync_latency" in summary
    assert "asyncio_api.moto.async.probe_p99_ms.8" in summary


def test_quick_timers_writes_its_results(tmp_path: Path) -> None:
    """The timers benchmark at tiny sizes on SQLite: worker processes, one kill, the calls counted."""
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    out = tmp_path / "results"
    tiny = ["--requests", "6", "--window", "1", "--sleep", "0.5", "1", "--background-rate", "2"]
    tiny += ["--per-batch", "4", "--kill-visibility", "2", "--kill-lead", "2.5", "--samples", "1"]
    bench(
        [
            "benchmarks.timers",
            "--quick",
            "--stores",
            "sqlite",
            *tiny,
            "--out",
            str(out),
        ],
        timeout=120,
    )
    for name in ("timers.md", "timers.png", "timers.json"):
        assert (out / name).stat().st_size > 0, name
    record = json.loads((out / "timers.json").read_text())
    assert record["parameters"]["stores"] == ["sqlite"]
    for scenario, count in (("under load", 6), ("worker killed at due", 4)):
        timers = record["lateness"]["sqlite"][scenario]["timers"]
        assert len(timers) == count, scenario
        assert all(ran >= due for _id, _batch, due, ran, _end, _delivery in timers), scenario  # never early
    headlines = record["headlines"]
    assert headlines["timers.sqlite.load.early"]["value"] == 0
    calls = headlines["timers.sqlite.calls"]["value"]
    assert calls["start + wait"] > calls["plain step"] > 0


def test_the_engine_ab_runs_both_versions_side_by_side(tmp_path: Path) -> None:
    """Each version's child must import that version's idemflow (it fails otherwise)."""
    bench(["benchmarks.engine_ab", "--quick", "--out", str(tmp_path)], timeout=120)
    page = (tmp_path / "engine_ab.md").read_text()
    for metric in ("memory 1 steps", "memory replay of 100 steps", "sqlite 2 steps"):
        assert metric in page, metric


@pytest.mark.parametrize("shape", SHAPES)
def test_each_counted_shape_runs_its_requests_to_their_end(shape: str, tmp_path: Path) -> None:
    """What engine_ab.instructions runs under callgrind: the requests must really run (a shape
    that failed at once would count nothing and compare nothing)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.engine_ab.counted", shape, "3", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_drain_finishes_every_request_on_a_postgres_queue(tmp_path: Path) -> None:
    """A PostgreSQL of its own serving store and queue: every request completes with its effects
    applied once (the benchmark raises otherwise) and the page and record give a figure per
    process count."""
    sizes = ["--requests", "6", "--rounds", "1", "--processes", "1", "2"]
    bench(["benchmarks.drain", *sizes, "--out", str(tmp_path)], timeout=240)
    page = (tmp_path / "drain.md").read_text()
    assert "| 1 |" in page and "| 2 |" in page
    record = json.loads((tmp_path / "drain.json").read_text())
    assert record["exactly_once"] is True
    assert set(record["drain_seconds"]) == {"1", "2"}
    assert record["headlines"]["drain.requests_per_s.2_processes"]["value"] > 0


def test_quick_booking_writes_its_results(tmp_path: Path) -> None:
    """The booking benchmark at tiny sizes on SQLite: copies cost no execution, latencies recorded."""
    out = tmp_path / "results"
    bench(["benchmarks.booking", "--quick", "--stores", "sqlite", "--out", str(out)], timeout=60)
    for name in ("booking.md", "booking.json"):
        assert (out / name).stat().st_size > 0, name
    record = json.loads((out / "booking.json").read_text())
    assert record["parameters"]["stores"] == ["sqlite"]
    headlines = record["headlines"]
    for variant in ("once", "copies"):  # one worker execution per request, however many copies
        assert headlines[f"booking.sqlite.executions_per_request.{variant}"]["value"] == 1.0, variant
    assert (
        headlines["booking.sqlite.confirm_p99_ms"]["value"]
        >= headlines["booking.sqlite.confirm_p50_ms"]["value"]
        > 0
    )
    [executed] = record["executions"]["sqlite"]["3 copies"]
    assert executed["starts"] == executed["requests"] and executed["unfinished"] == 0
    assert all(got["unfinished"] == 0 and got["seconds"] for got in record["latency"]["sqlite"])


def test_quick_cost_counts_every_sqlite_variant(tmp_path: Path) -> None:
    """The cost benchmark at tiny sizes on SQLite alone: every variant on the page with positive
    numbers; the minimal exactly-once protocol makes one transaction per step (2 for 2 steps) and
    answers a duplicate of a finished request with one (its first step's, rolled back)."""
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    out = tmp_path / "results"
    bench(["benchmarks.cost", "--quick", "--stores", "sqlite", "--out", str(out)], timeout=60)
    page = (out / "cost.md").read_text()
    assert (out / "cost.png").stat().st_size > 0
    record = json.loads((out / "cost.json").read_text())
    assert record["parameters"]["stores"] == ["sqlite"]
    rows = {row["name"]: row for row in record["rows"]}
    firsts = ["plain handler", "idemflow function"]
    for what in ("minimal", "idemflow"):
        firsts += [f"{what} 1 step", f"{what} 2 steps", f"{what} 5 steps"]
    duplicated = ["idemflow function", "minimal 2 steps", "idemflow 2 steps"]
    if importlib.util.find_spec("dbos") is not None:
        firsts.append("DBOS")
        duplicated.append("DBOS")
    assert set(rows) == {*firsts, *(f"{name}, duplicate" for name in duplicated)}
    assert {row["backend"] for row in rows.values()} == {"sqlite"}
    for name, row in rows.items():
        assert f"| {name} |" in page, name
        for number in ("p50_ms", "p99_ms", "cpu_ms", "calls_path", "calls_all"):
            if name == "idemflow function, duplicate" and number.startswith("calls"):
                assert row[number] == 0, (name, number)  # answered from the handler's answer cache
            else:
                assert row[number] > 0, (name, number)
    assert rows["minimal 2 steps"]["calls_path"] == rows["minimal 2 steps"]["calls_all"] == 2
    assert rows["minimal 2 steps, duplicate"]["calls_all"] == 1
    assert rows["minimal 5 steps"]["calls_all"] == 5
    assert rows["plain handler"]["calls_all"] == 2


def test_quick_cost_on_postgres_counts_minimal_idemflow_and_dbos(tmp_path: Path) -> None:
    """The cost benchmark at tiny sizes on PostgreSQL alone (a server of its own): the minimal
    protocol, idemflow of 1, 2 and 5 steps, DBOS on the same server (in a process of its own),
    their duplicates, the ratios to DBOS and issue 45's targets beside them."""
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    pytest.importorskip("psycopg", reason="the PostgreSQL variants need the 'postgres' extra")
    out = tmp_path / "results"
    bench(["benchmarks.cost", "--quick", "--stores", "postgres", "--out", str(out)], timeout=90)
    record = json.loads((out / "cost.json").read_text())
    rows = {row["name"]: row for row in record["rows"]}
    firsts = ["plain handler"] + [
        f"{what} {n}" for what in ("minimal", "idemflow") for n in ("1 step", "2 steps", "5 steps")
    ]
    duplicated = ["minimal 2 steps", "idemflow 2 steps"]
    dbos = importlib.util.find_spec("dbos") is not None
    if dbos:
        firsts.append("DBOS")
        duplicated.append("DBOS")
    assert set(rows) == {*firsts, *(f"{name}, duplicate" for name in duplicated)}
    for name, row in rows.items():
        for number in ("p50_ms", "p99_ms", "cpu_ms", "calls_path", "calls_all"):
            assert row[number] > 0, (name, number)
    assert rows["minimal 2 steps"]["ops"] == {"round trips": 2, "transactions": 2}
    assert rows["minimal 2 steps, duplicate"]["ops"] == {"round trips": 2, "transactions": 1}
    assert rows["idemflow 2 steps"]["ops"] == {"idemflow store calls": 2}
    targets = {(t["backend"], t["ratio"], t["measure"]) for t in record["targets"]}
    assert ("postgres", "idemflow / minimal, 2 steps", "CPU") in targets
    assert ("postgres", "idemflow / minimal, 2 steps, duplicate", "p50") in targets
    if dbos:
        assert rows["DBOS"]["ops"]["transactions"] >= 2 and rows["DBOS, duplicate"]["ops"]["statements"] > 0
        assert ("postgres", "idemflow 2 steps / DBOS", "p50") in targets
        assert "| postgres | idemflow 2 steps / DBOS, duplicate |" in (out / "cost.md").read_text()


def test_quick_soak_samples_expired_rows_file_and_latency(tmp_path: Path) -> None:
    """The soak at seconds, not minutes: its page, plot and record, a sample every 2 s with the
    expired rows by kind, the file, RSS and both latencies; the store's own backlog once a pass
    of its sweeps ended (retention 1 s, a sweep every 0.5 s)."""
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra: pip install -e '.[bench]'")
    out = tmp_path / "results"
    args = ["--minutes", "0.1", "--sample-every", "2", "--retention", "1", "--expire-every", "0.5"]
    bench(["benchmarks.soak", "--quick", *args, "--tag", "smoke", "--out", str(out)], timeout=60)
    assert "| t (s) | memos | run records |" in (out / "soak-smoke.md").read_text()
    assert (out / "soak-smoke.png").stat().st_size > 0
    samples = json.loads((out / "soak-smoke.json").read_text())["samples"]
    assert len(samples) == 3
    for sample in samples:
        assert set(sample["expired"]) == {"memos", "run records", "outbox/inbox", "other"}
        assert sample["rows"] > 0 and sample["file_mb"] > 0 and sample["rss_mb"] > 0
        assert sample["run_p50_ms"] > 0 and sample["submit_p50_ms"] > 0
    assert samples[-1]["requests"] > samples[0]["requests"] > 0
    assert samples[-1]["store_backlog"] is not None and samples[-1]["store_backlog"]["deleted"] > 0


def test_quick_pool_measures_a_grow_and_a_shrink(tmp_path: Path) -> None:
    out = tmp_path / "results"
    bench(["benchmarks", "pool", "--quick", "--out", str(out)], timeout=300)
    record = json.loads((out / "pool.json").read_text())
    assert record["headlines"]["pool.sqlite.seconds.to_MAX_started"]["value"] > 0
    assert record["headlines"]["pool.sqlite.seconds.to_MIN_running"]["value"] > 0


def test_quick_renewal_writes_its_results(tmp_path: Path) -> None:
    """The continue_as_new benchmark at tiny sizes on SQLite: the rows a renewing request holds."""
    out = tmp_path / "results"
    bench(["benchmarks.renewal", "--quick", "--stores", "sqlite", "--out", str(out)], timeout=120)
    record = json.loads((out / "renewal.json").read_text())
    held = record["results"]["sqlite"]["rows held"]
    assert held and len(set(held.values())) == 1, held  # the same rows after every period measured
